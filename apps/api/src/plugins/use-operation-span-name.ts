import type { Plugin } from 'graphql-yoga';
import { nameOperationSpan } from '../request-tracing.js';

/**
 * Names the request's span after its operation for operations Yoga's pipeline runs (request-tracing.ts;
 * the fast path names its own). Added only when tracing is on.
 */
export function useOperationSpanName(): Plugin {
  return {
    onExecute({ args }) {
      nameOperationSpan(args.document, args.operationName);
    },
  };
}
