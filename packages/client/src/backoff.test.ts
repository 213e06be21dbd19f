import { describe, expect, it } from 'vitest';
import { reconnectDelayMs } from './backoff.js';

describe('reconnectDelayMs', () => {
  it('grows exponentially up to the maximum, before jitter', () => {
    const top = (attempt: number) => reconnectDelayMs(attempt, 100, 1_000, () => 0.999_999);
    expect([0, 1, 2, 3, 4, 10, 1_000].map(top)).toEqual([99, 199, 399, 799, 999, 999, 999]);
  });

  it('spreads clients over the whole window (full jitter)', () => {
    expect(reconnectDelayMs(3, 100, 10_000, () => 0)).toBe(0);
    expect(reconnectDelayMs(3, 100, 10_000, () => 0.5)).toBe(400);
  });
});
