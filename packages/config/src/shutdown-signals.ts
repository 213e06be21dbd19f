/**
 * One SIGTERM or SIGINT ends the process; a second ends it at once.
 *
 * The first signal arms a hard deadline before anything else runs (so nothing that follows, a log line
 * included, can leave the process running past it), then runs `stop`. The process exits with 0 when
 * `stop` resolves, 1 when it rejects or the deadline passes first. The handlers stay installed: a second
 * signal while stopping exits with 1 immediately instead of falling back to Node's default (which a
 * `process.once` handler would leave the process without: its first signal used up the handler).
 */

export interface ShutdownSignalOptions {
  /** Stops the process's parts in order. May reject; it is never awaited past `hardExitMs`. */
  stop: () => Promise<void>;
  /** From the first signal, how long `stop` may take before the process exits with 1 anyway. */
  hardExitMs: number;
  /**
   * Told what happens (`shutting down`, `second signal`, `deadline passed`, `stop failed`). Anything it
   * throws is ignored: a log sink that broke must not keep the process alive.
   */
  onEvent?: (event: ShutdownEvent) => void;
  /**
   * Runs just before `process.exit`, bounded by {@link EXIT_FLUSH_TIMEOUT_MS} (flush the logs).
   * @default nothing
   */
  beforeExit?: (timeoutMs: number) => Promise<void>;
  /** @default ['SIGTERM', 'SIGINT'] */
  signals?: readonly NodeJS.Signals[];
  /** @default process.exit */
  exit?: (code: number) => void;
}

export type ShutdownEvent =
  | { kind: 'shutting-down'; signal: NodeJS.Signals }
  | { kind: 'second-signal'; signal: NodeJS.Signals }
  | { kind: 'deadline-passed'; hardExitMs: number }
  | { kind: 'stop-failed'; error: unknown };

/** The most the last log lines may delay an exit. */
export const EXIT_FLUSH_TIMEOUT_MS = 1_000;

/** Installs the handlers; returns a function that removes them (tests). */
export function handleShutdownSignals(options: ShutdownSignalOptions): () => void {
  const signals = options.signals ?? (['SIGTERM', 'SIGINT'] as const);
  const exit = options.exit ?? ((code: number) => process.exit(code));
  let stopping = false;
  let exiting = false;
  const tell = (event: ShutdownEvent) => {
    try {
      options.onEvent?.(event);
    } catch {
      // Logging must never stand between a signal and the exit.
    }
  };
  const finish = (code: number) => {
    if (exiting) return;
    exiting = true;
    const flushed = options.beforeExit?.(EXIT_FLUSH_TIMEOUT_MS).catch(() => {}) ?? Promise.resolve();
    const cap = setTimeout(() => exit(code), EXIT_FLUSH_TIMEOUT_MS);
    void flushed.then(() => {
      clearTimeout(cap);
      exit(code);
    });
  };
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      tell({ kind: 'second-signal', signal });
      exiting = true;
      exit(1);
      return;
    }
    stopping = true;
    // Referenced on purpose: the process stays up until `stop` settles or the deadline passes.
    setTimeout(() => {
      tell({ kind: 'deadline-passed', hardExitMs: options.hardExitMs });
      finish(1);
    }, options.hardExitMs);
    tell({ kind: 'shutting-down', signal });
    let stopped: Promise<void>;
    try {
      stopped = options.stop();
    } catch (error) {
      stopped = Promise.reject(error);
    }
    stopped.then(
      () => finish(0),
      (error: unknown) => {
        tell({ kind: 'stop-failed', error });
        finish(1);
      },
    );
  };
  for (const signal of signals) process.on(signal, onSignal);
  return () => {
    for (const signal of signals) process.off(signal, onSignal);
  };
}

/** The part of a pino logger {@link shutdownEventLogger} needs. */
export interface ShutdownLogger {
  info(details: object, message: string): void;
  warn(details: object, message: string): void;
  error(details: object, message: string): void;
}

/** An `onEvent` that logs each shutdown event as one line. */
export function shutdownEventLogger(logger: ShutdownLogger): (event: ShutdownEvent) => void {
  return (event) => {
    if (event.kind === 'shutting-down') logger.info({ signal: event.signal }, 'shutting down');
    else if (event.kind === 'second-signal') logger.warn({ signal: event.signal }, 'second signal: exiting now');
    else if (event.kind === 'deadline-passed') {
      logger.error({ hardExitMs: event.hardExitMs }, 'shutdown grace period exceeded; exiting');
    } else logger.error({ err: event.error }, 'shutdown failed');
  };
}
