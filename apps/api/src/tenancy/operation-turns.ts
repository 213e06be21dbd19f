/**
 * Turns for HTTP operations on one pod. Each tenant (the subject its operations are counted against:
 * the organisation an operation names, else its caller) runs at most `perTenant` operations at once
 * here; its further operations wait in its own queue, in arrival order, until one of its own ends.
 * Another tenant's operation never waits behind them: a storm of one organisation's requests, served or
 * refused, holds `perTenant` turns of the pod, and the rest of it waits parsed and idle instead of
 * ahead of everyone else's requests in the event loop, the database pool's queue and the socket writes.
 *
 * A waiting operation is let go from `setImmediate`, never from the microtask that ended the one before
 * it: a tenant's chain of quick operations (refusals answered from memory) yields to the event loop's
 * I/O, where other tenants' requests arrive, between each of its turns.
 *
 * A tenant alone on the pod runs up to `alone` operations at once (all but one of the database pool's
 * connections; the one left is for the next tenant's first request): holding it
 * to `perTenant` then protects nobody and leaves connections of the pool idle. It is alone while no other
 * tenant has asked for a turn in the last {@link SHARED_FOR_MS} and none has an operation running or
 * waiting. As soon as another asks, it is back to `perTenant`: its operations above that run to their end,
 * and its waiting ones go only once it is under `perTenant` again.
 */
export interface OperationTurns {
  /** False when the gate is off: every turn is taken at once and nothing needs giving back. */
  readonly on: boolean;
  /**
   * Asks a turn for `subject`. The turn is `give`n back once, whether it was taken or is still waiting
   * (its client went away): a waiting turn given back resolves `ready` with false and takes nothing.
   */
  ask(subject: string): Turn;
  /** Operations waiting for a turn now, every tenant together. */
  readonly waiting: number;
  /** Tenants with an operation running or waiting (the others are forgotten). */
  readonly tenants: number;
}

export interface Turn {
  /** Undefined: taken at once. Else resolves with true once taken, false if given back while waiting. */
  readonly ready: Promise<boolean> | undefined;
  give(): void;
}

/** How long after another tenant's last request a tenant counts as sharing the pod. */
export const SHARED_FOR_MS = 1_000;

export interface OperationTurnsOptions {
  /** Operations a tenant alone on the pod runs at once; at least `perTenant`. @default perTenant */
  alone?: number;
  /** Milliseconds of a monotonic clock (tests). @default performance.now */
  now?: () => number;
}

/** 0: a turn never asked for (the gate is off), 1: waiting, 2: running, 3: given back. */
type State = 0 | 1 | 2 | 3;

interface Tenant {
  readonly subject: string;
  running: number;
  /** Waiting turns, oldest first, read from `head` (given-back ones are skipped). */
  queue: TenantTurn[];
  head: number;
}

/** A turn that needs no gate: taken at once, nothing to give back. */
const FREE_TURN: Turn = { ready: undefined, give() {} };

class TenantTurn implements Turn {
  state: State = 2;
  ready: Promise<boolean> | undefined = undefined;
  resolve: ((taken: boolean) => void) | undefined = undefined;

  constructor(
    readonly gate: Gate,
    readonly tenant: Tenant,
  ) {}

  give(): void {
    if (this.state === 2) {
      this.state = 3;
      this.gate.ended(this.tenant);
    } else if (this.state === 1) {
      this.state = 3;
      this.gate.waiting--;
      this.resolve!(false);
    }
  }
}

class Gate implements OperationTurns {
  readonly byTenant = new Map<string, Tenant>();
  waiting = 0;
  readonly letGo = (tenant: Tenant) => this.next(tenant);
  readonly on: boolean;
  readonly alone: number;
  readonly now: () => number;
  /** The subject of the last turn asked; a different one makes every tenant share until `sharedUntil`. */
  lastSubject: string | undefined = undefined;
  sharedUntil = 0;

  get tenants(): number {
    return this.byTenant.size;
  }

  constructor(
    readonly perTenant: number,
    readonly onWait: () => void,
    options: OperationTurnsOptions,
  ) {
    this.on = perTenant > 0;
    this.alone = Math.max(perTenant, options.alone ?? perTenant);
    this.now = options.now ?? (() => performance.now());
  }

  /** Operations `tenant` may run at once now: `perTenant`, or `alone` while no other tenant is about. */
  limit(tenant: Tenant): number {
    if (this.alone === this.perTenant) return this.perTenant;
    if (this.byTenant.size > 1 || this.lastSubject !== tenant.subject || this.now() < this.sharedUntil)
      return this.perTenant;
    return this.alone;
  }

  ask(subject: string): Turn {
    if (!this.on) return FREE_TURN;
    if (subject !== this.lastSubject) {
      if (this.lastSubject !== undefined && this.alone !== this.perTenant)
        this.sharedUntil = this.now() + SHARED_FOR_MS;
      this.lastSubject = subject;
    }
    let tenant = this.byTenant.get(subject);
    if (tenant === undefined) {
      tenant = { subject, running: 0, queue: [], head: 0 };
      this.byTenant.set(subject, tenant);
    }
    const turn = new TenantTurn(this, tenant);
    if (
      tenant.head === tenant.queue.length &&
      (tenant.running < this.perTenant || tenant.running < this.limit(tenant))
    ) {
      tenant.running++;
      return turn;
    }
    turn.state = 1;
    turn.ready = new Promise<boolean>((resolve) => {
      turn.resolve = resolve;
    });
    tenant.queue.push(turn);
    this.waiting++;
    this.onWait();
    return turn;
  }

  ended(tenant: Tenant): void {
    tenant.running--;
    if (tenant.head < tenant.queue.length) setImmediate(this.letGo, tenant);
    else if (tenant.running === 0) this.byTenant.delete(tenant.subject);
  }

  /** Gives the oldest waiting turn of `tenant` its turn, if one is free. */
  next(tenant: Tenant): void {
    // A hand-over scheduled before the tenant was forgotten: its record is empty and idle, and the
    // tenant's current record (if it asked again since) is not this one to touch.
    if (this.byTenant.get(tenant.subject) !== tenant) return;
    const { queue } = tenant;
    while (tenant.head < queue.length && tenant.running < this.limit(tenant)) {
      const turn = queue[tenant.head]!;
      queue[tenant.head++] = undefined as never;
      if (turn.state !== 1) continue;
      turn.state = 2;
      tenant.running++;
      this.waiting--;
      turn.resolve!(true);
      // Alone, it may have room for more than the one turn its last ended operation freed: the next
      // one goes on the next turn of the event loop, as any other.
      if (tenant.head < queue.length && tenant.running < this.limit(tenant)) setImmediate(this.letGo, tenant);
      break;
    }
    if (tenant.head === queue.length) {
      queue.length = 0;
      tenant.head = 0;
      if (tenant.running === 0) this.byTenant.delete(tenant.subject);
    }
  }
}

/**
 * @param perTenant operations one tenant runs at once on this pod; 0 turns the gate off (every turn
 *   is taken at once)
 * @param onWait called each time an operation has to wait for its turn
 */
export function createOperationTurns(
  perTenant: number,
  onWait: () => void = () => {},
  options: OperationTurnsOptions = {},
): OperationTurns {
  return new Gate(perTenant, onWait, options);
}
