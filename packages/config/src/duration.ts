import { z } from 'zod';

const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const DURATION_PATTERN = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/;

/**
 * Parses `500ms`, `30s`, `15m`, `2h`, `3d` (or a bare number of milliseconds) into milliseconds.
 * @returns undefined for anything else
 */
export function parseDurationMs(text: string): number | undefined {
  const trimmed = text.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed);
  const match = DURATION_PATTERN.exec(trimmed);
  if (!match) return undefined;
  const [, amount, unit] = match;
  return Math.round(Number(amount) * UNIT_MS[unit as keyof typeof UNIT_MS]);
}

/** A zod schema for a duration setting; the parsed value is milliseconds. */
export function durationMs() {
  return z.string().transform((text, ctx) => {
    const ms = parseDurationMs(text);
    if (ms === undefined || ms <= 0) {
      ctx.addIssue({ code: 'custom', message: `expected a duration like 30s, 15m, 2h or 3d, got "${text}"` });
      return z.NEVER;
    }
    return ms;
  });
}
