import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { TEST_ENCRYPTION_KEYS } from '@herald/testing';
import {
  createDispatcherHarness,
  type DispatcherHarness,
  startTestReceiver,
  type TestReceiver,
} from '@herald/webhook-engine/testing';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';

// The dispatcher app as operators run it (tsx src/main.ts), SIGKILLed in the middle of a batch of 250
// events and started again: every event reaches the receiver at least once, and a duplicate carries
// the same event id.

const MAIN = fileURLToPath(new URL('./main.ts', import.meta.url));
// tsx's loader in this very process (`node --import tsx`), not the tsx CLI: the CLI is a wrapper process
// that would take the signal (a SIGKILL would leave the real process running on as an orphan).
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const EVENTS = 250;

let harness: DispatcherHarness;
let receiver: TestReceiver;
const children: ChildProcess[] = [];

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
  // Slow enough (10 ms each, 10 at a time) that the kill lands mid-batch.
  receiver = await startTestReceiver(() => ({ status: 200, delayMs: 10 }));
});

afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await receiver?.close();
  await harness?.close();
});

/** Starts `src/main.ts` and resolves once it logs that it is ready. */
async function startDispatcherProcess(): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', TSX_LOADER, MAIN], {
    env: {
      PATH: process.env.PATH,
      NODE_ENV: 'test',
      LOG_LEVEL: 'info',
      PORT: '0',
      HOST: '127.0.0.1',
      DATABASE_URL: harness.schema.url,
      REDIS_URL: harness.redisUrl,
      HERALD_REDIS_PREFIX: harness.redisPrefix,
      HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
      WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
      WEBHOOK_TIMEOUT_MS: '1000',
      WEBHOOK_RETRY_BASE_MS: '50',
      WEBHOOK_POLL_INTERVAL_MS: '50',
      // A kill between the relay claiming events and its XADD leaves them relayed but never queued; the
      // relay sends them again after this (120 s by default, longer than the test waits).
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let output = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`dispatcher did not start:\n${output}`)), 30_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('herald webhook dispatcher ready')) {
        clearTimeout(timer);
        resolve(child);
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`dispatcher exited with ${code} before it was ready:\n${output}`));
    });
  });
}

describe('a dispatcher killed with SIGKILL mid-batch', () => {
  it('leaves nothing undelivered once it is started again', async () => {
    await harness.createEndpoint('org-crash', receiver.url('/crash'));
    const first = await startDispatcherProcess();
    const events = await harness.publish('org-crash', EVENTS);

    await receiver.waitFor((requests) => requests.length >= 40, 30_000);
    first.kill('SIGKILL');
    await new Promise((resolve) => first.once('exit', resolve));
    const deliveredBeforeKill = receiver.requests.length;
    expect(deliveredBeforeKill).toBeLessThan(EVENTS);

    await startDispatcherProcess();
    const received = () => new Set(receiver.requests.map((request) => request.headers['x-webhook-id']));
    await receiver.waitFor(() => received().size === EVENTS, 60_000);
    expect(received()).toEqual(new Set(events));
    // A duplicate is the same event again: the header and the body always name the same id.
    for (const request of receiver.requests) {
      expect(JSON.parse(request.body).id).toBe(request.headers['x-webhook-id']);
    }
    const duplicates = receiver.requests.length - EVENTS;
    expect(duplicates).toBeLessThanOrEqual(20);
  });
});
