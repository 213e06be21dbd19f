/**
 * `pnpm bench` section "resume": how fast Herald replays history to clients that resume at
 * once. One Herald pod on PostgreSQL + Redis; `events` posts published after a cursor; then `clients`
 * graphql-transport-ws sockets subscribe with `after: <cursor>` in the same instant and each must
 * receive all `events` replayed events (counted per frame, last one checked). Reports the aggregate
 * catch-up rate (events delivered ÷ wall time until the last client is done) and each client's time
 * to catch up. The fan-out cost of keeping the history (history on vs off) is the `redis` vs
 * `redis-history-off` fan-out scenarios of the same run.
 */
import { WebSocket } from 'ws';
import { round, wallNow } from './common.js';
import { startHeraldTarget } from './targets.js';

/** Sockets opened (connection_init → ack) at a time before the measurement starts. */
const CONNECT_BATCH = 100;
/** Concurrent publishPost calls while filling the history. */
const PUBLISH_LANES = 8;
const QUERY = 'subscription($orgId: ID!, $after: String) { postPublished(orgId: $orgId, after: $after) { id title } }';

export interface ResumeConfig {
  clients: number;
  events: number;
  databaseUrl: string;
  redisUrl: string;
  /** Give up on the catch-up after this long. */
  timeoutMs: number;
  /** Events published one at a time to measure publish→delivery latency (0: skip). @default 100 */
  latencyEvents?: number;
}

/** Milliseconds: median, 99th percentile, max. */
export interface LatencyMs {
  p50: number;
  p99: number;
  max: number;
}

export interface ResumeResult {
  clients: number;
  eventsPerClient: number;
  /** Clients that received every replayed event, exactly `eventsPerClient` frames. */
  complete: number;
  /** Replayed events delivered in all. */
  delivered: number;
  wallMs: number;
  eventsPerSec: number;
  clientCatchUpMs: { p50: number; p99: number; max: number };
  /** `error` messages the resuming clients got, by `extensions.code` (none when all went well). */
  errors: Record<string, number>;
  /** `complete` messages the resuming clients got (a live subscription never completes). */
  completed: number;
  /**
   * One live subscriber, posts published one at a time through `publishPost` (commit, outbox row, the
   * history relay woken at commit, Lua append + PUBLISH, delivery): from the call to the `next` frame,
   * and until the mutation answered; `createPost` (one write, no relay) is the same run's baseline.
   */
  publishLatency?: { events: number; toDelivery: LatencyMs; publishAnswered: LatencyMs; createPost: LatencyMs };
  notes: string[];
}

interface Socket {
  ws: WebSocket;
  received: number;
  lastFrame: string;
  doneAt: number | undefined;
  error: string | undefined;
  completed: boolean;
}

function open(url: string, token: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, 'graphql-transport-ws');
    const socket: Socket = { ws, received: 0, lastFrame: '', doneAt: undefined, error: undefined, completed: false };
    ws.once('error', reject);
    ws.once('open', () => ws.send(JSON.stringify({ type: 'connection_init', payload: { authToken: token } })));
    ws.once('message', (data) => {
      if (!String(data).includes('"connection_ack"')) reject(new Error(`no ack: ${String(data)}`));
      else resolve(socket);
    });
  });
}

function summary(samples: number[]): LatencyMs {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0, 2);
  return { p50: at(0.5), p99: at(0.99), max: round(sorted.at(-1) ?? 0, 2) };
}

