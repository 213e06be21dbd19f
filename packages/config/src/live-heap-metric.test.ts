import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { registerLiveHeapMetric } from './live-heap-metric.js';

setFlagsFromString('--expose-gc');
const fullCollection = runInNewContext('gc') as () => void;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const gauge = async (registry: Registry) =>
  Number((await registry.getMetricsAsJSON()).find((m) => m.name === 'test_heap_live_after_gc_bytes')?.values[0]?.value);

/** A full collection, then the gauge once the observer has heard of it (entries come a turn or two later). */
async function liveMb(registry: Registry): Promise<number> {
  const before = await gauge(registry);
  fullCollection();
  for (let i = 0; i < 200 && (await gauge(registry)) === before; i++) await sleep(10);
  return (await gauge(registry)) / 1_048_576;
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
