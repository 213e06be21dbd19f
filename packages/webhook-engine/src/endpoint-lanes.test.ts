import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { BatchAttempter } from './attempt-batch.js';
import { createEndpointLanes } from './endpoint-lanes.js';
import type { AttemptOutcome, ClaimedDelivery } from './lease-protocol.js';
import { createStatementTurns, FIRST_CLAIMS, type StatementTurns } from './statement-turns.js';
import { attemptOutcome } from './testing/outcomes.js';

// When a lane takes its slots, with the database's side played by a script: due deliveries are a list,
// a claim or record takes from it, a POST ends when the test says so. The lanes' clock stands still, so
// a lane that waits for a time to pass before it looks for slots stays where it is. The cap across
// dispatchers, against PostgreSQL, is pinned in lease-protocol.test.ts.

const CAP = 4;

/**
 * @param holdRecords records answer only when the test lets them (`letRecord`)
 * @param maxSlots the most slots the lane can get (fewer than the cap: another dispatcher holds the rest)
 */
function scriptedEndpoint(holdRecords = false, maxSlots = CAP) {
  const due: string[] = [];
  const recordsHeld: Array<() => void> = [];
  const held = new Set<string>();
  const posts = new Map<string, () => void>();
  /** The lane's slot registration, as the database keeps it (one lane, nobody else). */
  let slots = 0;
  /** The most deliveries the lane held at once (in flight, done or ahead). */
  let maxHeld = 0;
  const take = (count: number, lease: string): ClaimedDelivery[] =>
    due.splice(0, count).map((id) => {
      held.add(id);
      return {
        id,
        eventId: `evt_${id}`,
        eventType: 'post.published',
        orgId: 'org',
        endpointId: 'endpoint',
        url: 'http://127.0.0.1:1/hook',
        body: '{}',
        secrets: ['secret'],
        attemptCount: 0,
        ageMs: 0,
        lease,
      };
    });
  const attempter: BatchAttempter = {
    // The lane's first claim finds one delivery, as when the first event of a burst comes alone.
    async claim(_queued, _chain, lease) {
      const claimed = take(1, lease);
      slots = claimed.length;
      return { claimed, settled: Promise.resolve() };
    },
    async growSlots(_endpointId, _lease, want) {
      slots = Math.max(slots, Math.min(maxSlots, want));
      return { slots, others: CAP - maxSlots };
    },
    attempt(delivery) {
      return new Promise<AttemptOutcome>((resolve) => {
        posts.set(delivery.id, () => resolve(attemptOutcome(delivery)));
      });
    },
    async record(done, handOver) {
      if (holdRecords) await new Promise<void>((resolve) => recordsHeld.push(resolve));
      for (const { delivery } of done) held.delete(delivery.id);
      const handedOver = take(handOver?.take ?? 0, handOver?.lease ?? 'a:lease');
      maxHeld = Math.max(maxHeld, held.size);
      slots = Math.min(slots, handOver?.slots ?? slots, (handOver?.keep ?? 0) + handedOver.length);
      return {
        result: {
          recorded: new Set(done.map(({ delivery }) => delivery.id)),
          handedOver,
          kept: new Set(handOver?.renew ?? []),
          halt: false,
          disabled: [],
          events: 0,
          invalidEvents: [],
          slots,
        },
        settled: Promise.resolve(),
      };
    },
    async drain() {},
  };
  return {
    attempter,
    /** New due deliveries, as a fan-out makes them (`visible` false: not yet seen by the next statement). */
    fanOut(ids: string[], visible = true) {
      if (visible) due.push(...ids);
      return ids.map((deliveryId) => ({ deliveryId, endpointId: 'endpoint', lease: 'q:entry' }));
    },
    /** POSTs begun and not ended. */
    running: () => [...posts.keys()],
    /** Ends these POSTs (200). */
    answer(ids: string[]) {
      for (const id of ids) {
        posts.get(id)?.();
        posts.delete(id);
      }
    },
    held,
    maxHeld: () => maxHeld,
    /** Makes deliveries fanned out unseen visible. */
    commit(ids: string[]) {
      due.push(...ids);
    },
    /** Records waiting for `letRecord`. */
    recordsWaiting: () => recordsHeld.length,
    /** Lets the oldest held record answer. */
    letRecord: () => recordsHeld.shift()?.(),
  };
}

