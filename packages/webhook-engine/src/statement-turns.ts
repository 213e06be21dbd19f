/**
 * The lanes' statements to PostgreSQL (claims, records, slot counts), taken in turns by organisation.
 *
 * A dispatcher's pool has a few connections (`DATABASE_POOL_MAX`, 10) and node-postgres hands them out
 * first come, first served. One organisation with many busy endpoints has a statement on its way from
 * each of its lanes, and those alone can keep every connection busy: measured with 20 busy endpoints of
 * one organisation, another organisation's first claim and the relay's fan-out waited up to 54 ms for a
 * connection, 11–18 checkouts in the line ahead of them. So here:
 * - lanes have at most `capacity` statements on their way at once, fewer than the pool's connections:
 *   the rest stay free for the relay, the scheduler and everything else the dispatcher runs, which
 *   never wait behind a lane;
 * - no organisation has all of those turns: one is always left for another organisation's statement, so
 *   a quiet organisation's claim does not wait for a busy one's statements to end;
 * - when they have to wait, each organisation waits in a line of its own, and a free turn goes to the
 *   lines in turn (round robin), so an organisation that has one statement waiting is served after at
 *   most one statement of each other organisation waiting, however many those have queued.
 * A lane that has not claimed yet does not know its organisation (a work entry names an endpoint and
 * deliveries): its first claim waits in a line of its own, {@link FIRST_CLAIMS}, taken in turn like the
 * others.
 *
 * Why not a library: the pool's own queue is the one to get round, and none of the pools or limiters
 * we know (pg-pool, generic-pool, p-limit, p-queue) serves waiting callers by a key in turns.
 */
export interface StatementTurns {
  /** Runs `statement` in `orgId`'s turn; its result or rejection is passed on. */
  run<T>(orgId: string, statement: () => Promise<T>): Promise<T>;
  /** Statements on their way now. */
  readonly inFlight: number;
  /** Statements waiting for a turn now, all organisations together. */
  readonly waiting: number;
}

/** The line of a lane that does not know its organisation yet (its first claim). */
export const FIRST_CLAIMS = '';

/**
 * Connections of a dispatcher's pool the lanes leave to everything else: two of ten, none of a pool of
 * three or fewer (there the lanes wait for one another in turns, and the others wait with them).
 */
export function laneStatementCapacity(connections: number): number {
  const reserved = Math.min(2, Math.floor(connections / 4));
  return Math.max(1, connections - reserved);
}

/**
 * @param capacity statements on their way at once (at least 1)
 * @param onWait called when a statement has to wait for its turn (a counter)
 */
export function createStatementTurns(capacity: number, onWait?: () => void): StatementTurns {
  if (!(capacity >= 1)) throw new Error(`statement turns need a capacity of at least 1, got ${capacity}`);
  // One organisation never has every turn: the last is kept for another's statement.
  const perOrganisation = Math.max(1, capacity - 1);
  let inFlight = 0;
  let waiting = 0;
  const onTheirWay = new Map<string, number>();
  // A line per organisation with statements waiting, in the order they are served: a line that was
  // served moves to the back (Map keeps insertion order), and goes once it is empty.
  const lines = new Map<string, Array<() => void>>();

  /** Starts the first statement of the first line whose organisation may have one more on its way. */
  function serveOne(): boolean {
    for (const [orgId, line] of lines) {
      const theirs = onTheirWay.get(orgId) ?? 0;
      if (theirs >= perOrganisation) continue;
      const start = line.shift() as () => void;
      lines.delete(orgId);
      if (line.length > 0) lines.set(orgId, line);
      waiting--;
      inFlight++;
      onTheirWay.set(orgId, theirs + 1);
      start();
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

  return {
    async run(orgId, statement) {
      let started = false;
      const turn = new Promise<void>((start) => {
        const line = lines.get(orgId);
        const go = () => {
          started = true;
          start();
        };
        if (line) line.push(go);
        else lines.set(orgId, [go]);
      });
      waiting++;
      serve();
      if (!started) onWait?.();
      // The turn is counted (`inFlight`) from the moment it is given, before this continues.
      await turn;
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
