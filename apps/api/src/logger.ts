import { type Logger, pino } from 'pino';

export type { Logger };

/** Structured JSON logs on stdout (one object per line), the format log shippers expect. */
export function createLogger(level: string): Logger {
  return pino({
    level,
    base: { service: 'herald-api' },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: ['req.headers.authorization', '*.authToken', '*.authorization'], censor: '[redacted]' },
  });
}
