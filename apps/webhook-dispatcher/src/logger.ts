import { type LogOutput, stdoutLogOutput } from '@herald/config';
import { type Logger, pino } from 'pino';

export type { Logger };

/** Structured JSON logs on stdout through `output`, which never blocks or throws (see the API's logger). */
export function createLogger(level: string, output: LogOutput = stdoutLogOutput()): Logger {
  return pino(
    { level, base: { service: 'herald-webhook-dispatcher' }, timestamp: pino.stdTimeFunctions.isoTime },
    { write: (line: string) => output.write(line) },
  );
}
