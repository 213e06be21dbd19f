import { expect, it } from 'vitest';
import { withoutQueryTimeout } from './query-timeout.js';

/** Async hooks Node runs for every new async resource and promise (an enabled AsyncLocalStorage adds one). */
function initHooks(): number {
  const binding = (process as unknown as { binding(name: string): { async_hook_fields: Uint32Array } }).binding(
    'async_wrap',
  );
  return binding.async_hook_fields[0]!;
}

it('leaves no async hook behind once the work without deadline has finished', async () => {
  const before = initHooks();
  let during = -1;
  await withoutQueryTimeout(async () => {
    during = initHooks();
    await Promise.resolve();
  });
  // While it runs, the exemption is an AsyncLocalStorage: a hook on every promise the process makes.
  expect(during).toBe(before + 1);
  // After, none: that hook costs every later request ~0.5 µs per await, for the life of the process.
  expect(initHooks()).toBe(before);
  await Promise.all([withoutQueryTimeout(async () => {}), withoutQueryTimeout(async () => {})]);
  expect(initHooks()).toBe(before);
});
