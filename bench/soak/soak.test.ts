import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { type CommittedEvent, checkLedger, type LedgerInput, type SubscriberFrame } from './ledger.js';
import type { SoakResults } from './report.js';
import {
  memoryFromMetrics,
  type ProcessSample,
  RSS_SETTLING_MS,
  redisKeyKind,
  settledExternal,
  settledHeap,
  settledRss,
} from './resources.js';
import { IMAGE_MALLOC_ARENA_MAX } from './topology.js';

// The soak's ledger is arithmetic over what a run recorded; it is pinned here on crafted inputs (a balanced
// one, and one of each way a run can lose or misplace an event), through the CLI's `--check` (exit 3 and the
// event named), and then a short soak of the real cluster with a few faults must balance (exit 0).

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const ORG = 'org-a';

function events(count: number): CommittedEvent[] {
  return Array.from({ length: count }, (_, index) => ({
    eventId: `evt_${index}`,
    postId: `post_${index}`,
    orgId: ORG,
    seq: index + 1,
    tags: index % 2 === 0 ? ['red'] : [],
  }));
}

const frame = (index: number, epoch = 'e1'): SubscriberFrame => ({
  postId: `post_${index}`,
  epoch,
  position: index + 10,
  at: 0,
});

/** Five events; a subscriber that got all of them, one on `red` that got its three; a balanced endpoint. */
function balanced(): LedgerInput {
  const committed = events(5);
  return {
    events: committed,
    publishedPosts: committed.map((event) => event.postId),
    acknowledged: committed.map((event) => event.postId),
    subscribers: [
      { name: 'all', orgId: ORG, frames: [0, 1, 2, 3, 4].map((index) => frame(index)), expiries: [], reconciled: [] },
      {
        name: 'red',
        orgId: ORG,
        tags: ['red'],
        frames: [0, 2, 4].map((index) => frame(index)),
        expiries: [],
        reconciled: [],
      },
    ],
    endpoints: [
      {
        name: 'hook',
        behaviour: 'flaky',
        endpointId: 'ep_1',
        orgId: ORG,
        deliveries: [
          { eventId: 'evt_0', status: 'SUCCEEDED' },
          { eventId: 'evt_1', status: 'SUCCEEDED' },
          { eventId: 'evt_2', status: 'DEAD' },
          { eventId: 'evt_3', status: 'PENDING' },
          { eventId: 'evt_4', status: 'SKIPPED' },
        ],
        received: [
          { eventId: 'evt_0', postId: 'post_0', copies: 2 },
          { eventId: 'evt_1', postId: 'post_1', copies: 1 },
          { eventId: 'evt_2', postId: 'post_2', copies: 1 },
        ],
        invalid: 0,
        invalidSamples: [],
      },
    ],
    undispatched: [],
    leasedPastBound: [],
  };
}

describe('the Redis breakdown', () => {
  it('groups keys by kind: one row per kind, not per organisation, endpoint or user', () => {
    expect(redisKeyKind('herald:history:{org-soak-a-3f9}')).toBe('herald:history:{…}');
    expect(redisKeyKind('herald:{herald}:work')).toBe('herald:{…}:work');
    expect(redisKeyKind('herald:tenant:org-sockets:org-soak-b-b2d')).toBe('herald:tenant:org-sockets:…');
    expect(redisKeyKind('herald:tenant:sockets:user:42')).toBe('herald:tenant:sockets:…');
    expect(redisKeyKind('bull:queue:1234')).toBe('bull:queue:N');
  });
});

