/**
 * Reads `read()` every 25 ms until `done` holds for what it returned, and returns that, for at most
 * `timeoutMs` (then throws with the last value read). For tests: what a dispatcher does shows up a
 * moment later, later still on a busy host.
 */
export async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`condition not met in ${timeoutMs} ms: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
