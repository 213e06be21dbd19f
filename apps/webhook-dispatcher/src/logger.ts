import { type Logger, pino } from 'pino';

export type { Logger };

/** Structured JSON logs on stdout (one object per line), the format log shippers expect. */
export function createLogger(level: string): Logger {
  return pino({ level, base: { service: 'herald-webhook-dispatcher' }, timestamp: pino.stdTimeFunctions.isoTime });
}
