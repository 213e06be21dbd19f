/**
 * The webhook receiver of the webhook benchmark, in its own process: answers 200 as soon as a request's
 * body has arrived, then (off the response path) counts it and, when it has the endpoint's secret,
 * verifies the signature and de-duplicates by event id (by path and event id with several endpoints), so only genuine, distinct signed deliveries
 * count. Controlled over IPC: `{type:'reset', secret?}` and `{type:'stats'}`.
 * Listens on 127.0.0.1 and prints `listening <port>`.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { verifyWebhook } from '@herald/webhooks';
import { wallNow } from './common.js';

export interface ReceiverStats {
  type: 'receiverStats';
  requests: number;
  /** Distinct event ids whose signature verified (only when a secret was given). */
  verified: number;
  invalid: number;
  duplicate: number;
  /** wallNow() of the first and last request since the reset. */
  firstAt: number;
  lastAt: number;
  invalidSamples: string[];
  /**
   * The first few duplicates, for diagnosis: the key (event id, or path and event id), when each copy
   * arrived (wallNow()), the client port it came from and its signature timestamp (signed per attempt).
   */
  duplicateSamples: DuplicateSample[];
}

export interface DuplicateSample {
  key: string;
  first: Arrival;
  again: Arrival;
}

interface Arrival {
  at: number;
  port: number | undefined;
  /** The `webhook-timestamp` header: Unix seconds of the signing, i.e. of the attempt. */
  signedAt: string | undefined;
}

type Command =
  | { type: 'reset'; secret?: string; secrets?: Record<string, string>; track?: boolean }
  | { type: 'stats' }
  | { type: 'arrivals' };

/** With `track`: when each post (`data.id` of the body) first arrived, for the latency trial. */
let track = false;
let arrivals = new Map<string, number>();

let secret: string | undefined;
/** Several endpoints on this receiver: each path's secret; an event counts once per path. */
let secretsByPath: Map<string, string> | undefined;
/** Each counted delivery's first arrival (for the duplicate samples). */
let seen = new Map<string, Arrival>();
let stats: ReceiverStats = empty();

function empty(): ReceiverStats {
  return {
    type: 'receiverStats',
    requests: 0,
    verified: 0,
    invalid: 0,
    duplicate: 0,
    firstAt: 0,
    lastAt: 0,
    invalidSamples: [],
    duplicateSamples: [],
  };
}

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    res.writeHead(200, { 'content-length': '0' }).end();
    const now = wallNow();
    stats.requests++;
    if (stats.firstAt === 0) stats.firstAt = now;
    stats.lastAt = now;
    const pathSecret = secretsByPath ? secretsByPath.get(req.url ?? '') : secret;
    if (!pathSecret) {
      if (secretsByPath) {
        stats.invalid++;
        if (stats.invalidSamples.length < 5) stats.invalidSamples.push(`no endpoint at ${req.url}`);
      }
      return;
    }
    try {
      const event = verifyWebhook({ rawBody: Buffer.concat(chunks), headers: req.headers, secrets: [pathSecret] });
      const key = secretsByPath ? `${req.url} ${event.id}` : event.id;
      const arrival: Arrival = {
        at: now,
        port: req.socket.remotePort,
        signedAt: req.headers['webhook-timestamp'] as string | undefined,
      };
      const first = seen.get(key);
      if (first) {
        stats.duplicate++;
        if (stats.duplicateSamples.length < 10) stats.duplicateSamples.push({ key, first, again: arrival });
      } else {
        seen.set(key, arrival);
        stats.verified++;
        if (track) {
          const postId = (event.data as { id?: string } | undefined)?.id;
          if (postId && !arrivals.has(postId)) arrivals.set(postId, now);
        }
      }
    } catch (error) {
      stats.invalid++;
      if (stats.invalidSamples.length < 5) stats.invalidSamples.push((error as Error).message);
    }
  });
});
server.keepAliveTimeout = 60_000;

process.on('message', (command: Command) => {
  if (command.type === 'reset') {
    secret = command.secret;
    secretsByPath = command.secrets ? new Map(Object.entries(command.secrets)) : undefined;
    track = command.track ?? false;
    arrivals = new Map();
    seen = new Map();
    stats = empty();
    process.send?.({ type: 'reset' });
  } else if (command.type === 'stats') {
    process.send?.(stats);
  } else if (command.type === 'arrivals') {
    process.send?.({ type: 'arrivals', arrivals: [...arrivals] });
  }
});
process.on('disconnect', () => process.exit(0));

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`listening ${(server.address() as AddressInfo).port}\n`);
});
