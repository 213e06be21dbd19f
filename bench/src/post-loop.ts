/**
 * The raw side of the webhook benchmark, in its own process: `connections` keep-alive connections
 * (undici Pool), each looping one POST at a time of the same pre-signed delivery for `durationMs`.
 * That is the most a sender can do against this receiver on this machine: no queue, no database, no
 * signing per request. Controlled over IPC: `{type:'run', …}` → `{type:'loopResult', …}`.
 */
import { Pool } from 'undici';
import { Histogram, wallNow } from './common.js';

export interface LoopCommand {
  type: 'run';
  origin: string;
  path: string;
  connections: number;
  durationMs: number;
  headers: Record<string, string>;
  body: string;
}

export interface LoopResult {
  type: 'loopResult';
  requests: number;
  errors: number;
  non2xx: number;
  durationMs: number;
  p50Ms: number;
  p99Ms: number;
}

async function run(command: LoopCommand): Promise<LoopResult> {
  const pool = new Pool(command.origin, { connections: command.connections, pipelining: 1 });
  const latency = new Histogram();
  let requests = 0;
  let errors = 0;
  let non2xx = 0;
  const start = wallNow();
  let end = start;
  const lane = async () => {
    while (wallNow() - start < command.durationMs) {
      const sent = wallNow();
      try {
        const response = await pool.request({
          path: command.path,
          method: 'POST',
          headers: command.headers,
          body: command.body,
        });
        await response.body.dump();
        if (response.statusCode < 200 || response.statusCode > 299) non2xx++;
        else requests++;
      } catch {
        errors++;
      }
      end = wallNow();
      latency.record((end - sent) * 1000);
    }
  };
  await Promise.all(Array.from({ length: command.connections }, lane));
  await pool.close();
  const summary = latency.summaryMs();
  return {
    type: 'loopResult',
    requests,
    errors,
    non2xx,
    durationMs: end - start,
    p50Ms: summary.p50Ms,
    p99Ms: summary.p99Ms,
  };
}

process.on('message', (command: LoopCommand) => {
  if (command.type === 'run') void run(command).then((result) => process.send?.(result));
});
process.on('disconnect', () => process.exit(0));
