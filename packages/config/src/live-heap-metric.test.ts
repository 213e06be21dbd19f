import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { registerLiveHeapMetric } from './live-heap-metric.js';

setFlagsFromString('--expose-gc');
const fullCollection = runInNewContext('gc') as () => void;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function liveMb(registry: Registry): Promise<number> {
  fullCollection();
  await sleep(50); // the observer hears of the collection on a later turn
  const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === 'test_heap_live_after_gc_bytes');
  return Number(metric?.values[0]?.value) / 1_048_576;
}

describe('the live heap after a full collection', () => {
  it('follows what survives a full collection: up by what is kept, down when it is let go', async () => {
    const registry = new Registry();
    registerLiveHeapMetric(registry, 'test_');
    const before = await liveMb(registry);
    expect(before).toBeGreaterThan(1);

    // ~40 MB of small objects kept alive across the collection.
    let kept: Array<{ n: number; s: string }> | undefined = Array.from({ length: 400_000 }, (_, n) => ({
      n,
      s: `item ${n} ${'x'.repeat(40)}`,
    }));
    const holding = await liveMb(registry);
    expect(holding - before).toBeGreaterThan(20);
    expect(kept.length).toBe(400_000);

    kept = undefined;
    const after = await liveMb(registry);
    expect(holding - after).toBeGreaterThan(20);
  });
});
