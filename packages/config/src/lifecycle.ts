/**
 * One shape for every long-lived part of an app (database, Redis connections, pollers, the HTTP
 * listener) and one registry that runs them.
 *
 * A part is `{ name, start, stop, readiness }`. Making a part may already open something (a pool, a
 * Redis client that connects on creation), so the registry treats a part as holding resources from the
 * moment it is added, not from the moment it started:
 *
 * - `start()` starts the added parts that have not started yet, in the order they were added. When one
 *   throws, every added part is stopped in reverse order (the one that threw and those after it too),
 *   then the start error is rethrown: nothing is left open behind a failed start.
 * - `stop()` stops every added part in reverse order, started or not, once (later calls share the
 *   first one's promise). A stop that throws does not keep the parts before it open: they are stopped
 *   too, and the first error is rethrown at the end.
 * - `readiness()` asks the parts from the last added to the first and answers with the first that is
 *   not ready, its reason and its name. The outermost part (the one closest to traffic, e.g. draining)
 *   speaks first.
 *
 * So a part's `stop` must be safe before its `start` ran, after a `start` that threw halfway, and
 * when called once more; its `readiness` must be cheap and must not throw (a check that can fail,
 * such as a database ping, turns the failure into `{ ready: false, reason }`).
 * Tested in lifecycle.test.ts; apps/api/src/app.ts and apps/webhook-dispatcher wire their parts here.
 */

/** What a part answers when asked whether it can take work now. */
export type Readiness = { readonly ready: true } | { readonly ready: false; readonly reason: string };

/** A long-lived part of an app. */
export interface LifecyclePart {
  /** Short kebab-case name, used in readiness answers and stop-error logs. */
  readonly name: string;
  /** Opens or starts what the part needs. A throw fails the app's start (everything added is stopped). */
  start(): void | Promise<void>;
  /** Releases everything the part holds. Safe before `start`, after a failed `start`, and twice. */
  stop(): void | Promise<void>;
  /** Whether the part can take work now; never throws. */
  readiness(): Readiness | Promise<Readiness>;
}

/** The registry's readiness answer: the first part that is not ready, by name. */
export type LifecycleReadiness =
  | { readonly ready: true }
  | { readonly ready: false; readonly reason: string; readonly part: string };

export interface Lifecycle {
  /** Adds a part (it may already hold resources: `stop` releases them even if it never starts). @returns the part */
  add<P extends LifecyclePart>(part: P): P;
  /**
   * Starts the added parts not started yet, in order (parts added later start on a later call).
   * @throws the first start error, after every added part was stopped; {@link LifecycleStoppedError}
   *   once `stop` was called (a part whose start was under way then is stopped once more when it ends)
   */
  start(): Promise<void>;
  /** Stops every added part in reverse order; idempotent. @throws the first stop error, after all stopped */
  stop(): Promise<void>;
  /** The first part that is not ready, from the last added to the first. */
  readiness(): Promise<LifecycleReadiness>;
  /** The names of the added parts, in order. */
  readonly names: readonly string[];
}

export interface LifecycleOptions {
  /** Told about each stop that throws (the others still stop). @default nothing */
  onStopError?: (part: string, error: unknown) => void;
}

/** `start` after `stop`: a stopped registry does not come back. */
export class LifecycleStoppedError extends Error {
  readonly code = 'LIFECYCLE_STOPPED';
  constructor() {
    super('this app is stopping or stopped; it does not start again');
    this.name = 'LifecycleStoppedError';
  }
}

/** The ready answer, shared. */
export const READY: { readonly ready: true } = Object.freeze({ ready: true });

/** A not-ready answer naming why. */
export function notReady(reason: string): Readiness {
  return { ready: false, reason };
}

/** An empty registry: `add` the parts in start order, then `start`. */
export function createLifecycle(options: LifecycleOptions = {}): Lifecycle {
  const parts: LifecyclePart[] = [];
  let started = 0;
  let stopping: Promise<void> | undefined;

  async function stopAll(): Promise<void> {
    let first: { error: unknown } | undefined;
    for (const part of [...parts].reverse()) {
      try {
        await part.stop();
      } catch (error) {
        options.onStopError?.(part.name, error);
        first ??= { error };
      }
    }
    if (first) throw first.error;
  }

  const lifecycle: Lifecycle = {
    add(part) {
      if (stopping) throw new LifecycleStoppedError();
      parts.push(part);
      return part;
    },
    async start() {
      while (started < parts.length) {
        if (stopping) throw new LifecycleStoppedError();
        const part = parts[started] as LifecyclePart;
        try {
          await part.start();
        } catch (error) {
          // The start error is the one worth reporting; a stop error on the way out goes to onStopError.
          await lifecycle.stop().catch(() => {});
          throw error;
        }
        started++;
        const stoppedMeanwhile = stopping as Promise<void> | undefined;
        if (stoppedMeanwhile) {
          // Stopped while this part was starting: its stop ran too early to release what it opened.
          await stoppedMeanwhile.catch(() => {});
          await Promise.resolve(part.stop()).catch((error: unknown) => options.onStopError?.(part.name, error));
          throw new LifecycleStoppedError();
        }
      }
    },
    stop() {
      stopping ??= stopAll();
      return stopping;
    },
    async readiness() {
      for (let index = parts.length - 1; index >= 0; index--) {
        const part = parts[index] as LifecyclePart;
        const answer = await part.readiness();
        if (!answer.ready) return { ready: false, reason: answer.reason, part: part.name };
      }
      return READY;
    },
    get names() {
      return parts.map((part) => part.name);
    },
  };
  return lifecycle;
}
