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

// The dispatcher app SIGKILLs itself (HERALD_TEST_CRASH_AT) at each step of the straight path; a
// fresh one delivers the event within the lease (WEBHOOK_TIMEOUT_MS × 1.5, at least +1 s) plus a
// few seconds.

const MAIN = fileURLToPath(new URL('./main.ts', import.meta.url));
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const TIMEOUT_MS = 1_000;
/** The lease (2 s at a 1 s timeout) plus a generous margin for a machine under load. */
const RECOVERY_WAIT_MS = 20_000;

let harness: DispatcherHarness;
let receiver: TestReceiver;
const children: ChildProcess[] = [];

beforeAll(async () => {
  harness = await createDispatcherHarness(inject('databaseUrl'), inject('redisUrl'));
  receiver = await startTestReceiver(() => ({ status: 200 }));
});

afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await receiver?.close();
  await harness?.close();
});

function spawnDispatcher(crashAt?: string): { child: ChildProcess; ready: Promise<void>; exited: Promise<unknown> } {
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
      WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
      WEBHOOK_RETRY_BASE_MS: '50',
      WEBHOOK_POLL_INTERVAL_MS: '100',
      ...(crashAt ? { HERALD_TEST_CRASH_AT: crashAt } : {}),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let output = '';
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`dispatcher did not start:\n${output}`)), 45_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('herald webhook dispatcher ready')) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
  });
  return { child, ready, exited };
}

describe('a dispatcher SIGKILLed at each step of the straight path', () => {
  it.each([
    ['after-fan-out', 0],
    ['after-claim', 0],
    ['after-post', 1],
  ] as const)('%s: the delivery is made again within the lease', async (step, sentBeforeKill) => {
    const path = `/${step}`;
    const orgId = `org-${step}`;
    await harness.createEndpoint(orgId, receiver.url(path));
    const crashing = spawnDispatcher(step);
    await crashing.ready;
    const [eventId] = await harness.publish(orgId, 1);
    await crashing.exited;
    expect(crashing.child.signalCode).toBe('SIGKILL');
    const ids = () => receiver.requestsTo(path).map((request) => request.headers['x-webhook-id']);
    expect(ids()).toHaveLength(sentBeforeKill);

    const fresh = spawnDispatcher();
    await fresh.ready;
    await receiver.waitFor(() => ids().length === sentBeforeKill + 1, RECOVERY_WAIT_MS);
    expect(ids()).toEqual(Array(sentBeforeKill + 1).fill(eventId));
    const delivery = await harness.db
      .selectFrom('webhook_deliveries')
      .select('status')
      .where('event_id', '=', eventId!)
      .executeTakeFirstOrThrow();
    for (let i = 0; i < 100 && delivery.status !== 'SUCCEEDED'; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      Object.assign(
        delivery,
        await harness.db
          .selectFrom('webhook_deliveries')
          .select('status')
          .where('event_id', '=', eventId!)
          .executeTakeFirstOrThrow(),
      );
    }
    expect(delivery.status).toBe('SUCCEEDED');
    fresh.child.kill('SIGTERM');
    await fresh.exited;
  });
});
