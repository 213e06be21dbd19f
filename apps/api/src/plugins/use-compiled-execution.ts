import { makeExecute } from '@envelop/core';
import type { DocumentNode, ExecutionArgs, ExecutionResult, GraphQLSchema, OperationDefinitionNode } from 'graphql';
import { type CompiledQuery, compileQuery, isCompiledQuery } from 'graphql-jit';
import type { Plugin } from 'graphql-yoga';
import { LRUCache } from 'lru-cache';
import type { TransportContext } from '../context.js';

/** Documents the HTTP fast path may run without Yoga; past this the least recently used is forgotten. */
export const MAX_ACCEPTED_QUERIES = 500;

/** A document Yoga parsed and validated with every rule, ready to run compiled. */
export interface AcceptedQuery {
  document: DocumentNode;
  /** The operation's name, or undefined for an anonymous one (the document holds only it). */
  operationName: string | undefined;
  /**
   * Whether a traced request can carry its operation by hand while this runs (the HTTP fast path's
   * stretches, request-tracing.ts): a query whose every root field reads all it returns in its resolver's
   * first synchronous step ({@link READS_IN_ONE_STEP}), so every statement it sends starts in the stretch.
   */
  carriesOperation: boolean;
  compiled: CompiledQuery;
}

/**
 * Compiled execution (graphql-jit) for queries and mutations over HTTP, and the register of query
 * documents the HTTP fast path (http-fast-path.ts) may run by itself.
 *
 * - `plugin` runs HTTP operations through graphql-jit, one compilation per document and operation name
 *   (cached with the document, which Yoga's parse cache keeps the same object for the same text).
 *   WebSocket operations keep graphql-js: shared subscription execution is built on it. A document
 *   graphql-jit can't compile runs on graphql-js, which gives the usual errors.
 * - A document that reaches execution over HTTP has passed Yoga's parser and every validation rule
 *   (graphql-armor limits, introspection policy, text literals…), none of which depend on the request.
 *   When it holds exactly one operation, a query or a mutation, its text is recorded with its compiled
 *   form: `accepted(query, operationName)` then answers for the same text, and the fast path runs it
 *   without parsing or validating again. Documents with several operations are never recorded.
 * - `finish(context, result)`: the next execution with that context answers `result` without running
 *   anything, so the fast path can put a result it computed through Yoga's execution hooks (error codes,
 *   error logging, masking) exactly once, as if Yoga had run it.
 *
 * Replaces `@envelop/graphql-jit`, which caches one compilation per document whatever the operation
 * name: a document with two operations ran the first one asked for on every later request.
 */
export function createCompiledExecution(options: { maxAccepted?: number } = {}) {
  const maxAccepted = options.maxAccepted ?? MAX_ACCEPTED_QUERIES;
  const compilations = new WeakMap<DocumentNode, Map<string | undefined, CompiledQuery | null>>();
  // A hit costs 19 ns of CPU here against 10 ns on a plain Map (`node --import tsx bench/micro/cache-micro.ts`),
  // once per fast-path request of tens of µs; in exchange the documents in use stay.
  const accepted = new LRUCache<string, AcceptedQuery>({ max: maxAccepted });
  const finished = new WeakMap<object, ExecutionResult>();

  const compiledFor = (schema: GraphQLSchema, document: DocumentNode, operationName: string | undefined) => {
    let byName = compilations.get(document);
    if (!byName) {
      byName = new Map();
      compilations.set(document, byName);
    }
    let compiled = byName.get(operationName);
    if (compiled === undefined) {
      const result = compileQuery(schema, document, operationName);
      compiled = isCompiledQuery(result) ? result : null;
      byName.set(operationName, compiled);
    }
    return compiled;
  };

  const execute = makeExecute((args: ExecutionArgs) => {
    const compiled = compiledFor(args.schema, args.document, args.operationName ?? undefined);
    if (!compiled) throw new Error('unreachable: only compiled operations are executed here');
    const withStringify = (result: ExecutionResult) =>
      Object.assign(result, { stringify: compiled.stringify }) as ExecutionResult;
    const result = compiled.query(args.rootValue, args.contextValue, args.variableValues);
    return result instanceof Promise ? result.then(withStringify) : withStringify(result);
  });

  const remember = (schema: GraphQLSchema, query: string, document: DocumentNode, compiled: CompiledQuery) => {
    const operations = document.definitions.filter((definition) => definition.kind === 'OperationDefinition');
    if (operations.length !== 1) return;
    const operation = operations[0] as OperationDefinitionNode;
    if (operation.operation === 'subscription') return;
    accepted.set(query, {
      document,
      operationName: operation.name?.value,
      carriesOperation: operation.operation === 'query' && readsInOneStep(schema, operation),
      compiled,
    });
  };

  const plugin: Plugin = {
    onExecute({ args, setExecuteFn }) {
      const done = finished.get(args.contextValue as object);
      if (done) {
        finished.delete(args.contextValue as object);
        setExecuteFn(() => done);
        return;
      }
      const context = args.contextValue as TransportContext & { params?: { query?: unknown } };
      if (context.transport === 'websocket') return;
      const operationName = args.operationName ?? undefined;
      const compiled = compiledFor(args.schema, args.document, operationName);
      if (!compiled) return;
      setExecuteFn(execute);
      const query = context.params?.query;
      if (typeof query === 'string' && !accepted.has(query)) remember(args.schema, query, args.document, compiled);
    },
  };

  return {
    plugin,
    /**
     * The compiled form of `query` when Yoga accepted that exact text before and `operationName` names
     * its one operation (or is absent); undefined otherwise.
     */
    accepted(query: string, operationName: string | null | undefined): AcceptedQuery | undefined {
      const found = accepted.get(query);
      if (!found || (operationName != null && operationName !== found.operationName)) return undefined;
      return found;
    },
    /** The next execution with `context` answers `result` (already computed) instead of running. */
    finish(context: object, result: ExecutionResult): void {
      finished.set(context, result);
    },
  };
}

export type CompiledExecution = ReturnType<typeof createCompiledExecution>;

/**
 * The field extension a root query field carries when its resolver sends every statement of what it
 * returns in its first synchronous step (nested fields resolved from those rows): `posts` (one statement,
 * authors joined). A query made only of such fields runs its statements in the stretch of a traced
 * request's operation, without the context storage (`carriesOperation`).
 */
export const READS_IN_ONE_STEP = 'heraldReadsInOneStep';

function readsInOneStep(schema: GraphQLSchema, operation: OperationDefinitionNode): boolean {
  const fields = schema.getQueryType()?.getFields();
  if (!fields) return false;
  return operation.selectionSet.selections.every(
    (selection) =>
      selection.kind === 'Field' &&
      (selection.name.value === '__typename' || fields[selection.name.value]?.extensions?.[READS_IN_ONE_STEP] === true),
  );
}