function startLanes(endpoint: ReturnType<typeof scriptedEndpoint>, statements?: StatementTurns) {
  let running = true;
  const lanes = createEndpointLanes({
    attempter: endpoint.attempter,
    statements,
    running: () => running,
    endpointCap: CAP,
    leaseMs: 60_000,
    timeoutMs: 10_000,
    logger: pino({ level: 'silent' }),
  });
  const pushed: Promise<void>[] = [];
  return {
    /** Fans these deliveries out and hands their work entries to the lanes, as the consumer does. */
    push(ids: string[], visible = true) {
      pushed.push(...endpoint.fanOut(ids, visible).map((item) => lanes.push(item)));
    },
    /** Resolves once every lane has run out of work and ended. */
    ended: () => lanes.drain(),
    async stop() {
      running = false;
      while (endpoint.running().length > 0 || endpoint.recordsWaiting() > 0) {
        endpoint.answer(endpoint.running());
        endpoint.letRecord();
        await new Promise((resolve) => setImmediate(resolve));
      }
      await lanes.drain();
      await Promise.all(pushed);
    },
  };
}

/** Statement turns that note the line each statement took its turn in. */
function recordingTurns() {
  const turns = createStatementTurns({ capacity: 8, maxWaitMs: 60_000 });
  const lines: string[] = [];
  const statements: StatementTurns = {
    run(orgId, statement) {
      lines.push(orgId);
      return turns.run(orgId, statement);
    },
    inFlight: 0,
    waiting: 0,
  };
  return { statements, lines };
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('endpoint lanes', () => {
  it("send every statement in a turn: a lane's first claim in the first claims' line, the rest in its organisation's", async () => {
    const endpoint = scriptedEndpoint();
    // Every statement the lane sends, as the database sees it…
    const sent: string[] = [];
    for (const method of ['claim', 'record', 'growSlots'] as const) {
      const original = endpoint.attempter[method] as (...args: unknown[]) => Promise<unknown>;
      (endpoint.attempter[method] as unknown) = (...args: unknown[]) => {
        sent.push(method);
        return original(...args);
      };
    }
    // …and the line each one took its turn in.
    const { statements, lines } = recordingTurns();
    const { push, stop } = startLanes(endpoint, statements);
    push(['d0']);
    await vi.waitFor(() => expect(endpoint.running()).toEqual(['d0']));
    push(['d1', 'd2', 'd3', 'd4', 'd5']);
    await vi.waitFor(() => expect(endpoint.running()).toHaveLength(CAP));
    endpoint.answer(endpoint.running());
    await vi.waitFor(() => expect(endpoint.running()).toEqual(['d4', 'd5']));
    await stop();

    expect(sent).toEqual(expect.arrayContaining(['claim', 'growSlots', 'record']));
    expect(lines).toHaveLength(sent.length);
    expect(lines[0]).toBe(FIRST_CLAIMS);
    expect(new Set(lines.slice(1))).toEqual(new Set(['org']));
  });

  it("send a new lane's first claim in its organisation's line once a claim for the endpoint has named it", async () => {
    const endpoint = scriptedEndpoint();
    const { statements, lines } = recordingTurns();
    const { push, ended, stop } = startLanes(endpoint, statements);
    push(['d0']);
    await vi.waitFor(() => expect(endpoint.running()).toEqual(['d0']));
    endpoint.answer(['d0']);
    // Out of work: its lane records and ends.
    await ended();
    const firstLane = lines.length;
    push(['d1']);
    await vi.waitFor(() => expect(endpoint.running()).toEqual(['d1']));
    await stop();
    expect(lines[0]).toBe(FIRST_CLAIMS);
    // The second lane's claim and everything after it: the organisation's line.
    expect(lines.length).toBeGreaterThan(firstLane);
    expect(new Set(lines.slice(1))).toEqual(new Set(['org']));
  });

  it('take every slot as soon as they hold the work for them, and again after a lull, while their first POST runs', async () => {
    // `performance` is node:perf_hooks' too.
    const now = performance.now();
    vi.spyOn(performance, 'now').mockReturnValue(now);
    const endpoint = scriptedEndpoint();
    const { push, stop } = startLanes(endpoint);

    // The claim finds one delivery: one slot, taken by a POST that runs until the end.
    push(['d0']);
    await vi.waitFor(() => expect(endpoint.running()).toEqual(['d0']));
    // Eight more come: the lane holds them, and takes the cap's other three slots without waiting for
    // that POST to end or for time to pass.
    push(['d1', 'd2', 'd3', 'd4', 'd5', 'd6', 'd7', 'd8']);
    await vi.waitFor(() => expect(endpoint.running()).toEqual(['d0', 'd1', 'd2', 'd3']));
    for (const batch of [
      ['d1', 'd2', 'd3'],
      ['d4', 'd5', 'd6'],
      ['d7', 'd8'],
    ]) {
      await vi.waitFor(() => expect(endpoint.running()).toEqual(expect.arrayContaining(batch)));
      endpoint.answer(batch);
    }
    // A lull: recorded, it holds only the running POST's delivery, so one slot (others may take the rest).
    await vi.waitFor(() => expect([...endpoint.held]).toEqual(['d0']));
    // A burst: the three other slots again, at once (having reached the cap before is no reason to wait).
    push(['e1', 'e2', 'e3', 'e4', 'e5', 'e6']);
    await vi.waitFor(() => expect(endpoint.running()).toEqual(['d0', 'e1', 'e2', 'e3']));
    await stop();
  });

  it('renew their slot registration in the records that renew their leases, and only read it in the records between', async () => {
    let now = performance.now();
    vi.spyOn(performance, 'now').mockImplementation(() => now);
    const endpoint = scriptedEndpoint();
    const records: Array<{ renew: number; renewSlots: boolean | undefined }> = [];
    const original = endpoint.attempter.record.bind(endpoint.attempter);
    endpoint.attempter.record = (...args: Parameters<BatchAttempter['record']>) => {
      records.push({ renew: args[1]?.renew?.length ?? 0, renewSlots: args[1]?.renewSlots });
      return original(...args);
    };
    const { push, stop } = startLanes(endpoint);
    push(['d0']);
    await vi.waitFor(() => expect(endpoint.running()).toEqual(['d0']));
    push(['d1', 'd2', 'd3', 'd4', 'd5', 'd6', 'd7', 'd8']);
    await vi.waitFor(() => expect(endpoint.running()).toHaveLength(CAP));
    endpoint.answer(endpoint.running());
    await vi.waitFor(() => expect(records.length).toBeGreaterThan(0));
    await vi.waitFor(() => expect(endpoint.running()).toHaveLength(CAP));
    // Leases taken moments ago: the records renew nothing, and leave the registration alone.
    expect(records.every((record) => record.renew === 0 && record.renewSlots === false)).toBe(true);
    const fresh = records.length;
    // Past half of the leases' fresh window (60 s leases, 10 s timeout: 25 s, so 12.5 s): the next record
    // renews the leases of what the lane holds and the registration with them.
    now += 13_000;
    endpoint.answer(endpoint.running());
    await vi.waitFor(() => expect(records.length).toBeGreaterThan(fresh));
    expect(records[fresh]!.renew).toBeGreaterThan(0);
    expect(records[fresh]!.renewSlots).toBe(true);
    await stop();
    // Never a renewal of the leases without the registration's.
    expect(records.filter((record) => record.renew > 0).every((record) => record.renewSlots === true)).toBe(true);
  });

  it('hold deliveries ahead in proportion to their own slots, not the cap: one slot of four holds at most 20', async () => {
    const endpoint = scriptedEndpoint(false, 1);
    const { push, stop } = startLanes(endpoint);
    const ids = Array.from({ length: 200 }, (_, i) => `d${i}`);
    push(ids);
    // One slot: answer its POSTs one by one; the lane keeps taking more as it records, never past 20
    // (20 slot-counts of its one slot), where a cap-sized hold would take 80 of the endpoint's backlog.
    for (let answered = 0; answered < 40; answered++) {
      await vi.waitFor(() => expect(endpoint.running()).toHaveLength(1));
      endpoint.answer(endpoint.running());
    }
    await vi.waitFor(() => expect(endpoint.held.size).toBeGreaterThan(10));
    expect(endpoint.maxHeld()).toBeGreaterThan(10);
    expect(endpoint.maxHeld()).toBeLessThanOrEqual(20);
    await stop();
  });

  it('look for slots before their next record: work arriving all the time does not keep them on one slot', async () => {
    const endpoint = scriptedEndpoint(true);
    const { push, stop } = startLanes(endpoint);
    push(['d0']);
    await vi.waitFor(() => expect(endpoint.running()).toEqual(['d0']));
    // Its first record is on its way; eight more deliveries come, and a ninth its statement will not
    // see yet. Their entries wait for a record.
    await vi.waitFor(() => expect(endpoint.recordsWaiting()).toBe(1));
    push(['d1', 'd2', 'd3', 'd4', 'd5', 'd6', 'd7', 'd8']);
    push(['d9'], false);
    endpoint.letRecord();
    // The record took the eight; another is due for the ninth, and (at a steady rate) one always is:
    // the lane takes its slots before that one, not once records stop coming.
    await vi.waitFor(() => expect(endpoint.recordsWaiting()).toBe(1));
    expect(endpoint.running()).toEqual(['d0', 'd1', 'd2', 'd3']);
    endpoint.commit(['d9']);
    endpoint.letRecord();
    await vi.waitFor(() => expect(endpoint.held.has('d9')).toBe(true));
    await stop();
  });
});
