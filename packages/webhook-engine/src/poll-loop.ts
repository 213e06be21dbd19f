import type { Logger } from 'pino';

/** After a failed pass, the loop waits this long at first, doubling up to {@link MAX_ERROR_BACKOFF_MS}. */
const FIRST_ERROR_BACKOFF_MS = 100;
const MAX_ERROR_BACKOFF_MS = 5_000;

export interface PollLoop {
  start(): void;
  /** Resolves once the pass in progress (if any) has finished; no pass starts after. */
  stop(): Promise<void>;
  /** Runs a pass as soon as possible (at once when idle, right after the current pass otherwise). */
  wake(): void;
  /** False once a pass has been failing for a while (for readiness). */
  readonly healthy: boolean;
}

/**
 * Runs `pass` every `intervalMs`, at once again when it reports more work (`true`), and whenever woken.
 * With `minGapMs`, a pass that follows one that did not report more work starts no sooner than that
 * long after the previous one started: wake-ups arriving meanwhile share one pass.
 * A pass that throws is logged and retried with backoff; the loop never dies of it.
 */
export function createPollLoop(
  name: string,
  pass: () => Promise<boolean>,
  options: { intervalMs: number; logger: Logger; minGapMs?: number },
): PollLoop {
  const { intervalMs, logger } = options;
  const minGapMs = options.minGapMs ?? 0;
  let running = false;
  let woken = false;
  let failures = 0;
  let wakeUp: (() => void) | undefined;
  let endGap: (() => void) | undefined;
  let done: Promise<void> = Promise.resolve();
  let lastStart = Number.NEGATIVE_INFINITY;
  let more = false;

  /** Waits `ms`; `onCancel` receives the function that ends the wait early. */
  const wait = (ms: number, onCancel: (cancel: (() => void) | undefined) => void) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(finish, ms);
      function finish() {
        clearTimeout(timer);
        onCancel(undefined);
        resolve();
      }
      onCancel(finish);
    });
  /** Sleeps until `ms` have passed or the loop is woken. */
  const sleep = (ms: number) =>
    wait(ms, (cancel) => {
      wakeUp = cancel;
    });
  /** The gap between passes: only stop ends it (a wake-up during it joins the pass that follows). */
  const gap = (ms: number) =>
    wait(ms, (cancel) => {
      endGap = cancel;
    });

  async function run(): Promise<void> {
    while (running) {
      if (minGapMs > 0 && !more) {
        const left = lastStart + minGapMs - performance.now();
        if (left > 0) await gap(left);
        if (!running) break;
      }
      woken = false;
      more = false;
      lastStart = performance.now();
      try {
        more = await pass();
        failures = 0;
      } catch (error) {
        failures += 1;
        logger.warn({ err: error, loop: name, failures }, `webhook ${name} pass failed`);
        await sleep(Math.min(MAX_ERROR_BACKOFF_MS, FIRST_ERROR_BACKOFF_MS * 2 ** (failures - 1)));
        continue;
      }
      if (!running) break;
      if (more || woken) {
        // Let other work (I/O callbacks) run between back-to-back passes.
        await new Promise((resolve) => setImmediate(resolve));
        continue;
      }
      await sleep(intervalMs);
    }
  }

  return {
    start() {
      if (running) return;
      running = true;
      done = run();
    },
    async stop() {
      running = false;
      wakeUp?.();
      endGap?.();
      await done;
    },
    wake() {
      woken = true;
      wakeUp?.();
    },
    get healthy() {
      return failures < 5;
    },
  };
}
