import { ErrorCode } from '@herald/contracts';
import type { ExecutionResult } from 'graphql';
import type { Context } from '../context.js';

/**
 * The iterators the subscribe path (ws-subscribe.ts) wraps around one subscription's result stream:
 * {@link withCursors} adds each event's cursor, {@link onEnd} reports the end once, and
 * {@link refusalAsError} turns a refused cursor into a stream that fails at once. The two that live as
 * long as a subscription are classes with prototype methods, not generators or closures
 * (bench/results/PROFILE.md).
 */

/**
 * A subscription refused before its stream existed. graphql-ws would send that as `next` + `complete`;
 * a refused cursor, or a history that can't be read now, must be an `error` message (docs/subscriptions.md) so
 * clients don't take it for a normal end, so it becomes a stream that fails at once (graphql-ws
 * answers with `error`, keeping the code).
 */
export function refusalAsError(result: ExecutionResult): ExecutionResult | AsyncIterableIterator<ExecutionResult> {
  const expired = result.errors?.find(
    (error) =>
      error.extensions?.code === ErrorCode.CURSOR_EXPIRED || error.extensions?.code === ErrorCode.HISTORY_UNAVAILABLE,
  );
  if (!expired) return result;
  const failing: AsyncIterableIterator<ExecutionResult> = {
    [Symbol.asyncIterator]: () => failing,
    next: () => Promise.reject(expired),
    return: async () => ({ done: true, value: undefined }),
  };
  return failing;
}

/**
 * Adds `extensions.cursor` (docs/subscriptions.md) to each result: the resolver leaves the event's cursor on the
 * context while executing it. A plain iterator, so `return()` is immediate (see {@link onEnd}), and a
 * class, so a subscription holds no closures for it (bench/results/PROFILE.md).
 */
export function withCursors(
  stream: AsyncIterable<ExecutionResult>,
  context: Context,
): AsyncIterableIterator<ExecutionResult> {
  return new CursorStream(stream[Symbol.asyncIterator](), context);
}

class CursorStream implements AsyncIterableIterator<ExecutionResult> {
  constructor(
    private readonly iterator: AsyncIterator<ExecutionResult>,
    private readonly context: Context,
  ) {}

  [Symbol.asyncIterator]() {
    return this;
  }

  async next(): Promise<IteratorResult<ExecutionResult>> {
    const result = await this.iterator.next();
    const cursor = this.context.event?.cursor;
    if (result.done || cursor === undefined) return result;
    return { done: false, value: { ...result.value, extensions: { ...result.value.extensions, cursor } } };
  }

  async return(value?: unknown): Promise<IteratorResult<ExecutionResult>> {
    return this.iterator.return ? this.iterator.return(value) : { done: true, value: value as ExecutionResult };
  }

  async throw(error?: unknown): Promise<IteratorResult<ExecutionResult>> {
    if (this.iterator.throw) return this.iterator.throw(error);
    throw error;
  }
}

/**
 * Calls `onEndOnce` when the stream ends for any reason (done, error, or `return()` from the client's
 * `complete` or a closed socket). A plain iterator rather than an async generator: a generator's
 * `return()` would wait for the pending `next()`, i.e. for the next event. A class with a non-async
 * `next`, so an idle subscription holds no suspended async function (see bench/results/PROFILE.md).
 */
export function onEnd<T>(iterable: AsyncIterable<T>, onEndOnce: () => void): AsyncIterableIterator<T> {
  return new EndWatcher(iterable[Symbol.asyncIterator](), onEndOnce);
}

class EndWatcher<T> implements AsyncIterableIterator<T> {
  private ended = false;

  constructor(
    private readonly iterator: AsyncIterator<T>,
    private readonly onEndOnce: () => void,
  ) {}

  [Symbol.asyncIterator]() {
    return this;
  }

  next(): Promise<IteratorResult<T>> {
    return this.iterator.next().then(
      (result) => {
        if (result.done) this.end();
        return result;
      },
      (error: unknown) => {
        this.end();
        throw error;
      },
    );
  }

  async return(value?: unknown): Promise<IteratorResult<T>> {
    this.end();
    return this.iterator.return ? this.iterator.return(value) : { done: true, value: value as T };
  }

  async throw(error?: unknown): Promise<IteratorResult<T>> {
    this.end();
    if (this.iterator.throw) return this.iterator.throw(error);
    throw error;
  }

  private end() {
    if (!this.ended) {
      this.ended = true;
      this.onEndOnce();
    }
  }
}
