import { WebSocket } from 'ws';
import { median, procSample, sleep } from './common.js';

/**
 * A minimal Chrome DevTools Protocol client for the measured servers, which run with
 * `--inspect=127.0.0.1:0`: the bench uses it only to force a full GC before reading memory, so RSS per
 * socket compares live memory rather than whatever garbage the last phase left. No domain is enabled,
 * so nothing is instrumented while the server is being measured.
 */
export async function inspectorCall(
  url: string,
  method: string,
  params: Record<string, unknown> = {},
  timeoutMs = 30_000,
): Promise<any> {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  try {
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`inspector ${method}: no answer in ${timeoutMs} ms`)), timeoutMs);
      ws.on('message', (data: Buffer) => {
        const message = JSON.parse(data.toString('utf8'));
        if (message.id !== 1) return;
        clearTimeout(timer);
        if (message.error) reject(new Error(`inspector ${method}: ${JSON.stringify(message.error)}`));
        else resolve(message.result);
      });
      ws.send(JSON.stringify({ id: 1, method, params }));
    });
  } finally {
    ws.terminate();
  }
}

/** Parses `Debugger listening on ws://…` from a process's stderr. */
export function inspectorUrlFrom(stderr: string): string | undefined {
  return /Debugger listening on (ws:\/\/\S+)/.exec(stderr)?.[1];
}

export interface MemorySample {
  /** Sum over the processes, bytes, median of a few readings after a forced full GC. */
  rssBytes: number;
  /** V8 heap in use after the GC, bytes (sum over the processes). */
  heapUsedBytes: number;
}

/** Forces a full GC in every process, then reads RSS (median of 3 readings) and the V8 heap in use. */
export async function memoryAfterGc(
  pids: readonly number[],
  inspectors: readonly string[],
  pauseMs = 200,
): Promise<MemorySample> {
  let heapUsedBytes = 0;
  for (const url of inspectors) {
    await inspectorCall(url, 'HeapProfiler.collectGarbage');
    await inspectorCall(url, 'HeapProfiler.collectGarbage');
    heapUsedBytes += (await inspectorCall(url, 'Runtime.getHeapUsage')).usedSize as number;
  }
  const readings: number[] = [];
  for (let i = 0; i < 3; i++) {
    if (i > 0) await sleep(pauseMs);
    readings.push(pids.reduce((sum, pid) => sum + procSample(pid).rssBytes, 0));
  }
  return { rssBytes: median(readings), heapUsedBytes };
}
