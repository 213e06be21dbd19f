/** First reconnect delay before jitter. */
export const RECONNECT_BASE_MS = 500;
/** Longest reconnect delay. */
export const RECONNECT_MAX_MS = 30_000;

/**
 * "Full jitter" exponential backoff: a random delay between 0 and `min(max, base · 2^attempt)`, so that
 * thousands of clients dropped by one pod's restart don't all come back in the same millisecond.
 */
export function reconnectDelayMs(
  attempt: number,
  baseMs = RECONNECT_BASE_MS,
  maxMs = RECONNECT_MAX_MS,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * ceiling);
}
