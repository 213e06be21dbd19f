import type { Plugin } from 'graphql-yoga';
import { releaseScopeCache } from '../schema/builder.js';

/**
 * Drops Pothos scope-auth's per-context cache when an execution is done (see `releaseScopeCache`):
 * queries and mutations over HTTP through Yoga and over WebSocket (envelop's `onExecute`; a subscription's
 * context keeps its cache for the subscription's life, as before). The HTTP fast path drops it itself.
 */
export function useScopeCacheRelease(): Plugin {
  return {
    onExecute({ args }) {
      const context = args.contextValue as object;
      return {
        onExecuteDone() {
          releaseScopeCache(context);
        },
      };
    },
  };
}
