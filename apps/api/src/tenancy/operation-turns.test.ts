import { describe, expect, it } from 'vitest';
import { createOperationTurns, SHARED_FOR_MS, type Turn } from './operation-turns.js';

/** Whether `turn` has been given its turn yet (true), was given back waiting (false), or still waits. */
async function outcome(turn: Turn): Promise<boolean | 'waiting'> {
  if (turn.ready === undefined) return true;
  return Promise.race([turn.ready, new Promise<'waiting'>((resolve) => setImmediate(resolve, 'waiting'))]);
}

/** Lets `setImmediate` callbacks run (a turn given back lets the next one go from there). */
const nextLoopTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('operation turns', () => {
  it('runs at most perTenant operations of one tenant at once; the rest wait in arrival order', async () => {
    const turns = createOperationTurns(2);
    const [a1, a2, a3, a4] = Array.from({ length: 4 }, () => turns.ask('org:a'));
    expect(a1!.ready).toBeUndefined();
    expect(a2!.ready).toBeUndefined();
    expect(await outcome(a3!)).toBe('waiting');
    expect(await outcome(a4!)).toBe('waiting');
    expect(turns.waiting).toBe(2);

    a2!.give();
    await nextLoopTurn();
    expect(await outcome(a3!)).toBe(true);
    expect(await outcome(a4!)).toBe('waiting');
    expect(turns.waiting).toBe(1);
  });

  it("never makes another tenant wait behind one tenant's queue", async () => {
    const turns = createOperationTurns(1);
    const a = Array.from({ length: 50 }, () => turns.ask('org:a'));
    expect(turns.waiting).toBe(49);
    const b = turns.ask('org:b');
    expect(b.ready).toBeUndefined();
    const user = turns.ask('user:someone');
    expect(user.ready).toBeUndefined();
    for (const turn of a) turn.give();
  });

  it('lets the next operation go from setImmediate, not from the microtask that ended the one before', async () => {
    const turns = createOperationTurns(1);
    const first = turns.ask('org:a');
    const second = turns.ask('org:a');
    let taken = false;
    void second.ready!.then(() => {
      taken = true;
    });
    first.give();
    for (let i = 0; i < 20; i++) await Promise.resolve();
    expect(taken).toBe(false);
    await nextLoopTurn();
    expect(taken).toBe(true);
  });

  it('a newcomer does not pass an operation already waiting while a turn is being handed over', async () => {
    const turns = createOperationTurns(1);
    const first = turns.ask('org:a');
    const waiting = turns.ask('org:a');
    first.give();
    // Before the hand-over runs, a new operation arrives: it queues behind the waiting one.
    const newcomer = turns.ask('org:a');
    expect(newcomer.ready).toBeDefined();
    await nextLoopTurn();
    expect(await outcome(waiting)).toBe(true);
    expect(await outcome(newcomer)).toBe('waiting');
  });

  it('an operation given back while it waits (its client left) takes no turn and frees none', async () => {
    const turns = createOperationTurns(1);
    const running = turns.ask('org:a');
    const gone = turns.ask('org:a');
    const next = turns.ask('org:a');
    gone.give();
    expect(await gone.ready).toBe(false);
    expect(turns.waiting).toBe(1);
    // Giving it back again changes nothing.
    gone.give();
    await nextLoopTurn();
    expect(await outcome(next)).toBe('waiting');

    running.give();
    await nextLoopTurn();
    expect(await outcome(next)).toBe(true);
    expect(turns.waiting).toBe(0);
    // The tenant still has exactly one turn: a newcomer waits until `next` ends.
    const after = turns.ask('org:a');
    expect(await outcome(after)).toBe('waiting');
    next.give();
    await nextLoopTurn();
    expect(await outcome(after)).toBe(true);
  });

  it('a turn given back twice frees one turn, not two', async () => {
    const turns = createOperationTurns(1);
    const first = turns.ask('org:a');
    const second = turns.ask('org:a');
    const third = turns.ask('org:a');
    first.give();
    first.give();
    await nextLoopTurn();
    await nextLoopTurn();
    expect(await outcome(second)).toBe(true);
    expect(await outcome(third)).toBe('waiting');
  });

  it('forgets a tenant once it has nothing running or waiting', async () => {
    const turns = createOperationTurns(1);
    for (let i = 0; i < 1_000; i++) turns.ask(`org:${i}`).give();
    expect(turns.tenants).toBe(0);
    const a = turns.ask('org:a');
    const gone = turns.ask('org:a');
    gone.give();
    a.give();
    await nextLoopTurn();
    expect(turns.tenants).toBe(0);
  });

  it('counts each operation that had to wait', () => {
    let waited = 0;
    const turns = createOperationTurns(2, () => waited++);
    const asked = Array.from({ length: 5 }, () => turns.ask('org:a'));
    expect(waited).toBe(3);
    for (const turn of asked) turn.give();
  });

  it('with 0 turns per tenant the gate is off: every operation runs at once', () => {
    const turns = createOperationTurns(0);
    expect(turns.on).toBe(false);
    for (let i = 0; i < 100; i++) expect(turns.ask('org:a').ready).toBeUndefined();
    expect(turns.waiting).toBe(0);
  });

  describe('a tenant alone on the pod', () => {
    /** A hand-moved clock, so "the last second" is exact. */
    function clock() {
      let at = 10_000;
      return { now: () => at, advance: (ms: number) => (at += ms) };
    }

    it('runs up to `alone` operations at once while no other tenant asks', async () => {
      const time = clock();
      const turns = createOperationTurns(2, undefined, { alone: 5, now: time.now });
      const asked = Array.from({ length: 7 }, () => turns.ask('org:a'));
      expect(asked.slice(0, 5).every((turn) => turn.ready === undefined)).toBe(true);
      expect(await outcome(asked[5]!)).toBe('waiting');
      expect(turns.waiting).toBe(2);
      asked[0]!.give();
      await nextLoopTurn();
      expect(await outcome(asked[5]!)).toBe(true);
      expect(await outcome(asked[6]!)).toBe('waiting');
    });

    it('is back to perTenant as soon as another tenant asks, and stays there for a second after', async () => {
      const time = clock();
      const turns = createOperationTurns(2, undefined, { alone: 5, now: time.now });
      const a = Array.from({ length: 5 }, () => turns.ask('org:a'));
      expect(a.every((turn) => turn.ready === undefined)).toBe(true);
      turns.ask('org:b').give();
      // A's five run to their end; its next waits until it is under two again.
      const waiting = turns.ask('org:a');
      for (const turn of a.slice(0, 3)) turn.give();
      await nextLoopTurn();
      expect(await outcome(waiting)).toBe('waiting');
      a[3]!.give();
      await nextLoopTurn();
      expect(await outcome(waiting)).toBe(true);

      // B asked nothing more: within the second A is still held to two, after it to five again.
      time.advance(SHARED_FOR_MS - 1);
      const held = [turns.ask('org:a'), turns.ask('org:a')];
      expect(held.every((turn) => turn.ready !== undefined)).toBe(true);
      time.advance(2);
      a[4]!.give();
      await nextLoopTurn();
      await nextLoopTurn();
      expect(await outcome(held[0]!)).toBe(true);
      expect(await outcome(held[1]!)).toBe(true);
      expect(turns.waiting).toBe(0);
    });

    it('is not alone while another tenant has an operation running, however long ago it asked', async () => {
      const time = clock();
      const turns = createOperationTurns(1, undefined, { alone: 4, now: time.now });
      const b = turns.ask('org:b');
      const a = turns.ask('org:a');
      time.advance(10 * SHARED_FOR_MS);
      const second = turns.ask('org:a');
      expect(await outcome(second)).toBe('waiting');
      b.give();
      time.advance(SHARED_FOR_MS + 1);
      a.give();
      await nextLoopTurn();
      expect(await outcome(second)).toBe(true);
      expect(turns.ask('org:a').ready).toBeUndefined();
    });

    it('without `alone` a lone tenant is held to perTenant as before', async () => {
      const turns = createOperationTurns(2);
      const asked = Array.from({ length: 3 }, () => turns.ask('org:a'));
      expect(await outcome(asked[2]!)).toBe('waiting');
    });
  });

  it('a hand-over left over from a forgotten tenant record does not touch the record made when it asks again', async () => {
    const turns = createOperationTurns(2, undefined, { alone: 3, now: () => 0 });
    const [r1, r2, r3] = [turns.ask('org:a'), turns.ask('org:a'), turns.ask('org:a')];
    expect(r3!.ready).toBeUndefined(); // alone: three at once
    const [w1, w2] = [turns.ask('org:a'), turns.ask('org:a')];
    // Two end in one phase: two hand-overs queued; the first lets w1 go and queues one more.
    r1!.give();
    r2!.give();
    await nextLoopTurn();
    expect(await outcome(w1!)).toBe(true);
    expect(await outcome(w2!)).toBe(true);
    // Everything ends: the record is forgotten; the tenant asks again before the leftover hand-over runs.
    for (const turn of [r3!, w1!, w2!]) turn.give();
    const again = [turns.ask('org:a'), turns.ask('org:a'), turns.ask('org:a'), turns.ask('org:a')];
    expect(turns.tenants).toBe(1);
    await nextLoopTurn();
    await nextLoopTurn();
    // Still one record, holding three running and one waiting.
    expect(turns.tenants).toBe(1);
    expect(turns.waiting).toBe(1);
    expect(await outcome(again[3]!)).toBe('waiting');
    for (const turn of again) turn.give();
  });
});
