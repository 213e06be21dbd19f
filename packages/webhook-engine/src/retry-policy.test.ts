import { describe, expect, it } from 'vitest';
import { decideRetry, MAX_RETRY_AFTER_MS, MAX_RETRY_DELAY_MS, parseRetryAfterMs } from './retry-policy.js';

const policy = { baseMs: 1_000, horizonMs: 3 * 24 * 3_600_000 };
const low = () => 0;
const high = () => 1 - 1e-12;

describe('decideRetry', () => {
  it('doubles the delay per attempt, jittered between half and all of it', () => {
    for (const [attempts, backoff] of [
      [1, 1_000],
      [2, 2_000],
      [3, 4_000],
      [6, 32_000],
    ] as const) {
      expect(decideRetry(policy, { attempts, ageMs: 0, statusCode: 500 }, low)).toEqual({
        retry: true,
        delayMs: backoff / 2,
      });
      expect(decideRetry(policy, { attempts, ageMs: 0, statusCode: 500 }, high)).toEqual({
        retry: true,
        delayMs: backoff,
      });
    }
  });

  it('spreads retries of deliveries that failed together', () => {
    const delays = new Set<number>();
    for (let i = 0; i < 50; i++) {
      const decision = decideRetry(policy, { attempts: 4, ageMs: 0, statusCode: null });
      if (decision.retry) delays.add(decision.delayMs);
    }
    expect(delays.size).toBeGreaterThan(10);
  });

  it('caps a single delay', () => {
    const decision = decideRetry(policy, { attempts: 40, ageMs: 0, statusCode: 500 }, high);
    expect(decision).toEqual({ retry: true, delayMs: MAX_RETRY_DELAY_MS });
  });

  it('pauses longer on 429 and 503 without Retry-After', () => {
    for (const statusCode of [429, 503]) {
      expect(decideRetry(policy, { attempts: 1, ageMs: 0, statusCode }, high)).toEqual({ retry: true, delayMs: 4_000 });
    }
  });

  it('honours Retry-After within bounds', () => {
    const now = Date.parse('2026-11-21T10:00:00Z');
    expect(decideRetry(policy, { attempts: 1, ageMs: 0, statusCode: 429, retryAfter: '30' }, high, now)).toEqual({
      retry: true,
      delayMs: 30_000,
    });
    expect(
      decideRetry(
        policy,
        { attempts: 1, ageMs: 0, statusCode: 503, retryAfter: 'Sat, 21 Nov 2026 10:02:00 GMT' },
        high,
        now,
      ),
    ).toEqual({ retry: true, delayMs: 120_000 });
    // Never sooner than the ordinary backoff, never later than the cap.
    expect(decideRetry(policy, { attempts: 1, ageMs: 0, statusCode: 429, retryAfter: '0' }, high, now)).toEqual({
      retry: true,
      delayMs: 1_000,
    });
    expect(decideRetry(policy, { attempts: 1, ageMs: 0, statusCode: 429, retryAfter: '999999' }, high, now)).toEqual({
      retry: true,
      delayMs: MAX_RETRY_AFTER_MS,
    });
  });

  it('ignores Retry-After on other statuses', () => {
    expect(decideRetry(policy, { attempts: 1, ageMs: 0, statusCode: 500, retryAfter: '600' }, high)).toEqual({
      retry: true,
      delayMs: 1_000,
    });
  });

  it('gives up when the next retry would fall after the horizon', () => {
    const short = { baseMs: 100, horizonMs: 1_000 };
    expect(decideRetry(short, { attempts: 1, ageMs: 899, statusCode: 500 }, high).retry).toBe(true);
    const decision = decideRetry(short, { attempts: 1, ageMs: 901, statusCode: 500 }, high);
    expect(decision.retry).toBe(false);
    expect(decideRetry(short, { attempts: 1, ageMs: 0, statusCode: 429, retryAfter: '2' }, high).retry).toBe(false);
  });
});

describe('parseRetryAfterMs', () => {
  it('reads seconds and HTTP dates, and ignores garbage', () => {
    const now = Date.parse('2026-11-21T10:00:00Z');
    expect(parseRetryAfterMs('5', now)).toBe(5_000);
    expect(parseRetryAfterMs('Sat, 21 Nov 2026 10:00:10 GMT', now)).toBe(10_000);
    expect(parseRetryAfterMs('Sat, 21 Nov 2026 09:00:00 GMT', now)).toBe(0);
    expect(parseRetryAfterMs('soon', now)).toBeUndefined();
    expect(parseRetryAfterMs('-5', now)).toBeUndefined();
    expect(parseRetryAfterMs(undefined, now)).toBeUndefined();
  });
});
