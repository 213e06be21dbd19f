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
let seen = new Set<string>();
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
      if (seen.has(key)) stats.duplicate++;
      else {
        seen.add(key);
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
    seen = new Set();
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
