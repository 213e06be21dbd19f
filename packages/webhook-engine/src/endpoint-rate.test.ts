import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { burstOf, createEndpointRate, gcraTake } from './endpoint-rate.js';

/** The most sends granted in any window of `windowMs` among `times` (sorted). */
function mostInWindow(times: readonly number[], windowMs: number): number {
  let most = 0;
  let from = 0;
  for (let to = 0; to < times.length; to++) {
    while (times[to]! - times[from]! >= windowMs) from++;
    most = Math.max(most, to - from + 1);
  }
  return most;
}

describe('gcraTake', () => {
  it('never grants more than rate × T + burst in any window of T, however it is asked', () => {
    for (const rate of [1, 7, 20, 95, 1_000]) {
      let tat = 0;
      const granted: number[] = [];
      let asked = 0;
      // 30 s of asking at uneven moments for uneven amounts.
      for (let now = 0; now < 30_000; now += 1 + ((now * 7919) % 13)) {
        const step = gcraTake(tat, now, rate, burstOf(rate), 1 + (now % 5));
        asked += 1 + (now % 5);
        tat = step.tatMs;
        for (let i = 0; i < step.granted; i++) granted.push(now);
      }
      for (const windowMs of [1_000, 10_000]) {
        expect(mostInWindow(granted, windowMs)).toBeLessThanOrEqual((rate * windowMs) / 1_000 + burstOf(rate));
      }
      // And it does not starve: over 30 s, about the rate or what was asked for (a send asked for up to
      // 13 ms after its slot was free starts the next interval that much later).
      expect(granted.length).toBeGreaterThanOrEqual(Math.min(rate * 30, asked) * 0.85);
    }
  });

  it('says how long to wait when nothing is free', () => {
    const first = gcraTake(0, 1_000, 10, 1, 1);
    expect(first).toMatchObject({ granted: 1, tatMs: 1_100 });
    const refused = gcraTake(first.tatMs, 1_020, 10, 1, 3);
    expect(refused).toEqual({ granted: 0, tatMs: 1_100, waitMs: 80 });
    expect(gcraTake(refused.tatMs, 1_100, 10, 1, 3).granted).toBe(1);
  });
});

describe('createEndpointRate without Redis', () => {
  it('holds an endpoint to its rate and wakes a refused caller when a send is free', async () => {
    let clock = 0;
    let throttled = 0;
    const rate = createEndpointRate({
      logger: pino({ level: 'silent' }),
      now: () => clock,
      onThrottled: () => throttled++,
    });
    const woken: string[] = [];
    expect(rate.tryTake('we_a', 2, 1, () => woken.push('a'))).toBe(true);
    expect(rate.tryTake('we_a', 2, 1, () => woken.push('a'))).toBe(false);
    // Another endpoint has a line of its own.
    expect(rate.tryTake('we_b', 2, 1, () => woken.push('b'))).toBe(true);
    expect(throttled).toBe(1);
    // The wake-up comes after the wait (500 ms at 2/s), on the real timer.
    await new Promise((resolve) => setTimeout(resolve, 700));
    expect(woken).toEqual(['a']);
    clock = 500;
    expect(rate.tryTake('we_a', 2, 1, () => woken.push('a'))).toBe(true);
    rate.stop();
  });
});
