/**
 * The values of `source` that `keep` accepts, as an iterator whose `return()` reaches `source` at once,
 * even before the first `next()`.
 *
 * Hand-written rather than graphql-yoga's `pipe(filter(…))`: that filter is a Repeater, whose executor
 * (and with it the `return()` of its source) only runs once something calls `next()`. A member of a
 * shared group never does (its own stream is closed unread), so its organisation listener stayed
 * registered for the life of the process, queueing every later event (socket-memory.test.ts).
 */
export function filterStream<T>(source: AsyncIterator<T>, keep: (value: T) => boolean): AsyncIterableIterator<T> {
  return new FilteredStream(source, keep);
}

class FilteredStream<T> implements AsyncIterableIterator<T> {
  constructor(
    private readonly source: AsyncIterator<T>,
    private readonly keep: (value: T) => boolean,
  ) {}

  [Symbol.asyncIterator]() {
    return this;
  }

  async next(): Promise<IteratorResult<T>> {
    for (;;) {
      const result = await this.source.next();
      if (result.done || this.keep(result.value)) return result;
    }
  }

  async return(value?: unknown): Promise<IteratorResult<T>> {
    return this.source.return ? this.source.return(value) : { done: true, value: value as T };
  }

  async throw(error?: unknown): Promise<IteratorResult<T>> {
    if (this.source.throw) return this.source.throw(error);
    throw error;
  }
}
