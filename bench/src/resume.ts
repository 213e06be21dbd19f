/**
 * `pnpm bench` section "resume" (issue 12): how fast Herald replays history to clients that resume at
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
  notes: string[];
}

interface Socket {
  ws: WebSocket;
  received: number;
  lastFrame: string;
  doneAt: number | undefined;
}

function open(url: string, token: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, 'graphql-transport-ws');
    const socket: Socket = { ws, received: 0, lastFrame: '', doneAt: undefined };
    ws.once('error', reject);
    ws.once('open', () => ws.send(JSON.stringify({ type: 'connection_init', payload: { authToken: token } })));
    ws.once('message', (data) => {
      if (!String(data).includes('"connection_ack"')) reject(new Error(`no ack: ${String(data)}`));
      else resolve(socket);
    });
  });
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
    // The cursor: the first event a first subscriber receives.
    const first = await open(url, target.token);
    sockets.push(first);
    const cursor = new Promise<string>((resolve) =>
      first.ws.on('message', (data) => {
        const message = JSON.parse(String(data));
        if (message.type === 'next') resolve(message.payload.extensions.cursor);
      }),
    );
    first.ws.send(
      JSON.stringify({ id: 'first', type: 'subscribe', payload: { query: QUERY, variables: { orgId: target.orgId } } }),
    );
    while ((await target.subscribed()) < 1) await new Promise((resolve) => setTimeout(resolve, 20));
    const [marker, ...events] = await target.prepareEvents(config.events + 1);
    await target.publish(marker!);
    const after = await cursor;
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
          if (!text.includes('"type":"next"')) return;
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
    return {
      clients: resuming.length,
      eventsPerClient: config.events,
      complete,
      delivered,
      wallMs: round(wallMs, 1),
      eventsPerSec: Math.round(delivered / (wallMs / 1000)),
      clientCatchUpMs: { p50: at(0.5), p99: at(0.99), max: round(times.at(-1) ?? 0, 1) },
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
    `${result.clients} clients resume at once, ${result.eventsPerClient} events each (\`after\` a cursor): ${result.complete}/${result.clients} got every event exactly; ${result.delivered} events replayed in ${result.wallMs} ms = **${result.eventsPerSec} events/s**; time to catch up per client p50 ${result.clientCatchUpMs.p50} ms, p99 ${result.clientCatchUpMs.p99} ms, max ${result.clientCatchUpMs.max} ms.`,
    '',
    `Fan-out with history on vs off: compare the \`redis\` and \`redis-history-off\` rows above (same run). Setup: ${result.notes.join('; ')}.`,
    '',
  ].join('\n');
}