describe('the RSS slope once settled', () => {
  /** One sample every 10 s for `minutes`, RSS from `rssAt(minute)`. */
  const samples = (minutes: number, rssAt: (minute: number) => number, startMs = 0): ProcessSample[] =>
    Array.from({ length: (minutes * 60) / 10 }, (_, index) => {
      const t = startMs + index * 10_000;
      return { t, role: 'api-1', pid: 1, rssMb: rssAt(t / 60_000), cpuUs: 0 };
    });
  /** The allocator's ramp: 120 → 180 MB over the first 12 minutes, then a plateau. */
  const ramp = (minute: number) => 120 + 60 * Math.min(1, minute / 12);

  it('reads a ramp then a plateau with the allocator giving 30 MB back now and then as flat', () => {
    // A dip of 30 MB for a minute in every 7: a plain least-squares line through the samples tilts with them.
    const rss = (minute: number) => ramp(minute) - (Math.floor(minute) % 7 === 3 ? 30 : 0);
    const result = settledRss(samples(45, rss), 60_000);
    expect(result.settledRssPeaksMb).toEqual([180, 180, 180, 180, 180]);
    expect(result.rssSlopeMbPerHour).toBe(0);
  });

  it('reads a leak of 6 MB/hour on top of the plateau as 6 MB/hour', () => {
    const result = settledRss(
      samples(45, (minute) => ramp(minute) + (6 * minute) / 60),
      60_000,
    );
    expect(result.rssSlopeMbPerHour).toBeCloseTo(6, 0);
  });

  it('runs the pods with the allocator setting of the container images', async () => {
    const dockerfile = await readFile(join(ROOT, 'deploy/Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(new RegExp(`^\\s*MALLOC_ARENA_MAX=${IMAGE_MALLOC_ARENA_MAX}$`, 'm'));
  });

  it('reads the V8 heap by its floor per window: a collector sawtooth over a flat floor is flat, a rising floor is a leak', () => {
    // Heap in use climbs 40 → 70 MB between collections every 40 s; the floor is what survives them.
    const sawtooth = (minute: number) => 40 + 30 * (((minute * 60) % 40) / 40);
    const flat = samples(45, ramp).map((sample) => ({ ...sample, heapMb: sawtooth(sample.t / 60_000) }));
    expect(settledHeap(flat, 60_000)).toEqual({ heapSlopeMbPerHour: 0, settledHeapFloorsMb: [40, 40, 40, 40, 40] });
    const leaking = flat.map((sample) => ({ ...sample, heapMb: sample.heapMb + (4 * sample.t) / 3_600_000 }));
    expect(settledHeap(leaking, 60_000).heapSlopeMbPerHour).toBeCloseTo(4, 0);
    // The RSS of the same samples is judged apart: a flat RSS plateau beside the leaking heap.
    expect(settledRss(leaking, 60_000).rssSlopeMbPerHour).toBe(0);
    expect(settledHeap(samples(45, ramp), 60_000)).toEqual({ heapSlopeMbPerHour: null, settledHeapFloorsMb: [] });
  });

  it('reads external memory apart from the heap: buffers kept alive rise while the heap floor stays flat', () => {
    const sawtooth = (minute: number) => 40 + 30 * (((minute * 60) % 40) / 40);
    const growing = samples(45, ramp).map((sample) => ({
      ...sample,
      heapMb: sawtooth(sample.t / 60_000),
      externalMb: 5 + sawtooth(sample.t / 60_000) / 10 + (3 * sample.t) / 3_600_000,
    }));
    expect(settledHeap(growing, 60_000).heapSlopeMbPerHour).toBe(0);
    expect(settledExternal(growing, 60_000).externalSlopeMbPerHour).toBeCloseTo(3, 0);
    expect(settledExternal(samples(45, ramp), 60_000)).toEqual({
      externalSlopeMbPerHour: null,
      settledExternalFloorsMb: [],
    });
  });

  it("reads a process's live V8 heap (after its last full collection) and external memory from its Prometheus text, and nothing from text without them", async () => {
    let body =
      '# HELP x\nherald_dispatcher_nodejs_heap_size_used_bytes 90000000\nherald_dispatcher_heap_live_after_gc_bytes 52428800\n' +
      'herald_dispatcher_nodejs_external_memory_bytes 3145728\n';
    const server = createServer((_request, response) => response.end(body));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    try {
      expect(await memoryFromMetrics(`http://127.0.0.1:${port}/metrics`)).toEqual({
        heapBytes: 52_428_800,
        externalBytes: 3_145_728,
      });
      // Before the process's first full collection the gauge is 0: no figure yet.
      body = 'herald_api_heap_live_after_gc_bytes 0\nherald_api_nodejs_external_memory_bytes 3145728\n';
      expect(await memoryFromMetrics(`http://127.0.0.1:${port}/metrics`)).toEqual({
        heapBytes: undefined,
        externalBytes: 3_145_728,
      });
      body = 'herald_api_process_resident_memory_bytes 1\n';
      expect(await memoryFromMetrics(`http://127.0.0.1:${port}/metrics`)).toEqual({
        heapBytes: undefined,
        externalBytes: undefined,
      });
    } finally {
      server.close();
    }
  });

  it('gives no slope for a process that has not lived its settling time and three whole windows', () => {
    const restarted = samples(RSS_SETTLING_MS / 60_000 + 14, ramp, 20 * 60_000);
    expect(settledRss(restarted, 60_000)).toEqual({ rssSlopeMbPerHour: null, settledRssPeaksMb: [180, 180] });
    expect(settledRss([], 60_000).rssSlopeMbPerHour).toBeNull();
  });
});

describe('the soak ledger', () => {
  it('balances a run where every event went somewhere, counting duplicates apart', () => {
    const result = checkLedger(balanced());
    expect(result.violations).toEqual([]);
    expect(result.balanced).toBe(true);
    expect(result.endpoints[0]).toMatchObject({
      selected: 5,
      succeeded: 2,
      dead: 1,
      scheduled: 1,
      skipped: 1,
      unaccounted: 0,
      receivedDuplicates: 1,
      balanced: true,
    });
    expect(result.subscribers.map((tally) => [tally.expected, tally.received])).toEqual([
      [5, 5],
      [3, 3],
    ]);
  });

  it('names the event a subscriber never got, and a duplicate and out-of-order frame', () => {
    const input = balanced();
    input.subscribers[0]!.frames = [0, 1, 3, 2, 2].map((index) => frame(index));
    const result = checkLedger(input);
    expect(result.balanced).toBe(false);
    expect(result.violations).toContainEqual(
      expect.objectContaining({ kind: 'subscriber-missing', where: 'all', id: 'post_4' }),
    );
    expect(result.violations).toContainEqual(expect.objectContaining({ kind: 'subscriber-duplicate', id: 'post_2' }));
    expect(result.violations).toContainEqual(expect.objectContaining({ kind: 'subscriber-order', id: 'post_2' }));
    expect(result.subscribers[0]).toMatchObject({ expected: 5, missing: 1, duplicates: 1 });
  });

  it('counts an event missed across CURSOR_EXPIRED as reconciled only when the application learned it', () => {
    const input = balanced();
    input.subscribers[0]!.frames = [frame(0), frame(1), frame(4, 'e2')];
    input.subscribers[0]!.expiries = [2];
    input.subscribers[0]!.reconciled = ['post_2'];
    const result = checkLedger(input);
    expect(result.subscribers[0]).toMatchObject({ reconciled: 1, missing: 1, cursorExpired: 1 });
    expect(result.violations).toEqual([
      expect.objectContaining({ kind: 'subscriber-lost-across-cursor-expired', id: 'post_3' }),
    ]);
  });

  it('does not balance an endpoint with an event that has no delivery, or a success the receiver never got', () => {
    const input = balanced();
    const endpoint = input.endpoints[0]!;
    endpoint.deliveries = endpoint.deliveries.filter((delivery) => delivery.eventId !== 'evt_3');
    endpoint.received = endpoint.received.filter((arrival) => arrival.eventId !== 'evt_1');
    const result = checkLedger(input);
    expect(result.endpoints[0]).toMatchObject({ selected: 5, unaccounted: 1, balanced: false });
    expect(result.violations).toContainEqual(
      expect.objectContaining({ kind: 'endpoint-no-delivery', where: 'hook', id: 'evt_3' }),
    );
    expect(result.violations).toContainEqual(
      expect.objectContaining({ kind: 'endpoint-succeeded-not-received', id: 'evt_1' }),
    );
  });

  it('holds a FIFO endpoint to outbox order on first sightings: copies again in order pass, one overtaking does not', () => {
    const input = balanced();
    const endpoint = input.endpoints[0]!;
    endpoint.ordered = true;
    // After a crash the last ones may come again: evt_1 repeated after evt_2 is a copy, still in order.
    endpoint.received = [
      { eventId: 'evt_0', postId: 'post_0', copies: 1 },
      { eventId: 'evt_1', postId: 'post_1', copies: 2 },
      { eventId: 'evt_2', postId: 'post_2', copies: 1 },
    ];
    const inOrder = checkLedger(input);
    expect(inOrder.endpoints[0]).toMatchObject({ outOfOrder: 0, balanced: true });

    endpoint.received = [endpoint.received[1]!, endpoint.received[0]!, endpoint.received[2]!];
    const overtaken = checkLedger(input);
    expect(overtaken.balanced).toBe(false);
    expect(overtaken.endpoints[0]).toMatchObject({ outOfOrder: 1, balanced: false });
    expect(overtaken.violations).toContainEqual(
      expect.objectContaining({ kind: 'endpoint-out-of-order', where: 'hook', id: 'evt_0' }),
    );
  });

  it('catches a forged body, a foreign event, an acknowledged publish that was not committed and stuck rows', () => {
    const input = balanced();
    input.endpoints[0]!.invalid = 1;
    input.endpoints[0]!.invalidSamples = ['signature_mismatch'];
    input.endpoints[0]!.received.push({ eventId: 'evt_other', postId: 'post_other', copies: 1 });
    input.acknowledged.push('post_lost');
    input.undispatched = ['evt_4'];
    input.leasedPastBound = ['del_1'];
    const kinds = checkLedger(input).violations.map((violation) => violation.kind);
    expect(kinds.sort()).toEqual([
      'delivery-lease-stuck',
      'outbox-undispatched',
      'publish-acknowledged-not-committed',
      'receiver-invalid-body',
      'receiver-unexpected-event',
    ]);
  });
});

function soak(args: string[], timeoutMs: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'bench/soak/main.ts', ...args],
      { cwd: ROOT, timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024, killSignal: 'SIGINT' },
      (error, stdout, stderr) => {
        const code = error ? ((error as { code?: unknown }).code as number | null) : 0;
        resolve({ code: typeof code === 'number' ? code : null, stdout, stderr });
      },
    );
  });
}

