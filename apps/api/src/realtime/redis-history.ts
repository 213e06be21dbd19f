import { randomUUID } from 'node:crypto';
import { isCluster, type RedisClient } from '@herald/config/redis';
import { type HistoryEntry, type PostPublishedEventV1, subscriptionRedisKeys } from '@herald/contracts';
import { CursorExpiredError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { AppendOutcome, HistoryLimits, SubscriptionHistory } from './history.js';

/**
 * The subscription history in Redis. Per organisation (all keys hash-tagged `{orgId}`, one slot):
 * - `<prefix>history:{org}`: a stream whose entry ids are `<position>-0`, capped at `size` entries;
 * - `<prefix>history-meta:{org}`: a hash of the `epoch` and the last `position`;
 * - `<prefix>history-ids:{org}`: a sorted set of the kept event ids (score: position), for dedup;
 * - `<prefix>post-published:{org}`: the live channel.
 * One Lua script appends an event (next position, XADD with exact MAXLEN, PEXPIRE of all three keys,
 * PUBLISH of the entry, SPUBLISH on Redis Cluster), so an event is in the history exactly when it was published live, in one
 * round trip. When the keys are gone (flushed, restarted without persistence, expired after `ttlMs`)
 * the next append starts a new epoch at position 1, and cursors of the old epoch are refused.
 *
 * Live delivery per organisation goes through one local feed per pod that hands its listeners every
 * position once, in order: a gap (a message lost while the subscriber connection was down) is filled
 * from the stream before later entries, and after the subscriber connection comes back each feed reads
 * what it missed.
 */

/** Entries read per XRANGE at most: one script call stays small and quick whatever is asked. */
const READ_PAGE_SIZE = 500;

const APPEND_SCRIPT = `
local known = redis.call('ZSCORE', KEYS[3], ARGV[1])
local epoch = redis.call('HGET', KEYS[2], 'epoch')
if known and epoch then
  local found = redis.call('XRANGE', KEYS[1], known .. '-0', known .. '-0')
  if found[1] then return {epoch, tonumber(known), found[1][2][2]} end
end
if not epoch then
  epoch = ARGV[5]
  redis.call('DEL', KEYS[1], KEYS[3])
  redis.call('HSET', KEYS[2], 'epoch', epoch, 'position', 0)
end
local position = redis.call('HINCRBY', KEYS[2], 'position', 1)
local size = tonumber(ARGV[3])
if size > 0 then
  redis.call('XADD', KEYS[1], 'MAXLEN', size, position .. '-0', 'e', ARGV[2])
  redis.call('ZADD', KEYS[3], position, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', position - size)
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
end
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call(ARGV[6], KEYS[4], '{"position":' .. position .. ',"epoch":"' .. epoch .. '","event":' .. ARGV[2] .. '}')
return {epoch, position, false}
`;

const READ_SCRIPT = `
local epoch = redis.call('HGET', KEYS[2], 'epoch')
local last = redis.call('HGET', KEYS[2], 'position')
if not epoch then return {false, false, {}} end
return {epoch, tonumber(last), redis.call('XRANGE', KEYS[1], '(' .. ARGV[1] .. '-0', '+', 'COUNT', ARGV[2])}
`;

/** The organisation's place, starting a history (new epoch, position 0) when there is none. */
const HEAD_SCRIPT = `
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if not epoch then
  epoch = ARGV[1]
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('HSET', KEYS[1], 'epoch', epoch, 'position', 0)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {epoch, tonumber(redis.call('HGET', KEYS[1], 'position'))}
`;

type RawEntries = Array<[string, string[]]>;

interface HistoryCommands {
  heraldHistoryAppend(
    history: string,
    meta: string,
    ids: string,
    channel: string,
    eventId: string,
    json: string,
    size: number,
    ttlMs: number,
    newEpoch: string,
    publishCommand: 'PUBLISH' | 'SPUBLISH',
  ): Promise<[string, number, string | null]>;
  heraldHistoryRead(
    history: string,
    meta: string,
    after: number,
    count: number,
  ): Promise<[string | null, number | null, RawEntries]>;
  heraldHistoryHead(
    meta: string,
    history: string,
    ids: string,
    newEpoch: string,
    ttlMs: number,
  ): Promise<[string, number]>;
}

export interface RedisHistoryDeps {
  /** Commands (scripts); fails fast while Redis is down. */
  commands: RedisClient;
  /**
   * Replay reads (`readAfter`), on a connection of their own so a resume storm never queues the
   * appends (live publishes) behind its replies; fails fast while Redis is down. @default commands
   */
  reader?: RedisClient;
  /** Subscriber connection: re-subscribes by itself after a reconnect. */
  subscriber: RedisClient;
  prefix: string;
  limits: HistoryLimits;
  logger: Logger;
}

interface Feed {
  orgId: string;
  channel: string;
  listeners: Set<(entry: HistoryEntry) => void>;
  subscribed: Promise<unknown>;
  last?: { epoch: string; position: number };
  filling: boolean;
  queue: HistoryEntry[];
  /** The wait before the next fill after one that failed (0: the last fill did not fail). */
  retryMs: number;
  /** The server refused the SUBSCRIBE made after a reconnect: the next listen asks again. */
  refused?: boolean;
}

/**
 * A fill that failed (Redis not ready: the command is refused at once, with no I/O) is tried again after
 * this long, doubling up to {@link FILL_RETRY_MAX_MS}. Retrying at once looped on promise callbacks
 * alone: the event loop never ran again, so the connection could never become ready, and the pod
 * answered nothing (found by `pnpm soak` with Redis restarted and its link stalled).
 */
const FILL_RETRY_MIN_MS = 50;
const FILL_RETRY_MAX_MS = 5_000;

export function createRedisHistory(deps: RedisHistoryDeps): SubscriptionHistory {
  const { prefix, limits, logger } = deps;
  for (const client of new Set([deps.commands, deps.reader ?? deps.commands])) {
    client.defineCommand('heraldHistoryAppend', { numberOfKeys: 4, lua: APPEND_SCRIPT });
    client.defineCommand('heraldHistoryRead', { numberOfKeys: 2, lua: READ_SCRIPT });
    client.defineCommand('heraldHistoryHead', { numberOfKeys: 3, lua: HEAD_SCRIPT });
  }
  const commands = deps.commands as unknown as HistoryCommands;
  const reader = (deps.reader ?? deps.commands) as unknown as HistoryCommands;
  // Redis Cluster: sharded pub/sub (SPUBLISH/SSUBSCRIBE, Redis ≥ 7). The live channel carries the org's
  // `{orgId}` hash tag like its history keys, so the script publishes on the shard that owns them and
  // only pods subscribed there hear it, instead of every message crossing the cluster bus to every node.
  const sharded = isCluster(deps.subscriber);
  const subscribe = (channel: string) =>
    sharded ? deps.subscriber.ssubscribe(channel) : deps.subscriber.subscribe(channel);
  const unsubscribe = (channel: string) =>
    sharded ? deps.subscriber.sunsubscribe(channel) : deps.subscriber.unsubscribe(channel);
  const feeds = new Map<string, Feed>(); // by channel

  deps.subscriber.on(sharded ? 'smessage' : 'message', (channel: string, message: string) => {
    const feed = feeds.get(channel);
    if (!feed) return;
    let entry: HistoryEntry;
    try {
      entry = JSON.parse(message) as HistoryEntry;
    } catch (error) {
      logger.warn({ err: error, channel }, 'unreadable history entry on the live channel');
      return;
    }
    receive(feed, entry);
  });
  let readyOnce = false;
  // Back after an outage: once each channel is subscribed again, read what was missed meanwhile.
  const resubscribeAll = () => {
    for (const feed of feeds.values()) {
      feed.refused = false;
      feed.subscribed = subscribe(feed.channel).then(
        () => startFill(feed),
        (error: Error) => {
          // Its listeners stay (they hear nothing until a SUBSCRIBE succeeds); the next listen asks again.
          feed.refused = true;
          logger.warn({ err: error, channel: feed.channel }, 'redis re-subscribe failed');
        },
      );
    }
  };
  deps.subscriber.on('ready', () => {
    if (!readyOnce) {
      readyOnce = true;
      return;
    }
    resubscribeAll();
  });
  // Redis Cluster: a master's SSUBSCRIBE connection can drop and come back (a restart, a failover, slots
  // moving) while the Cluster itself stays `ready`. ioredis re-creates the shard subscribers and emits
  // `subscribersReady`; subscribe every feed again (a no-op where still subscribed; it waits behind
  // ioredis's own re-subscribe on that connection) and fill what was published before it took effect,
  // rather than waiting for the organisation's next event to reveal the gap.
  if (sharded) deps.subscriber.on('subscribersReady', resubscribeAll);

  function receive(feed: Feed, entry: HistoryEntry) {
    if (feed.filling) {
      feed.queue.push(entry);
      return;
    }
    const { last } = feed;
    if (last && entry.epoch === last.epoch && entry.position <= last.position) return; // delivered by a fill
    // A gap, or a new epoch that didn't start at 1 here: read what was missed first.
    const expected = last && entry.epoch === last.epoch ? last.position + 1 : 1;
    if (last && entry.position > expected && limits.size > 0) {
      feed.queue.push(entry);
      startFill(feed);
      return;
    }
    deliver(feed, entry);
  }

  function deliver(feed: Feed, entry: HistoryEntry) {
    feed.last = { epoch: entry.epoch, position: entry.position };
    for (const listener of [...feed.listeners]) listener(entry);
  }

  function startFill(feed: Feed) {
    if (feed.filling || !feed.last || limits.size === 0) return;
    feed.filling = true;
    void fill(feed).then((filled) => {
      if (!filled) {
        // Entries that arrive meanwhile wait in the queue (the oldest dropped past the history's size:
        // the fill reads them from the history anyway); the feed stays `filling` until the retry.
        feed.retryMs = Math.min(Math.max(2 * feed.retryMs, FILL_RETRY_MIN_MS), FILL_RETRY_MAX_MS);
        if (feed.queue.length > limits.size) feed.queue.splice(0, feed.queue.length - limits.size);
        setTimeout(() => {
          feed.filling = false;
          if (feeds.get(feed.channel) === feed) startFill(feed);
        }, feed.retryMs).unref();
        return;
      }
      feed.retryMs = 0;
      feed.filling = false;
      const queued = feed.queue.splice(0);
      for (const entry of queued) receive(feed, entry);
    });
  }

  /** Reads and delivers what the feed missed; false when the history could not be read. */
  async function fill(feed: Feed): Promise<boolean> {
    const last = feed.last;
    if (!last) return true;
    try {
      let missed: HistoryEntry[];
      try {
        missed = await readAfter(commands, feed.orgId, last.epoch, last.position);
      } catch (error) {
        if (!(error instanceof CursorExpiredError)) throw error;
        // The history was lost meanwhile (Redis restarted empty): everything in the new one is new here.
        const [epoch] = await commands.heraldHistoryRead(
          subscriptionRedisKeys(prefix, feed.orgId).history,
          subscriptionRedisKeys(prefix, feed.orgId).meta,
          0,
          1,
        );
        missed = epoch && epoch !== last.epoch ? await readAfter(commands, feed.orgId, epoch, 0) : [];
        if (missed.length === 0)
          logger.warn({ orgId: feed.orgId }, 'live subscribers missed events no longer in the history');
      }
      for (const entry of missed) {
        const current = feed.last;
        if (!current || current.epoch !== entry.epoch || entry.position > current.position) deliver(feed, entry);
      }
      return true;
    } catch (error) {
      if (feed.retryMs === 0) {
        logger.warn({ err: error, orgId: feed.orgId }, 'could not read missed events from the history; retrying');
      }
      return false;
    }
  }

  async function readAfter(
    client: HistoryCommands,
    orgId: string,
    epoch: string,
    position: number,
    limit = Number.POSITIVE_INFINITY,
  ): Promise<HistoryEntry[]> {
    const keys = subscriptionRedisKeys(prefix, orgId);
    const entries: HistoryEntry[] = [];
    let after = position;
    for (;;) {
      const count = Math.min(READ_PAGE_SIZE, limit - entries.length);
      const [currentEpoch, last, raw] = await client.heraldHistoryRead(keys.history, keys.meta, after, count);
      if (currentEpoch !== epoch || last === null)
        throw new CursorExpiredError('the history this cursor belongs to is gone');
      if (after > last) throw new CursorExpiredError('cursor is ahead of the history');
      if (after === last && entries.length === 0) return entries;
      const page = raw.map(([id, fields]) => parseEntry(id, fields, currentEpoch));
      const first = page[0];
      if (!first || first.position !== after + 1) {
        if (entries.length === 0) throw new CursorExpiredError('cursor is older than the history');
        return entries; // trimmed while paging: what was read is contiguous
      }
      entries.push(...page);
      after = page[page.length - 1]?.position ?? after;
      if (page.length < count || after >= last || entries.length >= limit) return entries;
    }
  }

  return {
    kind: 'redis',
    enabled: limits.size > 0,
    async append(events) {
      const appendOne = (event: PostPublishedEventV1) => {
        const keys = subscriptionRedisKeys(prefix, event.orgId);
        return commands.heraldHistoryAppend(
          keys.history,
          keys.meta,
          keys.ids,
          keys.channel,
          event.eventId,
          JSON.stringify(event),
          limits.size,
          limits.ttlMs,
          randomUUID().slice(0, 8),
          sharded ? 'SPUBLISH' : 'PUBLISH',
        );
      };
      // Redis Cluster: one organisation's events one after another, the next only once the previous
      // succeeded (organisations still concurrently). Sent all at once, a command that the cluster client
      // retries (CLUSTERDOWN, TRYAGAIN, a reconnect while a master comes back) can land after a later one
      // of the same organisation, and the history would hold them out of order (test/redis-cluster.test.ts).
      // One endpoint: all at once, pipelined on the one connection, which keeps them in order.
      const tails = new Map<string, Promise<unknown>>();
      const settled = await Promise.allSettled(
        events.map((event) => {
          const previous = sharded ? tails.get(event.orgId) : undefined;
          const appended = previous ? previous.then(() => appendOne(event)) : appendOne(event);
          tails.set(event.orgId, appended);
          return appended;
        }),
      );
      let failure: Error | undefined;
      return settled.map((result, index): AppendOutcome => {
        if (failure) return { ok: false, error: failure };
        if (result.status === 'rejected') {
          failure = result.reason instanceof Error ? result.reason : new Error(String(result.reason));
          return { ok: false, error: failure };
        }
        const [epoch, position, existing] = result.value;
        const event = existing
          ? (JSON.parse(existing) as PostPublishedEventV1)
          : (events[index] as PostPublishedEventV1);
        return { ok: true, entry: { epoch, position: Number(position), event } };
      });
    },
    async listen(orgId, listener) {
      const { channel } = subscriptionRedisKeys(prefix, orgId);
      let feed = feeds.get(channel);
      if (!feed) {
        const created: Feed = {
          orgId,
          channel,
          listeners: new Set(),
          subscribed: subscribe(channel),
          filling: false,
          retryMs: 0,
          queue: [],
        };
        feeds.set(channel, created);
        feed = created;
      }
      const joined = feed;
      if (joined.refused) {
        // Refused after a reconnect: without a new SUBSCRIBE this listen (and the feed's listeners) would
        // hear nothing. Granted now, the feed's gap since then is filled as after any reconnect.
        joined.refused = false;
        joined.subscribed = subscribe(channel).then(() => startFill(joined));
        joined.subscribed.catch(() => {
          joined.refused = true;
        });
      }
      joined.listeners.add(listener);
      try {
        await joined.subscribed;
      } catch (error) {
        joined.listeners.delete(listener);
        // A refused SUBSCRIBE (the server's answer, with the connection up: no `ready` will come to try it
        // again) must not stay as the organisation's feed: every later listen would wait on the same
        // refusal. Forgotten, the next listen subscribes anew.
        if (joined.listeners.size === 0 && feeds.get(channel) === joined) feeds.delete(channel);
        throw error;
      }
      return () => {
        joined.listeners.delete(listener);
        if (joined.listeners.size === 0 && feeds.get(channel) === joined) {
          feeds.delete(channel);
          unsubscribe(channel).catch((error: Error) => {
            logger.warn({ err: error, channel }, 'redis unsubscribe failed');
          });
        }
      };
    },
    readAfter: (orgId, epoch, position, limit) => readAfter(reader, orgId, epoch, position, limit),
    async head(orgId) {
      const keys = subscriptionRedisKeys(prefix, orgId);
      const [epoch, position] = await reader.heraldHistoryHead(
        keys.meta,
        keys.history,
        keys.ids,
        randomUUID().slice(0, 8),
        limits.ttlMs,
      );
      return { epoch, position: Number(position) };
    },
    async ready() {},
    async close() {
      feeds.clear();
    },
  };
}

function parseEntry(id: string, fields: string[], epoch: string): HistoryEntry {
  const json = fields[fields.indexOf('e') + 1] ?? 'null';
  return { position: Number.parseInt(id, 10), epoch, event: JSON.parse(json) as PostPublishedEventV1 };
}