export async function runResumeCatchUp(config: ResumeConfig): Promise<ResumeResult> {
  const target = await startHeraldTarget({
    pods: 1,
    pubsub: 'redis',
    databaseUrl: config.databaseUrl,
    redisUrl: config.redisUrl,
    database: 'postgres',
    env: { SUBSCRIPTION_HISTORY_SIZE: String(Math.max(1_000, config.events + 10)) },
    label: 'resume catch-up',
  });
  const sockets: Socket[] = [];
  try {
    const url = target.wsUrls[0]!;
    // A first, live subscriber: the publish→delivery latency, then the cursor (the marker event's).
    const first = await open(url, target.token);
    sockets.push(first);
    const arrivals = new Map<string, (at: number, cursor: string) => void>();
    first.ws.on('message', (data) => {
      const at = wallNow();
      const message = JSON.parse(String(data));
      if (message.type === 'next')
        arrivals.get(message.payload.data.postPublished.title)?.(at, message.payload.extensions.cursor);
    });
    const arrival = (title: string) =>
      new Promise<{ at: number; cursor: string }>((resolve) =>
        arrivals.set(title, (at, cursor) => resolve({ at, cursor })),
      );
    first.ws.send(
      JSON.stringify({ id: 'first', type: 'subscribe', payload: { query: QUERY, variables: { orgId: target.orgId } } }),
    );
    while ((await target.subscribed()) < 1) await new Promise((resolve) => setTimeout(resolve, 20));

    const latencyEvents = config.latencyEvents ?? 100;
    let publishLatency: ResumeResult['publishLatency'];
    if (latencyEvents > 0) {
      const toDelivery: number[] = [];
      const answered: number[] = [];
      const created: number[] = [];
      for (const event of await target.prepareEvents(latencyEvents)) {
        const arrived = arrival(event.title);
        const start = wallNow();
        await target.publish(event);
        answered.push(wallNow() - start);
        toDelivery.push((await arrived).at - start);
      }
      for (let i = 0; i < latencyEvents; i++) {
        const start = wallNow();
        await target.graphql('mutation($input: CreatePostInput!) { createPost(input: $input) { id } }', {
          input: { orgId: target.orgId, title: `latency baseline ${i}`, tags: [] },
        });
        created.push(wallNow() - start);
      }
      publishLatency = {
        events: latencyEvents,
        toDelivery: summary(toDelivery),
        publishAnswered: summary(answered),
        createPost: summary(created),
      };
    }

    const [marker, ...events] = await target.prepareEvents(config.events + 1);
    const markerArrived = arrival(marker!.title);
    await target.publish(marker!);
    const after = (await markerArrived).cursor;
    first.ws.close();
    // Lanes take events in turn; the history orders them by commit, and the count is what is checked.
    let next = 0;
    await Promise.all(
      Array.from({ length: PUBLISH_LANES }, async () => {
        while (next < events.length) await target.publish(events[next++]!);
      }),
    );

    for (let i = 0; i < config.clients; i += CONNECT_BATCH) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(CONNECT_BATCH, config.clients - i) }, () => open(url, target.token)),
      );
      sockets.push(...batch);
    }
    const resuming = sockets.slice(1);
    const start = wallNow();
    const allDone = new Promise<void>((resolve) => {
      let done = 0;
      if (resuming.length === 0) resolve();
      for (const socket of resuming) {
        socket.ws.on('message', (data) => {
          const text = String(data);
          if (!text.includes('"type":"next"')) {
            const message = JSON.parse(text) as { type: string; payload?: Array<{ extensions?: { code?: string } }> };
            if (message.type === 'error') socket.error = message.payload?.[0]?.extensions?.code ?? 'no code';
            if (message.type === 'complete') socket.completed = true;
            return;
          }
          socket.received++;
          socket.lastFrame = text;
          if (socket.received === config.events) {
            socket.doneAt = wallNow();
            if (++done === resuming.length) resolve();
          }
        });
      }
    });
    const payload = { query: QUERY, variables: { orgId: target.orgId, after } };
    for (const socket of resuming) socket.ws.send(JSON.stringify({ id: 'resume', type: 'subscribe', payload }));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([allDone, new Promise((resolve) => (timer = setTimeout(resolve, config.timeoutMs)))]);
    clearTimeout(timer);
    const end = Math.max(...resuming.map((socket) => socket.doneAt ?? wallNow()));
    const complete = resuming.filter(
      (socket) => socket.received === config.events && socket.lastFrame.includes('"cursor"'),
    ).length;
    const delivered = resuming.reduce((sum, socket) => sum + socket.received, 0);
    const times = resuming.map((socket) => (socket.doneAt ?? end) - start).sort((a, b) => a - b);
    const at = (q: number) => round(times[Math.min(times.length - 1, Math.floor(q * times.length))] ?? 0, 1);
    const wallMs = end - start;
    const errors: Record<string, number> = {};
    for (const socket of resuming) if (socket.error) errors[socket.error] = (errors[socket.error] ?? 0) + 1;
    return {
      clients: resuming.length,
      eventsPerClient: config.events,
      complete,
      delivered,
      wallMs: round(wallMs, 1),
      eventsPerSec: Math.round(delivered / (wallMs / 1000)),
      clientCatchUpMs: { p50: at(0.5), p99: at(0.99), max: round(times.at(-1) ?? 0, 1) },
      errors,
      completed: resuming.filter((socket) => socket.completed).length,
      publishLatency,
      notes: [
        ...target.notes,
        `${resuming.length} sockets in this bench process subscribe with the same after cursor at once; each catches up on its own execution (no shared group before it is live)`,
      ],
    };
  } finally {
    for (const socket of sockets) socket.ws.terminate();
    await target.stop();
  }
}

/** The report's section for the catch-up run. */
export function resumeMarkdown(result: ResumeResult | null): string {
  if (!result) return '';
  return [
    '## Resuming subscriptions: catch-up',
    '',
    `${result.clients} clients resume at once, ${result.eventsPerClient} events each (\`after\` a cursor): ${result.complete}/${result.clients} got every event exactly; ${result.delivered} events replayed in ${result.wallMs} ms = **${result.eventsPerSec} events/s**; time to catch up per client p50 ${result.clientCatchUpMs.p50} ms, p99 ${result.clientCatchUpMs.p99} ms, max ${result.clientCatchUpMs.max} ms. Errors: ${
      Object.entries(result.errors ?? {})
        .map(([code, count]) => `${count} ${code}`)
        .join(', ') || 'none'
    }; completed: ${result.completed ?? 0}.`,
    '',
    ...(result.publishLatency
      ? [
          `Publish→delivery through the outbox and the history relay (one live subscriber, ${result.publishLatency.events} posts one at a time, \`publishPost\` call → \`next\` frame): p50 ${result.publishLatency.toDelivery.p50} ms, p99 ${result.publishLatency.toDelivery.p99} ms, max ${result.publishLatency.toDelivery.max} ms; the mutation answered after p50 ${result.publishLatency.publishAnswered.p50} ms (p99 ${result.publishLatency.publishAnswered.p99}). Same run, a write without the relay (\`createPost\`): p50 ${result.publishLatency.createPost.p50} ms, p99 ${result.publishLatency.createPost.p99} ms.`,
          '',
        ]
      : []),
    `Fan-out with history on vs off: compare the \`redis\` and \`redis-history-off\` rows above (same run). Setup: ${result.notes.join('; ')}.`,
    '',
  ].join('\n');
}