describe('pnpm soak', () => {
  it('exits 3 on an unbalanced ledger and prints which event went where', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'herald-soak-check-'));
    try {
      const input = balanced();
      input.endpoints[0]!.deliveries.pop();
      await writeFile(join(dir, 'ledger.json'), JSON.stringify(input));
      const unbalanced = await soak(['--check', join(dir, 'ledger.json')], 60_000);
      expect(unbalanced.code, unbalanced.stderr).toBe(3);
      expect(unbalanced.stdout).toContain('LEDGER DOES NOT BALANCE');
      expect(unbalanced.stdout).toContain('hook evt_4: post post_4: no delivery row');

      await writeFile(join(dir, 'ledger.json'), JSON.stringify(balanced()));
      const ok = await soak(['--check', join(dir, 'ledger.json')], 60_000);
      expect(ok.code, ok.stderr).toBe(0);
      expect(ok.stdout).toContain('ledger balanced');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses --processes other than image or source before starting anything', async () => {
    const refused = await soak(['--processes', 'docker', '--minutes', '1'], 60_000);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('--processes is source or image, not "docker"');
    expect(refused.stdout).not.toContain('cluster up');
  });

  it('runs the cluster for 2 minutes with a pod, a dispatcher and Redis killed and backends terminated: balanced', {
    timeout: 600_000,
  }, async () => {
    const out = await mkdtemp(join(tmpdir(), 'herald-soak-'));
    try {
      const run = await soak(
        ['--minutes', '2', '--faults', 'short', '--rate', '6', '--subscribers', '18', '--out', out],
        540_000,
      );
      expect(run.code, `${run.stdout.slice(-6000)}\n${run.stderr.slice(-4000)}`).toBe(0);
      // By default the pods and dispatchers are the apps' production builds, as the images run them.
      expect(run.stdout).toContain('production builds of the API and the dispatcher in');
      const results = JSON.parse(await readFile(join(out, 'results.json'), 'utf8')) as SoakResults;
      expect(results.builds).toBe('image');
      expect(results.ledger.balanced).toBe(true);
      expect(results.violationCount).toBe(0);
      expect(results.unexpectedExits).toEqual([]);
      expect(results.faults.map((fault) => fault.name)).toEqual([
        'kill-pod',
        'kill-dispatcher',
        'redis-restart',
        'pg-terminate',
      ]);
      for (const fault of results.faults) expect(fault.detail).not.toMatch(/^FAILED/);
      expect(results.publishes.committed).toBeGreaterThan(100);
      const expected = results.ledger.subscribers.reduce((total, tally) => total + tally.expected, 0);
      expect(expected).toBeGreaterThan(100);
      for (const endpoint of results.ledger.endpoints) expect(endpoint.selected, endpoint.name).toBeGreaterThan(0);
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  });
});
