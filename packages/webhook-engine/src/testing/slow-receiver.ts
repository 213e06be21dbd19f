import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/*
 * A webhook receiver for tests of how many attempts are in flight at once: every POST is answered 200
 * after a fixed time, and the receiver counts those it holds, in all and per group (the first segment of
 * the path, `/<group>/…`).
 */

export interface SlowReceiver {
  url(path: string): string;
  /** POSTs being answered now, and the most at once so far: all of them, or those to paths under `/<group>/`. */
  inFlight(group?: string): number;
  maxInFlight(group?: string): number;
  /** When each POST to paths under `/<group>/` arrived. */
  received(group: string): number[];
  close(): Promise<void>;
}

/** A receiver that answers every POST with 200 after `answerMs`, counting what it holds at once. */
export async function startSlowReceiver(answerMs: number): Promise<SlowReceiver> {
  const open = new Map<string, number>();
  const most = new Map<string, number>();
  const arrivals = new Map<string, number[]>();
  const groupOf = (path: string) => path.split('/')[1] ?? '';
  const bump = (key: string, by: number) => {
    const now = (open.get(key) ?? 0) + by;
    open.set(key, now);
    most.set(key, Math.max(most.get(key) ?? 0, now));
  };
  const server: Server = createServer((req, res) => {
    const group = groupOf(req.url ?? '/');
    arrivals.set(group, [...(arrivals.get(group) ?? []), Date.now()]);
    bump('', 1);
    bump(group, 1);
    req.resume();
    setTimeout(() => {
      bump('', -1);
      bump(group, -1);
      res.writeHead(200).end();
    }, answerMs);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: (path) => `http://127.0.0.1:${port}${path}`,
    inFlight: (group = '') => open.get(group) ?? 0,
    maxInFlight: (group = '') => most.get(group) ?? 0,
    received: (group) => arrivals.get(group) ?? [],
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
