import { z } from 'zod';

/**
 * The `REDIS_URL` forms Herald accepts (README, docs/operations.md):
 *
 * - `redis://[user:password@]host:6379[/db]`, `rediss://…` (TLS): one endpoint, handed to ioredis as is.
 * - `redis+sentinel://[user:password@]host1:26379,host2:26379/<master-name>[?db=N&sentinelUsername=…&sentinelPassword=…]`
 *   (`rediss+sentinel://` for TLS to the sentinels and the data nodes): ioredis asks the sentinels for
 *   the master's address and follows it across failovers. `user:password` authenticate to the data
 *   nodes; `sentinelUsername`/`sentinelPassword` to the sentinels. A host without a port means 26379.
 * - `redis+cluster://[user:password@]host1:6379,host2:6379` (`rediss+cluster://` for TLS): a Redis
 *   Cluster, reached through any of the listed startup nodes. A host without a port means 6379. Redis
 *   Cluster has only database 0, so the URL takes no path and no parameters.
 *
 * Special characters in user names, passwords and the master name are percent-encoded, as in any URL.
 * Error messages never repeat the URL (it usually holds a password), only the scheme.
 */

export interface RedisHostPort {
  host: string;
  port: number;
}

export type RedisTarget =
  | {
      kind: 'standalone';
      /** The URL as given: ioredis parses it (its own query options included), exactly as before. */
      url: string;
      tls: boolean;
    }
  | {
      kind: 'sentinel';
      sentinels: RedisHostPort[];
      /** The master group name the sentinels monitor. */
      name: string;
      username?: string;
      password?: string;
      db: number;
      sentinelUsername?: string;
      sentinelPassword?: string;
      tls: boolean;
    }
  | {
      kind: 'cluster';
      nodes: RedisHostPort[];
      username?: string;
      password?: string;
      tls: boolean;
    };

/** Thrown by {@link parseRedisUrl}; the message is one line and never contains the URL. */
export class InvalidRedisUrlError extends Error {
  override readonly name = 'InvalidRedisUrlError';
}

const FORMS = 'redis://, rediss://, redis+sentinel:// or redis+cluster://';
const SENTINEL_PARAMS = ['db', 'sentinelUsername', 'sentinelPassword'] as const;
const DEFAULT_SENTINEL_PORT = 26379;
const DEFAULT_REDIS_PORT = 6379;
const ENCODING_HINT = 'percent-encode special characters in the user name and password';

/**
 * Parses a `REDIS_URL` (see the forms above).
 * @throws InvalidRedisUrlError with a one-line reason that does not repeat the URL
 */
export function parseRedisUrl(url: string): RedisTarget {
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(url)?.[1]?.toLowerCase();
  if (scheme === undefined) throw new InvalidRedisUrlError(`expected a ${FORMS} URL`);
  const tls = scheme.startsWith('rediss');
  switch (scheme) {
    case 'redis':
    case 'rediss':
      return parseStandalone(url, tls);
    case 'redis+sentinel':
    case 'rediss+sentinel':
      return parseSentinel(url, scheme, tls);
    case 'redis+cluster':
    case 'rediss+cluster':
      return parseCluster(url, scheme, tls);
    default:
      throw new InvalidRedisUrlError(`expected a ${FORMS} URL, got ${scheme}://`);
  }
}

/** A zod schema for a `REDIS_URL` setting: the value stays the URL string, checked by {@link parseRedisUrl}. */
export function redisUrl() {
  return z.string().superRefine((value, ctx) => {
    try {
      parseRedisUrl(value);
    } catch (error) {
      if (!(error instanceof InvalidRedisUrlError)) throw error;
      ctx.addIssue({ code: 'custom', message: error.message });
    }
  });
}

function parseStandalone(url: string, tls: boolean): RedisTarget {
  try {
    new URL(url);
  } catch {
    throw new InvalidRedisUrlError(`not a valid ${tls ? 'rediss' : 'redis'}:// URL (${ENCODING_HINT})`);
  }
  return { kind: 'standalone', url, tls };
}

