import { type LogOutput, stdoutLogOutput } from '@herald/config';
import { traceLogMixin } from '@herald/telemetry';
import { type Logger, pino } from 'pino';

export type { Logger };

/**
 * Structured JSON logs on stdout (one object per line), the format log shippers expect. Written through
 * `output` (stdout by default), which never blocks or throws when the reader is slow or gone.
 */
export function createLogger(level: string, output: LogOutput = stdoutLogOutput()): Logger {
  return pino(
    {
      level,
      base: { service: 'herald-api' },
      timestamp: pino.stdTimeFunctions.isoTime,
      // `trace_id`/`span_id` of the active span; no mixin at all while tracing is off.
      mixin: traceLogMixin(),
      redact: { paths: ['req.headers.authorization', '*.authToken', '*.authorization'], censor: '[redacted]' },
    },
    { write: (line: string) => output.write(line) },
  );
}
