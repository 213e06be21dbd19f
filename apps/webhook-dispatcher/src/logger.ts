import { type LogOutput, stdoutLogOutput } from '@herald/config';
import { traceLogMixin } from '@herald/telemetry';
import { type Logger, pino } from 'pino';

export type { Logger };

/** Structured JSON logs on stdout through `output`, which never blocks or throws (see the API's logger). */
export function createLogger(level: string, output: LogOutput = stdoutLogOutput()): Logger {
  return pino(
    {
      level,
      base: { service: 'herald-webhook-dispatcher' },
      timestamp: pino.stdTimeFunctions.isoTime,
      // `trace_id`/`span_id` of the active span; no mixin at all while tracing is off.
      mixin: traceLogMixin(),
    },
    { write: (line: string) => output.write(line) },
  );
}