function parseSentinel(url: string, scheme: string, tls: boolean): RedisTarget {
  const parts = splitMultiHostUrl(url, scheme);
  const example = `${scheme}://sentinel-0:26379,sentinel-1:26379/mymaster`;
  if (parts.path === '' || parts.path === '/') {
    throw new InvalidRedisUrlError(`${scheme}:// needs the master name as its path, as in ${example}`);
  }
  const name = decode(parts.path.slice(1), 'the master name');
  if (name.includes('/')) {
    throw new InvalidRedisUrlError(`${scheme}:// takes only the master name as its path, as in ${example}`);
  }
  const params = readParams(parts.query, scheme, SENTINEL_PARAMS);
  let db = 0;
  if (params.db !== undefined) {
    if (!/^\d{1,9}$/.test(params.db)) {
      throw new InvalidRedisUrlError(`${scheme}:// parameter db must be a database number (0, 1, …)`);
    }
    db = Number(params.db);
  }
  return {
    kind: 'sentinel',
    sentinels: parseHosts(parts.hosts, scheme, DEFAULT_SENTINEL_PORT),
    name,
    ...parts.credentials,
    db,
    ...(params.sentinelUsername ? { sentinelUsername: params.sentinelUsername } : {}),
    ...(params.sentinelPassword ? { sentinelPassword: params.sentinelPassword } : {}),
    tls,
  };
}

function parseCluster(url: string, scheme: string, tls: boolean): RedisTarget {
  const parts = splitMultiHostUrl(url, scheme);
  if (parts.path !== '' && parts.path !== '/') {
    throw new InvalidRedisUrlError(`${scheme}:// takes no database path: Redis Cluster has only database 0`);
  }
  readParams(parts.query, scheme, []);
  return { kind: 'cluster', nodes: parseHosts(parts.hosts, scheme, DEFAULT_REDIS_PORT), ...parts.credentials, tls };
}

interface MultiHostParts {
  credentials: { username?: string; password?: string };
  hosts: string;
  path: string;
  query: string;
}

/** `scheme://[userinfo@]hosts[/path][?query]`: WHATWG URL can't parse a host list, so this does. */
function splitMultiHostUrl(url: string, scheme: string): MultiHostParts {
  const rest = url.slice(scheme.length + '://'.length);
  if (rest.includes('#')) throw new InvalidRedisUrlError(`${scheme}:// URL must not contain "#" (${ENCODING_HINT})`);
  const authorityEnd = rest.search(/[/?]/);
  const authority = authorityEnd === -1 ? rest : rest.slice(0, authorityEnd);
  const afterAuthority = authorityEnd === -1 ? '' : rest.slice(authorityEnd);
  const queryStart = afterAuthority.indexOf('?');
  const path = queryStart === -1 ? afterAuthority : afterAuthority.slice(0, queryStart);
  const query = queryStart === -1 ? '' : afterAuthority.slice(queryStart + 1);

  const at = authority.lastIndexOf('@');
  const credentials: MultiHostParts['credentials'] = {};
  if (at !== -1) {
    const userinfo = authority.slice(0, at);
    const colon = userinfo.indexOf(':');
    const username = decode(colon === -1 ? userinfo : userinfo.slice(0, colon), 'the user name');
    const password = colon === -1 ? '' : decode(userinfo.slice(colon + 1), 'the password');
    if (username) credentials.username = username;
    if (password) credentials.password = password;
  }
  return { credentials, hosts: at === -1 ? authority : authority.slice(at + 1), path, query };
}

const HOST_PORT = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9._-]+))(?::(\d{1,5}))?$/;

function parseHosts(list: string, scheme: string, defaultPort: number): RedisHostPort[] {
  if (list === '') {
    throw new InvalidRedisUrlError(`${scheme}:// needs at least one host, as host1:port,host2:port`);
  }
  const entries = list.split(',');
  return entries.map((entry, index) => {
    const match = HOST_PORT.exec(entry);
    const port = match?.[3] === undefined ? defaultPort : Number(match[3]);
    if (!match || port < 1 || port > 65_535) {
      // Not the entry itself: a password with an unencoded "/" or "?" ends up here.
      throw new InvalidRedisUrlError(
        `${scheme}:// host ${index + 1} of ${entries.length} is not host[:port] (${ENCODING_HINT})`,
      );
    }
    return { host: (match[1] ?? match[2])!, port };
  });
}

function readParams(query: string, scheme: string, known: readonly string[]): Record<string, string | undefined> {
  const params = new URLSearchParams(query);
  const takes = known.length === 0 ? 'takes no parameters' : `takes only ${known.join(', ')}`;
  const values: Record<string, string | undefined> = {};
  for (const key of new Set(params.keys())) {
    // The name is not repeated: a password with an unencoded "?" would put part of it here.
    if (!known.includes(key)) throw new InvalidRedisUrlError(`${scheme}:// has an unknown parameter (it ${takes})`);
    if (params.getAll(key).length > 1) throw new InvalidRedisUrlError(`${scheme}:// parameter ${key} is repeated`);
    values[key] = params.get(key) ?? undefined;
  }
  return values;
}

function decode(text: string, what: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new InvalidRedisUrlError(`${what} in the URL is not valid percent-encoding`);
  }
}
