import { Cluster, Redis } from 'ioredis';
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { InvalidConfigError, parseEnv } from './parse-env.js';
import { createRedisClient, redisClientConfig } from './redis.js';
import { InvalidRedisUrlError, parseRedisUrl, redisUrl } from './redis-url.js';

// What the API's publisher passes: behaviour options, no connection target.
const PUBLISHER = { enableOfflineQueue: false, maxRetriesPerRequest: 1, connectionName: 'herald-api-publish' };

describe('parseRedisUrl', () => {
  it.each([
    ['redis://127.0.0.1:6379', false],
    ['rediss://:secret@redis.internal:6380/2?family=6', true],
    ['REDIS://redis.internal', false],
  ])('keeps %s as the one-endpoint URL ioredis parses itself', (url, tls) => {
    expect(parseRedisUrl(url)).toEqual({ kind: 'standalone', url, tls });
  });

  it('reads a sentinel list and the master name, with a default port', () => {
    expect(parseRedisUrl('redis+sentinel://s1:26379,s2.internal:26380,10.0.0.3/mymaster')).toEqual({
      kind: 'sentinel',
      sentinels: [
        { host: 's1', port: 26379 },
        { host: 's2.internal', port: 26380 },
        { host: '10.0.0.3', port: 26379 },
      ],
      name: 'mymaster',
      db: 0,
      tls: false,
    });
  });

  it('decodes credentials for the data nodes, the sentinels, the master name and the database', () => {
    const url =
      'rediss+sentinel://app:p%40ss%2Fw0rd@s1,[::1]:26390/my%20master?db=3&sentinelUsername=sen&sentinelPassword=s%26cret';
    expect(parseRedisUrl(url)).toEqual({
      kind: 'sentinel',
      sentinels: [
        { host: 's1', port: 26379 },
        { host: '::1', port: 26390 },
      ],
      name: 'my master',
      username: 'app',
      password: 'p@ss/w0rd',
      db: 3,
      sentinelUsername: 'sen',
      sentinelPassword: 's&cret',
      tls: true,
    });
  });

  it('takes a password without a user name', () => {
    expect(parseRedisUrl('redis+sentinel://:only-password@s1/m')).toMatchObject({ password: 'only-password' });
    expect(parseRedisUrl('redis+sentinel://:only-password@s1/m')).not.toHaveProperty('username');
  });

  it('reads cluster startup nodes, with a default port and an optional trailing slash', () => {
    expect(parseRedisUrl('redis+cluster://user:pw@n1:7000,n2/')).toEqual({
      kind: 'cluster',
      nodes: [
        { host: 'n1', port: 7000 },
        { host: 'n2', port: 6379 },
      ],
      username: 'user',
      password: 'pw',
      tls: false,
    });
    expect(parseRedisUrl('rediss+cluster://n1:7000')).toMatchObject({ kind: 'cluster', tls: true });
  });

  it.each([
    ['', /^expected a redis:\/\/, rediss:\/\/, redis\+sentinel:\/\/ or redis\+cluster:\/\/ URL$/],
    ['localhost:6379', /^expected a redis:\/\//],
    ['http://x', /^expected a .* URL, got http:\/\/$/],
    ['redis://host:port', /^not a valid redis:\/\/ URL/],
    ['redis+sentinel://s1:26379', /^redis\+sentinel:\/\/ needs the master name as its path, as in /],
    ['redis+sentinel://s1:26379/', /needs the master name/],
    ['redis+sentinel://s1/a/b', /takes only the master name as its path/],
    ['redis+sentinel:///mymaster', /needs at least one host/],
    ['redis+sentinel://s1:99999/m', /host 1 of 1 is not host\[:port\]/],
    ['redis+sentinel://s1:26379,/m', /host 2 of 2 is not host\[:port\]/],
    ['redis+sentinel://s1 s2/m', /host 1 of 1 is not host\[:port\]/],
    ['redis+sentinel://s1/m?db=one', /parameter db must be a database number/],
    [
      'redis+sentinel://s1/m?password=x',
      /has an unknown parameter \(it takes only db, sentinelUsername, sentinelPassword\)/,
    ],
    ['redis+sentinel://s1/m?db=1&db=2', /parameter db is repeated/],
    ['redis+sentinel://s1/m#frag', /must not contain "#"/],
    ['redis+sentinel://:%zz@s1/m', /^the password in the URL is not valid percent-encoding$/],
    ['redis+cluster://n1/1', /^redis\+cluster:\/\/ takes no database path: Redis Cluster has only database 0$/],
    ['redis+cluster://n1?db=1', /has an unknown parameter \(it takes no parameters\)/],
    ['redis+cluster://', /needs at least one host/],
  ])('refuses %j with one line', (url, reason) => {
    let error: unknown;
    try {
      parseRedisUrl(url);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(InvalidRedisUrlError);
    expect((error as Error).message).toMatch(reason);
    expect((error as Error).message).not.toContain('\n');
  });

  it.each([
    'redis+sentinel://:hunter2/x?y@s1/m',
    'redis+cluster://:hunter2?x@n1',
    'redis+cluster://:hun/ter2@n1',
    'redis+sentinel://:hunter2#@s1/m',
  ])('never repeats a password that was not percent-encoded (%s)', (url) => {
    expect(() => parseRedisUrl(url)).toThrow(InvalidRedisUrlError);
    try {
      parseRedisUrl(url);
    } catch (error) {
      expect((error as Error).message).not.toMatch(/hun|ter2/);
    }
  });
});

describe('redisUrl (zod)', () => {
  const schema = z.object({ REDIS_URL: redisUrl() });

  it('keeps a valid URL as the string', () => {
    const url = 'redis+cluster://n1:7000,n2:7001';
    expect(parseEnv(schema, { REDIS_URL: url })).toEqual({ REDIS_URL: url });
  });

  it('names REDIS_URL in one line', () => {
    let error: unknown;
    try {
      parseEnv(schema, { REDIS_URL: 'redis+cluster://n1/2' });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(InvalidConfigError);
    expect((error as InvalidConfigError).lines).toEqual([
      'REDIS_URL: redis+cluster:// takes no database path: Redis Cluster has only database 0',
    ]);
  });
});

describe('redisClientConfig', () => {
  it('hands a one-endpoint URL and the options to ioredis unchanged', () => {
    const url = 'rediss://:pw@redis.internal:6380/1';
    expect(redisClientConfig(url, PUBLISHER)).toEqual({ kind: 'standalone', url, options: PUBLISHER });
  });

  it('turns a sentinel URL into ioredis sentinel options next to the caller’s', () => {
    const url = 'redis+sentinel://:data@s1:26379,s2:26380/herald?db=2&sentinelPassword=watch';
    expect(redisClientConfig(url, PUBLISHER)).toEqual({
      kind: 'sentinel',
      options: {
        ...PUBLISHER,
        sentinels: [
          { host: 's1', port: 26379 },
          { host: 's2', port: 26380 },
        ],
        name: 'herald',
        db: 2,
        password: 'data',
        sentinelPassword: 'watch',
      },
    });
  });

  it('uses TLS to the sentinels and the data nodes with rediss+sentinel', () => {
    expect(redisClientConfig('rediss+sentinel://s1/herald').options).toMatchObject({
      tls: {},
      sentinelTLS: {},
      enableTLSForSentinelMode: true,
    });
  });

  it('splits the caller’s options between the Cluster and its node connections', () => {
    const retryStrategy = () => 100;
    const config = redisClientConfig('redis+cluster://u:pw@n1:7000,n2:7001', {
      ...PUBLISHER,
      lazyConnect: false,
      enableAutoPipelining: true,
      retryStrategy,
      autoResubscribe: true,
    });
    expect(config).toEqual({
      kind: 'cluster',
      nodes: [
        { host: 'n1', port: 7000 },
        { host: 'n2', port: 7001 },
      ],
      options: {
        enableOfflineQueue: false,
        lazyConnect: false,
        enableAutoPipelining: true,
        clusterRetryStrategy: retryStrategy,
        redisOptions: {
          maxRetriesPerRequest: 1,
          connectionName: 'herald-api-publish',
          autoResubscribe: true,
          username: 'u',
          password: 'pw',
        },
      },
    });
  });

  it('uses TLS to every node with rediss+cluster, connecting by the names the cluster announces', () => {
    const config = redisClientConfig('rediss+cluster://n1:7000');
    if (config.kind !== 'cluster') throw new Error('expected a cluster');
    expect(config.options.redisOptions).toEqual({ tls: {} });
    const lookedUp = new Promise((resolve) => config.options.dnsLookup?.('node-1.cache.example', (_, a) => resolve(a)));
    return expect(lookedUp).resolves.toBe('node-1.cache.example');
  });

  it('throws one line naming REDIS_URL for a bad URL, without the password', () => {
    expect(() => redisClientConfig('redis+sentinel://:hunter2@s1')).toThrow(
      /^REDIS_URL: redis\+sentinel:\/\/ needs the master name/,
    );
    expect(() => redisClientConfig('redis+sentinel://:hunter2@s1')).not.toThrow(/hunter2/);
  });
});

describe('createRedisClient', () => {
  it('returns a Redis for one endpoint and for Sentinel, a Cluster for Redis Cluster', async () => {
    const standalone = createRedisClient('redis://127.0.0.1:1', { lazyConnect: true });
    const sentinel = createRedisClient('redis+sentinel://127.0.0.1:1/herald', { lazyConnect: true });
    const cluster = createRedisClient('redis+cluster://127.0.0.1:1', { lazyConnect: true });
    try {
      expect(standalone).toBeInstanceOf(Redis);
      expect(sentinel).toBeInstanceOf(Redis);
      expect((sentinel as Redis).options).toMatchObject({
        name: 'herald',
        sentinels: [{ host: '127.0.0.1', port: 1 }],
      });
      expect(cluster).toBeInstanceOf(Cluster);
      expect([standalone.status, sentinel.status, cluster.status]).toEqual(['wait', 'wait', 'wait']);
    } finally {
      for (const client of [standalone, sentinel, cluster]) client.disconnect();
    }
  });
});

describe('createRedisClient errors', () => {
  it('hears every error event itself, so an emitted error never ends the process', () => {
    const client = createRedisClient('redis://127.0.0.1:1', { lazyConnect: true });
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      // ioredis emits some errors with a plain emit('error'), which throws when nobody listens.
      expect(() => client.emit('error', new Error('Command queue state error'))).not.toThrow();
      expect(stderr).toHaveBeenCalledWith(expect.stringContaining('Command queue state error'));
    } finally {
      stderr.mockRestore();
      client.disconnect();
    }
  });

  it("leaves the logging to the caller's own listener when there is one", () => {
    const client = createRedisClient('redis+cluster://127.0.0.1:1', { lazyConnect: true });
    const heard: string[] = [];
    client.on('error', (error: Error) => heard.push(error.message));
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      client.emit('error', new Error('node lost'));
      expect(heard).toEqual(['node lost']);
      expect(stderr).not.toHaveBeenCalled();
    } finally {
      stderr.mockRestore();
      client.disconnect();
    }
  });
});
