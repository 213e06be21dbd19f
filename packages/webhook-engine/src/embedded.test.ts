import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newEventId } from '@herald/contracts';
import {
  createDatabase,
  type HeraldDatabase,
  insertOutboxEvent,
  insertWebhookEndpoint,
  migrateToLatest,
} from '@herald/db';
import { TEST_KEYRING } from '@herald/testing';
import { generateWebhookSecret } from '@herald/webhooks';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { Dispatcher } from './dispatcher.js';
import { createEmbeddedDispatcher, throttleWakeUps } from './embedded.js';
import { FAST_SETTINGS } from './testing/harness.js';
import { startTestReceiver, type TestReceiver } from './testing/test-receiver.js';

let dataDir: string;
let database: HeraldDatabase;
let receiver: TestReceiver;
let dispatcher: Dispatcher;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'herald-embedded-wake-'));
  database = await createDatabase({ kind: 'embedded', dataDir });
  await migrateToLatest(database.db);
  receiver = await startTestReceiver(() => ({ status: 200 }));
  // The poll is made far too slow to deliver within the test: only the wake-up at commit can.
  dispatcher = createEmbeddedDispatcher({
    db: database.db,
    logger: pino({ level: 'silent' }),
    keyring: TEST_KEYRING,
    settings: { ...FAST_SETTINGS, pollIntervalMs: 120_000 },
  });
  await dispatcher.start();
});

afterAll(async () => {
  await dispatcher?.stop();
  await receiver?.close();
  await database?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('embedded mode (PGlite)', () => {
  it('fans an outbox event out right after its commit, without waiting for the poll', async () => {
    await insertWebhookEndpoint(database.db, {
      orgId: 'org-wake',
      url: receiver.url('/wake'),
      eventTypes: ['post.published'],
      secret: generateWebhookSecret(),
      keyring: TEST_KEYRING,
    });
    // Let the start-up passes finish, so the next one can only come from a wake-up.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const id = newEventId();
    const created = new Date().toISOString();
    const data = { id: 'p1', orgId: 'org-wake', title: 'Wake', tags: [], status: 'PUBLISHED', publishedAt: created };
    const body = JSON.stringify({
      id,
      type: 'post.published',
      created,
      data: { ...data, author: { id: 'u', name: 'U' } },
    });
    await insertOutboxEvent(database.db, {
      id,
      orgId: 'org-wake',
      type: 'post.published',
      body,
      createdAt: new Date(),
    });
    await receiver.waitFor((requests) => requests.some((request) => request.headers['webhook-id'] === id), 10_000);
    expect(receiver.requests.filter((request) => request.headers['webhook-id'] === id)).toHaveLength(1);
  });
});

describe('wake-ups of the embedded relay', () => {
  it('wakes at once after a quiet spell, then at most once per interval while publishes keep coming', () => {
    vi.useFakeTimers();
    try {
      let woken = 0;
      const wake = throttleWakeUps(() => woken++, 20);
      wake();
      expect(woken).toBe(1);
      for (let i = 0; i < 5; i++) wake();
      expect(woken).toBe(1);
      vi.advanceTimersByTime(20);
      expect(woken).toBe(2);
      vi.advanceTimersByTime(1_000);
      expect(woken).toBe(2);
      wake();
      expect(woken).toBe(3);
    } finally {
      vi.useRealTimers();
    }
  });
});
