/**
 * When to try a failed delivery again, and when to give up (docs/webhooks.md, "Answering, retries and
 * dead letters"). Pure: the caller passes the clock and the random source, so every branch is
 * unit-testable.
 */

/** No single pause between two attempts is longer than this. */
export const MAX_RETRY_DELAY_MS = 3_600_000;
/** A 429 or 503 without a usable `Retry-After` waits this many times the ordinary backoff. */
export const THROTTLED_BACKOFF_FACTOR = 4;
/** A receiver's `Retry-After` is honoured up to this long (longer asks are cut to it). */
export const MAX_RETRY_AFTER_MS = 3_600_000;

export interface RetryPolicy {
  /** The first retry's delay before jitter (`WEBHOOK_RETRY_BASE_MS`); each later one doubles. */
  baseMs: number;
  /** Give up once a retry would fall this long after the delivery's horizon start (`WEBHOOK_RETRY_HORIZON`). */
  horizonMs: number;
}

export interface FailedAttempt {
  /** How many attempts have been made, this one included (1 after the first failure). */
  attempts: number;
  /** Milliseconds from the horizon start (creation or last replay) to now. */
  ageMs: number;
  /** The response status, null when no response arrived. */
  statusCode: number | null;
  /** The response's `Retry-After` header, if any. */
  retryAfter?: string | null | undefined;
}

export type RetryDecision = { retry: true; delayMs: number } | { retry: false; reason: string };

/**
 * Exponential backoff with "equal jitter": `base × 2^(attempts-1)`, capped at
 * {@link MAX_RETRY_DELAY_MS}, of which a random half is added to a fixed half (so retries of many
 * deliveries that failed together spread out, yet none comes back sooner than half the backoff).
 * A receiver that says it is overloaded (429, 503) gets a longer pause: its `Retry-After`, kept between
 * the ordinary delay and {@link MAX_RETRY_AFTER_MS}, or without one {@link THROTTLED_BACKOFF_FACTOR}
 * times the ordinary delay. A retry that would fall after the horizon is not scheduled.
 * @param random a number in [0, 1), `Math.random` by default
 * @param nowMs the current time, for an HTTP-date `Retry-After`
 */
export function decideRetry(
  policy: RetryPolicy,
  failed: FailedAttempt,
  random: () => number = Math.random,
  nowMs: number = Date.now(),
): RetryDecision {
  const exponent = Math.max(0, failed.attempts - 1);
  const backoff = Math.min(MAX_RETRY_DELAY_MS, policy.baseMs * 2 ** Math.min(exponent, 52));
  let delayMs = Math.round(backoff / 2 + random() * (backoff / 2));
  if (failed.statusCode === 429 || failed.statusCode === 503) {
    const asked = parseRetryAfterMs(failed.retryAfter, nowMs);
    delayMs =
      asked === undefined
        ? Math.min(MAX_RETRY_DELAY_MS, delayMs * THROTTLED_BACKOFF_FACTOR)
        : Math.max(delayMs, Math.min(asked, MAX_RETRY_AFTER_MS));
  }
  if (failed.ageMs + delayMs > policy.horizonMs) {
    return { retry: false, reason: `the next retry would fall after the ${policy.horizonMs} ms retry horizon` };
  }
  return { retry: true, delayMs };
}

/**
 * Reads `Retry-After` (RFC 9110): delay-seconds, or an HTTP date.
 * @returns milliseconds from `nowMs` (never negative), undefined when absent or unreadable
 */
export function parseRetryAfterMs(value: string | null | undefined, nowMs: number): number | undefined {
  if (value == null) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1_000;
  // An HTTP date names its weekday and month; anything else Date.parse might accept is not one.
  if (!/^[A-Za-z]{3}, /.test(text)) return undefined;
  const date = Date.parse(text);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - nowMs);
}
