/**
 * What turning Node's promise hooks on and off costs code that awaits, with no context stored: a loop of
 * awaits, and every `every` iterations an AsyncLocalStorage is enabled (`run`) and disabled again, as a
 * context storage turned on only while an operation holds it does. Three timed passes after a warm-up.
 *   node --import tsx bench/micro/promise-hook-toggle.ts [every=0: never]
 * Results: bench/results/tracing/low-ratio-costs.md.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

const storage = new AsyncLocalStorage<number>();
const every = Number(process.argv[2] ?? 0);

async function leaf(i: number): Promise<number> {
  return i;
}

async function work(iterations: number): Promise<number> {
  let sum = 0;
  for (let i = 0; i < iterations; i++) {
    if (every > 0 && i % every === 0) {
      storage.run(1, () => {});
      storage.disable();
    }
    sum += await leaf(i);
  }
  return sum;
}

await work(300_000);
for (let pass = 0; pass < 3; pass++) {
  const started = process.hrtime.bigint();
  await work(2_000_000);
  const nsPerIteration = Number(process.hrtime.bigint() - started) / 2_000_000;
  console.log(`toggled every ${every || 'never'}: ${nsPerIteration.toFixed(1)} ns per iteration`);
}
