import type { HistogramData } from './common.js';

/**
 * One event of a run: a post that will be published once. Herald's are drafts created before the
 * measurement (so only `publishPost` runs during it); the raw baseline's are generated here.
 */
export interface BenchEvent {
  postId: string;
  title: string;
  tags: string[];
  authorName: string;
}

/** The one subscription every socket makes (one org, one selection). */
export const SUBSCRIPTION_QUERY =
  'subscription PostPublished($orgId: ID!) { postPublished(orgId: $orgId) { id title tags author { name } } }';

/** The peers of peer-server.ts (`mercurius`: with its JIT; `mercurius-nojit`: without). */
export const PEERS = ['apollo', 'mercurius', 'mercurius-nojit', 'yoga'] as const;
export type Peer = (typeof PEERS)[number];

/** The organisation every socket of a peer subscribes to (the peers publish every event there). */
export const PEER_ORG_ID = 'bench';

export const BENCH_TAGS = ['bench', 'realtime', 'fan-out'];
export const BENCH_AUTHOR = { id: 'bench-writer', name: 'Bench Writer' };

/** A title that puts Herald's `next` frame at about 290 bytes. */
export function benchTitle(index: number): string {
  return `Benchmark post ${String(index).padStart(6, '0')}: one event fanned out to every subscriber of the organisation`;
}

/** Every socket's subscription id: unique across the run, so a frame meant for another socket can't pass. */
export function subscriptionId(globalIndex: number): string {
  return `s${globalIndex}`;
}

/** `payload` of the `next` message for an event, exactly as graphql-js orders the selection. */
export function payloadJson(event: BenchEvent): string {
  return JSON.stringify({
    data: {
      postPublished: { id: event.postId, title: event.title, tags: event.tags, author: { name: event.authorName } },
    },
  });
}

/** The whole `next` frame graphql-ws sends: `{"id":…,"type":"next","payload":…}`. */
export function canonicalFrame(subId: string, event: BenchEvent): string {
  return `{"id":${JSON.stringify(subId)},"type":"next","payload":${payloadJson(event)}}`;
}

/**
 * A canonical frame is `head(subId) + postId + tail(event)`: the head ends with the opening quote of the
 * post id, the tail starts with its closing quote. Checking a frame is then two byte comparisons.
 */
export function frameHead(subId: string): string {
  return `{"id":${JSON.stringify(subId)},"type":"next","payload":{"data":{"postPublished":{"id":"`;
}

export function frameTail(event: BenchEvent): string {
  const frame = canonicalFrame('x', event);
  const head = frameHead('x');
  if (!frame.startsWith(head + event.postId)) throw new Error('post id needs JSON escaping: not supported');
  return frame.slice(head.length + event.postId.length);
}

// ---------------------------------------------------------------------------------------------------------
// IPC between the coordinator and the load-client workers (child_process 'advanced' serialization).

export interface ConnectCommand {
  type: 'connect';
  /** Socket `g` (global index) connects to `urls[g % urls.length]`: sockets split evenly across pods. */
  urls: string[];
  firstIndex: number;
  count: number;
  token: string;
  orgId: string;
  /** Source addresses, used round-robin (bind before connect), to spread ephemeral ports. */
  localAddresses: string[];
  /** Connections being opened at once by this worker. */
  concurrency: number;
}

export interface EventsCommand {
  type: 'events';
  events: BenchEvent[];
}

/** Sent just before the coordinator issues the publish: `t` is the publish time (wallNow). */
export interface PublishCommand {
  type: 'publish';
  index: number;
  phase: string;
  t: number;
}

export interface CollectCommand {
  type: 'collect';
}

export interface CloseCommand {
  type: 'close';
}

export type WorkerCommand = ConnectCommand | EventsCommand | PublishCommand | CollectCommand | CloseCommand;

export interface ConnectedReply {
  type: 'connected';
  subscribed: number;
  failed: number;
  errors: string[];
}

/** This worker's sockets have all received event `index` (valid frames only). */
export interface EventDoneReply {
  type: 'eventDone';
  index: number;
  t: number;
}

export interface PhaseStats {
  /** Deliveries whose frame was right (right subscription id, post, title, tags, author). */
  valid: number;
  /** Of `valid`: not byte-identical to the canonical frame, but right once parsed. */
  noncanonical: number;
  /** Frames that were wrong (wrong id, wrong data, errors, unexpected message types). */
  wrong: number;
  /** The same event delivered twice to one socket. */
  duplicate: number;
  latency: HistogramData;
}

export interface StatsReply {
  type: 'stats';
  phases: Record<string, PhaseStats>;
  /** Valid deliveries per event index. */
  counts: Int32Array;
  wrongSamples: string[];
  /** Sockets closed by the server (or by an error) after subscribing. */
  closed: number;
  closeSamples: string[];
}

export type WorkerReply = ConnectedReply | EventDoneReply | StatsReply;
