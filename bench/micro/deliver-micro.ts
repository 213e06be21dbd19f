/**
 * CPU per POST of the engine's deliverer against raw undici Pool loops (`request`, and `dispatch` with
 * an empty handler: the floor the deliverer's own handler builds on), same process, same local
 * receiver (a child process answering 200 at once). For comparing the deliverer's per-request shape:
 *   node --import tsx bench/micro/deliver-micro.ts [requests=20000] [concurrency=10]
 */
import { fork } from 'node:child_process';
import { createDeliverer } from '@herald/webhook-engine';
import { Pool } from 'undici';

const total = Number(process.argv[2] ?? 20000);
const concurrency = Number(process.argv[3] ?? 10);
if (process.argv[4] === 'receiver') {
  const { createServer } = await import('node:http');
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-length': '0' }).end());
  }).listen(0, '127.0.0.1', () => process.send?.((server.address() as { port: number }).port));
} else {
  const child = fork(new URL(import.meta.url).pathname, [String(total), String(concurrency), 'receiver'], {
    execArgv: ['--import', 'tsx'],
  });
  const port = await new Promise<number>((resolve) => child.once('message', (m) => resolve(m as number)));
  const url = `http://127.0.0.1:${port}/hook`;
  const body = JSON.stringify({ id: 'evt_x', type: 'post.published', data: { title: 'x'.repeat(200) } });
  const headers = { 'content-type': 'application/json', 'webhook-id': 'evt_x', 'webhook-signature': 'v1,abc' };
  const measure = async (name: string, one: () => Promise<unknown>) => {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    let left = total;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (left-- > 0) await one();
      }),
    );
    const cpu = process.cpuUsage(c0);
    const ms = performance.now() - t0;
    console.log(
      `${name}: ${Math.round((total / ms) * 1000)}/s, ${((cpu.user + cpu.system) / total).toFixed(1)} us CPU per request`,
    );
  };
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: concurrency });
  const deliverer = createDeliverer({
    timeoutMs: 10_000,
    policy: { allowPrivateUrls: true },
    connectionsPerEndpoint: concurrency,
  });
  for (let round = 0; round < 2; round++) {
    await measure('raw undici Pool', async () => {
      const response = await pool.request({ path: '/hook', method: 'POST', headers, body });
      await response.body.dump();
    });
    await measure(
      'raw undici Pool.dispatch',
      () =>
        new Promise<void>((resolve, reject) => {
          pool.dispatch({ path: '/hook', method: 'POST', headers, body }, {
            onConnect() {},
            onHeaders() {
              return true;
            },
            onData() {
              return true;
            },
            onComplete() {
              resolve();
            },
            onError(error: Error) {
              reject(error);
            },
          } as Parameters<Pool['dispatch']>[1]);
        }),
    );
    await measure('engine deliverer', async () => {
      const outcome = await deliverer.deliver({ endpointId: 'we_1', url, body, headers });
      if (!outcome.ok) throw new Error(outcome.error ?? 'failed');
    });
  }
  await pool.close();
  await deliverer.close();
  child.kill();
}
