import { waitFor } from '@herald/testing/ports';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { createPollLoop } from './poll-loop.js';

const logger = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A loop whose passes find nothing more to do, counting them; idle polls an hour apart. */
function countingLoop(minGapMs?: number) {
  const counted = { passes: 0 };
  const loop = createPollLoop(
    'test',
    async () => {
      counted.passes += 1;
      return false;
    },
    { intervalMs: 60_000, logger, ...(minGapMs === undefined ? {} : { minGapMs }) },
  );
  return { loop, counted };
}

describe('poll loop', () => {
  it('runs one pass for the wake-ups that arrive within minGapMs of the previous pass', async () => {
    const { loop, counted } = countingLoop(1_000);
    loop.start();
    await waitFor('the first pass', () => counted.passes >= 1, { timeoutMs: 30_000, intervalMs: 5 });
    expect(counted.passes).toBe(1);
    // Ten wake-ups, 5 ms apart: without the gap each would find the loop idle and run a pass of its own.
    for (let i = 0; i < 10; i++) {
      loop.wake();
      await sleep(5);
    }
    expect(counted.passes).toBe(1);
    await loop.stop();
    // stop ends the gap wait at once, and no pass starts after it.
    expect(counted.passes).toBe(1);
  });

  it('follows a pass that reported more work at once, and runs a woken pass right away without a gap', async () => {
    const starts: number[] = [];
    let left = 3;
    const loop = createPollLoop(
      'test',
      async () => {
        starts.push(performance.now());
        return left-- > 0;
      },
      { intervalMs: 60_000, logger, minGapMs: 5_000 },
    );
    loop.start();
    await waitFor('the four passes', () => starts.length >= 4, { timeoutMs: 30_000, intervalMs: 5 });
    await loop.stop();
    // The first pass and the three that followed "more" all ran at once (the next one would wait 5 s).
    expect(starts).toHaveLength(4);
    expect(starts.at(-1)! - starts[0]!).toBeLessThan(5_000);

    const plain = countingLoop();
    plain.loop.start();
    await waitFor('the first pass', () => plain.counted.passes >= 1, { timeoutMs: 30_000, intervalMs: 5 });
    plain.loop.wake();
    // The woken pass comes at once (the next poll would be a minute later).
    await waitFor('the woken pass', () => plain.counted.passes >= 2, { timeoutMs: 30_000, intervalMs: 5 });
    await plain.loop.stop();
    expect(plain.counted.passes).toBe(2);
  });
});
