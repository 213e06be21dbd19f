import { afterEach, describe, expect, it, vi } from 'vitest';
import { createStatementTurns, FIRST_CLAIMS, laneStatementCapacity, StatementTurnTimeout } from './statement-turns.js';

/** A statement that ends when the test says so, noting when it started. */
function heldStatements() {
  const started: string[] = [];
  const ends = new Map<string, () => void>();
  const statement = (name: string) => () =>
    new Promise<string>((resolve) => {
      started.push(name);
      ends.set(name, () => resolve(name));
    });
  const end = async (name: string) => {
    ends.get(name)?.();
    // The ended statement's turn is handed on in its `finally`, a few microtasks later.
    await new Promise((resolve) => setImmediate(resolve));
  };
  return { started, statement, end };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('statement turns', () => {
  it('never have more statements on their way than their capacity', async () => {
    const turns = createStatementTurns({ capacity: 3, maxWaitMs: 60_000 });
    const { started, statement, end } = heldStatements();
    const runs = [
      ...['a1', 'a2', 'a3'].map((name) => turns.run('org-a', statement(name))),
      ...['b1', 'b2'].map((name) => turns.run('org-b', statement(name))),
    ];
    await end('none');
    expect(started).toEqual(['a1', 'a2', 'b1']);
    expect(turns.inFlight).toBe(3);
    expect(turns.waiting).toBe(2);
    await end('a1');
    // A's and B's lines take the freed turns in turn: B's was served last, A's is next.
    expect(started).toEqual(['a1', 'a2', 'b1', 'a3']);
    expect(turns.inFlight).toBe(3);
    for (const name of ['a2', 'b1', 'a3', 'b2']) await end(name);
    await expect(Promise.all(runs)).resolves.toEqual(['a1', 'a2', 'a3', 'b1', 'b2']);
    expect(turns.inFlight).toBe(0);
    expect(turns.waiting).toBe(0);
  });

  it("keep one turn from a busy organisation: another's statement starts at once, not after one of its statements ends", async () => {
    const turns = createStatementTurns({ capacity: 8, maxWaitMs: 60_000 });
    const { started, statement, end } = heldStatements();
    for (let i = 1; i <= 12; i++) void turns.run('org-a', statement(`a${i}`));
    await end('none');
    expect(started).toHaveLength(7);
    void turns.run('org-b', statement('b1'));
    await end('none');
    expect(started).toHaveLength(8);
    expect(started.at(-1)).toBe('b1');
  });

  it("serve another organisation's one waiting statement after one of the busy organisation's, not after all of its line", async () => {
    const turns = createStatementTurns({ capacity: 1, maxWaitMs: 60_000 });
    const { started, statement, end } = heldStatements();
    for (const name of ['a1', 'a2', 'a3', 'a4', 'a5']) void turns.run('org-a', statement(name));
    void turns.run('org-b', statement('b1'));
    void turns.run(FIRST_CLAIMS, statement('first claim'));
    await end('none');
    expect(started).toEqual(['a1']);
    await end('a1');
    await end('a2');
    await end('b1');
    await end('first claim');
    // a1 was on its way; then one of A's, then B's, then the first claim's line, then A's again.
    expect(started).toEqual(['a1', 'a2', 'b1', 'first claim', 'a3']);
  });

  it('give the turn on when a statement fails, and pass the failure to its caller', async () => {
    const turns = createStatementTurns({ capacity: 1, maxWaitMs: 60_000 });
    const { started, statement, end } = heldStatements();
    const failing = turns.run('org-a', () => Promise.reject(new Error('connection terminated')));
    const next = turns.run('org-b', statement('b1'));
    await expect(failing).rejects.toThrow('connection terminated');
    await end('none');
    expect(started).toEqual(['b1']);
    await end('b1');
    await expect(next).resolves.toBe('b1');
    expect(turns.inFlight).toBe(0);
  });

  it('count the statements that had to wait for their turn', async () => {
    let waited = 0;
    const turns = createStatementTurns({ capacity: 1, maxWaitMs: 60_000, onWait: () => waited++ });
    const { statement, end } = heldStatements();
    void turns.run('org-a', statement('a1'));
    void turns.run('org-a', statement('a2'));
    void turns.run('org-b', statement('b1'));
    expect(waited).toBe(2);
    await end('none');
    await end('a1');
    await end('a2');
    await end('b1');
    void turns.run('org-a', statement('a3'));
    expect(waited).toBe(2);
  });

  it('fail a statement that waited past maxWaitMs, as a pooled connection does, and lose no turn to it', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const turns = createStatementTurns({ capacity: 1, maxWaitMs: 5_000 });
    const { started, statement, end } = heldStatements();
    void turns.run('org-a', statement('a1'));
    const late = turns.run('org-b', statement('b1'));
    const failed = expect(late).rejects.toThrow(StatementTurnTimeout);
    await end('none');
    vi.advanceTimersByTime(4_999);
    expect(turns.waiting).toBe(1);
    vi.advanceTimersByTime(1);
    await failed;
    await expect(late).rejects.toThrow('a webhook lane statement waited 5000 ms for a database turn');
    expect(turns.waiting).toBe(0);
    // The turn it never took is still there for the next one.
    await end('a1');
    void turns.run('org-b', statement('b2'));
    await end('none');
    expect(started).toEqual(['a1', 'b2']);
    expect(turns.inFlight).toBe(1);
  });

  it('keep the turn of a statement whose wait counter throws', async () => {
    const turns = createStatementTurns({
      capacity: 1,
      maxWaitMs: 60_000,
      onWait: () => {
        throw new Error('counter broken');
      },
    });
    const { started, statement, end } = heldStatements();
    void turns.run('org-a', statement('a1'));
    const second = turns.run('org-b', statement('b1'));
    await end('none');
    await end('a1');
    expect(started).toEqual(['a1', 'b1']);
    await end('b1');
    await expect(second).resolves.toBe('b1');
    expect(turns.inFlight).toBe(0);
  });

  it('refuse a capacity below one', () => {
    expect(() => createStatementTurns({ capacity: 0, maxWaitMs: 60_000 })).toThrow(
      'statement turns need a capacity of at least 1, got 0',
    );
  });
});

describe('lane statement capacity', () => {
  it.each([
    [10, 8],
    [20, 18],
    [4, 3],
    [3, 3],
    [1, 1],
  ])('of a pool of %i connections is %i', (connections, capacity) => {
    expect(laneStatementCapacity(connections)).toBe(capacity);
  });
});
