import { type AuthorLoader, createAuthorLoader } from '@herald/db';
import type { GraphQLResolveInfo } from 'graphql';

export interface Loaders {
  author: AuthorLoader;
}

/**
 * A request's loaders, each built on first use. Every WebSocket operation gets a context, and a
 * subscription never uses the context's loaders (its events get their own, below): building a DataLoader
 * (its cache Map and closures) for each of 10k subscribed sockets cost ~1 KB each for nothing.
 */
export function createLoaders(makeAuthor: () => AuthorLoader): Loaders {
  return new RequestLoaders(makeAuthor);
}

/** One object per request (a class: an object literal's getter is a new closure on every request). */
class RequestLoaders implements Loaders {
  #author: AuthorLoader | undefined;

  constructor(readonly makeAuthor: () => AuthorLoader) {}

  get author(): AuthorLoader {
    this.#author ??= this.makeAuthor();
    return this.#author;
  }
}

/** What {@link loadersFor} reads of a request's context (context.ts builds it with {@link createLoaders}). */
export interface LoaderContext {
  loaders: Loaders;
  db: Parameters<typeof createAuthorLoader>[0];
}

/** Loaders of subscription events, keyed by the event (the root value of that event's execution). */
const eventLoaders = new WeakMap<object, Loaders>();

/**
 * The batching loaders a resolver must use. Queries and mutations get the request's loaders. A
 * subscription runs one fresh execution per event with the event as root value, so each
 * event gets fresh loaders too: nothing cached for one event is served for the next.
 */
export function loadersFor(context: LoaderContext, info: GraphQLResolveInfo): Loaders {
  const root = info.rootValue as unknown;
  if (info.operation.operation !== 'subscription' || root == null || typeof root !== 'object') {
    return context.loaders;
  }
  let loaders = eventLoaders.get(root);
  if (!loaders) {
    loaders = { author: createAuthorLoader(context.db) };
    eventLoaders.set(root, loaders);
  }
  return loaders;
}
