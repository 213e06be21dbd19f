import { describe, expect, it } from 'vitest';
import { createAttemptGate, type GateLane } from './attempt-gate.js';

function lane(orgId: string): GateLane & { woken: number } {
  const made = {
    orgId,
    woken: 0,
    wake() {
      made.woken++;
    },
  };
  return made;
}

const microtasks = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('the attempt gate', () => {
  it('never has more permits out than the dispatcher cap, nor more than the organisation cap', () => {
    const gate = createAttemptGate({ concurrency: 3, orgConcurrency: 2 });
    const a = lane('a');
    const b = lane('b');
    expect([gate.tryAcquire(a), gate.tryAcquire(a), gate.tryAcquire(a)]).toEqual([true, true, false]);
    expect(gate.inFlight('a')).toBe(2);
    expect(gate.tryAcquire(b)).toBe(true);
    expect(gate.tryAcquire(b)).toBe(false);
    expect(gate.inFlight()).toBe(3);
    expect(gate.waiting()).toBe(2);
  });

  it('hands each permit given back to the organisations waiting in turn, not to the one with most lanes', async () => {
    const gate = createAttemptGate({ concurrency: 2, orgConcurrency: 0 });
    const busy = Array.from({ length: 5 }, () => lane('storm'));
    expect(gate.tryAcquire(busy[0]!)).toBe(true);
    expect(gate.tryAcquire(busy[1]!)).toBe(true);
    for (const waiting of busy.slice(2)) expect(gate.tryAcquire(waiting)).toBe(false);
    // A quiet organisation's lane comes last, behind three of the storm's.
    const quiet = lane('quiet');
    expect(gate.tryAcquire(quiet)).toBe(false);

    gate.release('storm');
    gate.release('storm');
    await microtasks();
    // One for the storm's first waiting lane, one for the quiet organisation: it did not wait for the rest.
    expect(busy[2]!.woken).toBe(1);
    expect(quiet.woken).toBe(1);
    expect(busy[3]!.woken + busy[4]!.woken).toBe(0);
    // The woken lanes start with the permits reserved for them, even though the gate is full.
    expect(gate.tryAcquire(quiet)).toBe(true);
    expect(gate.tryAcquire(busy[2]!)).toBe(true);
    expect(gate.inFlight()).toBe(2);
  });

  it('gives back what a lane that no longer wants to start was holding, to the next in line', async () => {
    const gate = createAttemptGate({ concurrency: 1, orgConcurrency: 0 });
    const first = lane('a');
    const second = lane('b');
    const third = lane('c');
    expect(gate.tryAcquire(first)).toBe(true);
    expect(gate.tryAcquire(second)).toBe(false);
    expect(gate.tryAcquire(third)).toBe(false);
    gate.release('a');
    await microtasks();
    expect(second.woken).toBe(1);
    // It wound down instead: its reserved permit goes to the next lane waiting.
    gate.leave(second);
    await microtasks();
    expect(third.woken).toBe(1);
    expect(gate.tryAcquire(third)).toBe(true);
    expect(gate.inFlight()).toBe(1);
    expect(gate.waiting()).toBe(0);
  });

  it('lets an organisation under its cap start while another waits at its own cap', () => {
    const gate = createAttemptGate({ concurrency: 10, orgConcurrency: 1 });
    const a = lane('a');
    expect(gate.tryAcquire(a)).toBe(true);
    expect(gate.tryAcquire(lane('a'))).toBe(false);
    expect(gate.tryAcquire(lane('b'))).toBe(true);
    // Behind its own organisation's waiting lane, even with room: no overtaking within an organisation.
    gate.release('a');
    expect(gate.inFlight('a')).toBe(1);
    expect(gate.tryAcquire(lane('a'))).toBe(false);
  });

  it('with no caps lets everything through', () => {
    const gate = createAttemptGate({ concurrency: 0, orgConcurrency: 0 });
    const a = lane('a');
    for (let i = 0; i < 1_000; i++) expect(gate.tryAcquire(a)).toBe(true);
    expect(gate.waiting()).toBe(0);
  });
});

describe('an attempt gate with a changing organisation limit (permits held across dispatchers)', () => {
  it('says when an organisation is short and hands out what a raised limit frees, in turn', async () => {
    const limits = new Map([['a', 1]]);
    const short: Array<[string, number]> = [];
    const released: string[] = [];
    const gate = createAttemptGate({
      concurrency: 10,
      orgConcurrency: 0,
      orgLimit: (orgId) => limits.get(orgId) ?? 0,
      onOrgShort: (orgId, demand) => short.push([orgId, demand]),
      onOrgRelease: (orgId) => released.push(orgId),
    });
    const first = lane('a');
    const second = lane('a');
    expect(gate.tryAcquire(first)).toBe(true);
    expect(gate.tryAcquire(second)).toBe(false);
    // One in flight and one waiting: it could use two.
    expect(short).toEqual([['a', 2]]);
    limits.set('a', 2);
    gate.refresh();
    await microtasks();
    expect(second.woken).toBe(1);
    expect(gate.tryAcquire(second)).toBe(true);
    gate.release('a');
    expect(released).toEqual(['a']);
    expect(gate.inFlight('a')).toBe(1);
    // Without a known limit (0) nothing starts, and the organisation says it is short.
    expect(gate.tryAcquire(lane('b'))).toBe(false);
    expect(short.at(-1)).toEqual(['b', 1]);
    expect(gate.waiting('b')).toBe(1);
  });
});
