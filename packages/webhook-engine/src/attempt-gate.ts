/**
 * The attempt gate: how many webhook POSTs one dispatcher has in flight, all endpoint lanes together, and
 * who goes next when that is full.
 *
 * Every POST a lane starts takes a permit and gives it back when the attempt ends. At most `concurrency`
 * permits are out (`WEBHOOK_CONCURRENCY`), and at most `orgConcurrency` for one organisation
 * (`TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT`: what this dispatcher holds of it, see below). A lane that finds the gate full
 * waits in its organisation's line; a permit given back goes to the organisations that wait in turn
 * (round robin), and within one to its lanes in turn. So an organisation with a backlog on many slow
 * endpoints takes at most its share, and another organisation's new delivery is started with the next
 * permit given back, not after the backlog.
 *
 * A permit handed to a waiting lane is reserved for it (counted as out) and the lane is woken; the lane
 * uses it on its next start, or gives it back ({@link AttemptGate.leave}) when it winds down without
 * starting. A lane checks the gate synchronously right before a POST, never awaits it: its leases must
 * outlive the attempt it starts, and only the lane knows when they were renewed (endpoint-lanes.ts).
 *
 * Across dispatchers, an organisation's cap is shared through permits held in Redis (org-permits.ts):
 * the gate's limit for an organisation is then what this dispatcher holds ({@link AttemptGateOptions.orgLimit}),
 * it says when it is short ({@link AttemptGateOptions.onOrgShort}) and when a permit came back
 * ({@link AttemptGateOptions.onOrgRelease}), and {@link AttemptGate.refresh} hands out what a raised
 * limit freed. The turns among organisations stay this gate's.
 */

/** What the gate knows of a lane: its organisation, and how to wake it. */
export interface GateLane {
  orgId: string;
  /** Called (in a microtask) when a permit has been reserved for it. */
  wake(): void;
}

export interface AttemptGate {
  /**
   * True, and a permit is the caller's (a reserved one first), when it may start a POST now. False: it
   * waits in its organisation's line and is woken when a permit is reserved for it.
   */
  tryAcquire(lane: GateLane): boolean;
  /** Gives back the permit of a POST of `orgId` that ended, and hands it to a waiting lane. */
  release(orgId: string): void;
  /** The lane no longer wants to start anything: out of the line, its reserved permits given back. */
  leave(lane: GateLane): void;
  /** POSTs in flight (and permits reserved) now, in all and for one organisation. */
  inFlight(orgId?: string): number;
  /** Lanes waiting in line now, in all or for one organisation. */
  waiting(orgId?: string): number;
  /** An organisation's limit went up: hands out the permits it frees to lanes waiting. */
  refresh(): void;
}

export interface AttemptGateOptions {
  /** Permits in all (`WEBHOOK_CONCURRENCY`); 0: unlimited. */
  concurrency: number;
  /** Permits per organisation (`TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT`); 0: unlimited. */
  orgConcurrency: number;
  /**
   * An organisation's permits now, instead of `orgConcurrency` (Infinity: unlimited); read at every
   * check, so it may change at any time (org-permits.ts). @default `orgConcurrency` for every one
   */
  orgLimit?: (orgId: string) => number;
  /** A lane of `orgId` waits because the organisation is at its limit; `demand`: permits it could use. */
  onOrgShort?: (orgId: string, demand: number) => void;
  /** A permit of `orgId` came back (counts already updated), before it is handed out again. */
  onOrgRelease?: (orgId: string) => void;
  /** A lane was refused a permit by its organisation's limit (a metric). */
  onOrgThrottled?: (orgId: string) => void;
}

export function createAttemptGate(options: AttemptGateOptions): AttemptGate {
  const total = options.concurrency > 0 ? options.concurrency : Number.POSITIVE_INFINITY;
  const fixedPerOrg = options.orgConcurrency > 0 ? options.orgConcurrency : Number.POSITIVE_INFINITY;
  const perOrg = options.orgLimit ?? (() => fixedPerOrg);
  let out = 0;
  const outByOrg = new Map<string, number>();
  const reserved = new Map<GateLane, number>();
  /** Organisations with lanes waiting, in turn order: the first is served next. */
  const lines = new Map<string, GateLane[]>();

  const orgOut = (orgId: string) => outByOrg.get(orgId) ?? 0;
  const take = (orgId: string) => {
    out++;
    outByOrg.set(orgId, orgOut(orgId) + 1);
  };
  const give = (orgId: string) => {
    out--;
    const left = orgOut(orgId) - 1;
    if (left > 0) outByOrg.set(orgId, left);
    else outByOrg.delete(orgId);
  };

  const wait = (lane: GateLane) => {
    const line = lines.get(lane.orgId);
    if (!line) lines.set(lane.orgId, [lane]);
    else if (!line.includes(lane)) line.push(lane);
  };

  /** Reserves the permits free now for waiting lanes, one organisation after another. */
  const handOut = () => {
    let served = true;
    while (out < total && lines.size > 0 && served) {
      served = false;
      for (const [orgId, line] of [...lines]) {
        if (out >= total) break;
        if (orgOut(orgId) >= perOrg(orgId)) {
          options.onOrgShort?.(orgId, orgOut(orgId) + line.length);
          continue;
        }
        const lane = line.shift()!;
        if (line.length === 0) lines.delete(orgId);
        else {
          // Its turn is over: to the back of the order.
          lines.delete(orgId);
          lines.set(orgId, line);
        }
        take(orgId);
        reserved.set(lane, (reserved.get(lane) ?? 0) + 1);
        served = true;
        queueMicrotask(() => lane.wake());
      }
    }
  };

  return {
    tryAcquire(lane) {
      const held = reserved.get(lane) ?? 0;
      if (held > 0) {
        if (held === 1) reserved.delete(lane);
        else reserved.set(lane, held - 1);
        return true;
      }
      // Behind lanes of its own organisation already waiting; otherwise whoever finds room takes it
      // (lanes of other organisations wait only while the gate is full or they are at their own cap).
      const limit = perOrg(lane.orgId);
      if (out < total && orgOut(lane.orgId) < limit && !lines.has(lane.orgId)) {
        take(lane.orgId);
        return true;
      }
      wait(lane);
      if (orgOut(lane.orgId) >= limit) {
        options.onOrgThrottled?.(lane.orgId);
        options.onOrgShort?.(lane.orgId, orgOut(lane.orgId) + (lines.get(lane.orgId)?.length ?? 0));
      }
      return false;
    },
    release(orgId) {
      give(orgId);
      options.onOrgRelease?.(orgId);
      handOut();
    },
    leave(lane) {
      const line = lines.get(lane.orgId);
      let left = false;
      if (line) {
        const at = line.indexOf(lane);
        if (at >= 0) {
          line.splice(at, 1);
          left = true;
        }
        if (line.length === 0) lines.delete(lane.orgId);
      }
      const held = reserved.get(lane) ?? 0;
      reserved.delete(lane);
      for (let i = 0; i < held; i++) give(lane.orgId);
      // Fewer wait (or a reserved permit came back): the organisation may need fewer permits here.
      if (held > 0 || left) options.onOrgRelease?.(lane.orgId);
      if (held > 0) handOut();
    },
    refresh() {
      handOut();
    },
    inFlight(orgId) {
      return orgId === undefined ? out : orgOut(orgId);
    },
    waiting(orgId) {
      if (orgId !== undefined) return lines.get(orgId)?.length ?? 0;
      let count = 0;
      for (const line of lines.values()) count += line.length;
      return count;
    },
  };
}
