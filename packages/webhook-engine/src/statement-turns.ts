/**
 * The lanes' statements to PostgreSQL (claims, records, slot counts), taken in turns by organisation.
 *
 * A dispatcher's pool has a few connections (`DATABASE_POOL_MAX`, 10) and node-postgres hands them out
 * first come, first served. One organisation with many busy endpoints has a statement on its way from
 * each of its lanes, and those alone can keep every connection busy: measured with 20 busy endpoints of
 * one organisation, another organisation's first claim and the relay's fan-out waited up to 54 ms for a
 * connection, 11–18 checkouts in the line ahead of them. So here:
 * - lanes have at most `capacity` statements on their way at once, fewer than the pool's connections:
 *   the rest are left to the relay, the scheduler and the dispatcher's other statements (and, in the
 *   API's own dispatcher, to the API's queries), which do not wait behind the lanes' line;
 * - no organisation has all of those turns: one is left for another organisation's statement, so a
 *   quiet organisation's claim does not wait for a busy one's statements to end (unless several
 *   organisations together fill them);
 * - when they have to wait, each organisation waits in a line of its own, and a free turn goes to the
 *   lines in turn (round robin), so an organisation that has one statement waiting is served after at
 *   most one statement of each other organisation waiting, however many those have queued.
 * A work entry names an endpoint and deliveries, not an organisation: the lanes remember each endpoint's
 * organisation from their claims, and only the first claim for an endpoint this dispatcher has not
 * claimed for yet waits in a line of its own, {@link FIRST_CLAIMS}, taken in turn like the others.
 * A statement waits for its turn at most `maxWaitMs`, as it would for a pooled connection.
 *
 * Why not a library: the pool's own queue is the one to get round, and none of the pools or limiters
 * we know (pg-pool, generic-pool, p-limit, p-queue) serves waiting callers by a key in turns.
 */
export interface StatementTurns {
  /**
   * Runs `statement` in `orgId`'s turn; its result or rejection is passed on. Rejects with
   * {@link StatementTurnTimeout} when no turn came in time. A statement must not call `run` itself
   * (at its organisation's limit it would wait for its own turn).
   */
  run<T>(orgId: string, statement: () => Promise<T>): Promise<T>;
  /** Statements on their way now. */
  readonly inFlight: number;
  /** Statements waiting for a turn now, all organisations together. */
  readonly waiting: number;
}

/** The line of a lane that does not know its organisation yet (its first claim). */
export const FIRST_CLAIMS = '';

/**
 * Statements the lanes may have on their way at once with a pool of `connections`: all but two of 8 or
 * more (10: 8), all but one of 4–7, all of 3 or fewer (there the lanes wait for one another in turns, and
 * the dispatcher's other statements wait with them).
 */
export function laneStatementCapacity(connections: number): number {
  const reserved = Math.min(2, Math.floor(connections / 4));
  return Math.max(1, connections - reserved);
}

/** A statement that waited too long for its turn; the lane's caller handles it as a failed statement. */
export class StatementTurnTimeout extends Error {
  constructor(waitedMs: number) {
    super(`a webhook lane statement waited ${waitedMs} ms for a database turn`);
    this.name = 'StatementTurnTimeout';
  }
}

export interface StatementTurnsOptions {
  /** Statements on their way at once (at least 1). */
  capacity: number;
  /**
   * A statement that has not had its turn after this long fails ({@link StatementTurnTimeout}), as one
   * waiting for a pooled connection does: a database that is gone fails every waiting statement within
   * it, not batch after batch of the turns.
   */
  maxWaitMs: number;
  /** Called when a statement has to wait for its turn (a counter). */
  onWait?: () => void;
}

interface Waiter {
  go: () => void;
}

export function createStatementTurns(options: StatementTurnsOptions): StatementTurns {
  const { capacity, maxWaitMs } = options;
  if (!(capacity >= 1)) throw new Error(`statement turns need a capacity of at least 1, got ${capacity}`);
  // One organisation never has every turn: the last is kept for another's statement.
  const perOrganisation = Math.max(1, capacity - 1);
  let inFlight = 0;
  let waiting = 0;
  const onTheirWay = new Map<string, number>();
  // A line per organisation with statements waiting, in the order they are served: a line that was
  // served moves to the back (Map keeps insertion order), and goes once it is empty.
  const lines = new Map<string, Waiter[]>();

  /** Starts the first statement of the first line whose organisation may have one more on its way. */
  function serveOne(): boolean {
    for (const [orgId, line] of lines) {
      const theirs = onTheirWay.get(orgId) ?? 0;
      if (theirs >= perOrganisation) continue;
      const waiter = line.shift() as Waiter;
      lines.delete(orgId);
      if (line.length > 0) lines.set(orgId, line);
      waiting--;
      inFlight++;
      onTheirWay.set(orgId, theirs + 1);
      waiter.go();
      return true;
    }
    return false;
  }

  function serve(): void {
    while (inFlight < capacity && serveOne()) {}
  }

  function ended(orgId: string): void {
    inFlight--;
    const theirs = (onTheirWay.get(orgId) ?? 1) - 1;
    if (theirs === 0) onTheirWay.delete(orgId);
    else onTheirWay.set(orgId, theirs);
    serve();
  }

  /** Takes a waiter that gave up out of its line. */
  function withdraw(orgId: string, waiter: Waiter): void {
    const line = lines.get(orgId);
    const at = line?.indexOf(waiter) ?? -1;
    if (!line || at < 0) return;
    line.splice(at, 1);
    if (line.length === 0) lines.delete(orgId);
    waiting--;
  }

  function turn(orgId: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const waiter: Waiter = {
        go() {
          if (timer) clearTimeout(timer);
          timer = undefined;
          resolve();
        },
      };
      const line = lines.get(orgId);
      if (line) line.push(waiter);
      else lines.set(orgId, [waiter]);
      waiting++;
      serve();
      if (lines.get(orgId)?.includes(waiter) !== true) return;
      // Still in line: it waits.
      try {
        options.onWait?.();
      } catch {
        // A counter that throws must not cost the statement its turn.
      }
      timer = setTimeout(() => {
        timer = undefined;
        withdraw(orgId, waiter);
        reject(new StatementTurnTimeout(maxWaitMs));
      }, maxWaitMs);
    });
  }

  return {
    async run(orgId, statement) {
      // The turn is counted (`inFlight`) from the moment it is given, before this continues.
      await turn(orgId);
      try {
        return await statement();
      } finally {
        ended(orgId);
      }
    },
    get inFlight() {
      return inFlight;
    },
    get waiting() {
      return waiting;
    },
  };
}
