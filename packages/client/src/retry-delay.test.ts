import { describe, expect, it } from 'vitest';
import { retryDelayMs } from './client.js';

const rateLimited = (retryAfterMs: unknown) => [
  { message: 'Rate limited', extensions: { code: 'RATE_LIMITED', retryAfterMs } },
];

describe('retryDelayMs', () => {
  it("waits a RATE_LIMITED refusal's retryAfterMs plus up to baseMs of jitter", () => {
    expect(retryDelayMs(rateLimited(640), 3, 100, 30_000, () => 0)).toBe(640);
    expect(retryDelayMs(rateLimited(640), 3, 100, 30_000, () => 0.999)).toBe(739);
  });

  it('never waits past maxMs', () => {
    expect(retryDelayMs(rateLimited(60_000), 0, 100, 5_000, () => 0)).toBe(5_000);
  });

  it('falls back to the jittered exponential backoff without a usable retryAfterMs, or for other codes', () => {
    expect(retryDelayMs(rateLimited('soon'), 2, 100, 30_000, () => 0.5)).toBe(200);
    const interrupted = [{ message: 'x', extensions: { code: 'SUBSCRIPTION_INTERRUPTED', retryAfterMs: 5 } }];
    expect(retryDelayMs(interrupted, 2, 100, 30_000, () => 0.5)).toBe(200);
  });
});
