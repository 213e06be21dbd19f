import type { Plugin } from 'graphql-yoga';
import type { Context, TransportContext } from '../context.js';
import { checkOperationQuota } from '../tenancy/operation-quota.js';

/**
 * The `operationsPerSecond` quota on every HTTP operation that Yoga executes (the HTTP fast path checks
 * its compiled queries itself, with the same function): a refused operation is answered with
 * RATE_LIMITED (HTTP 429, `Retry-After`) before anything runs. WebSocket operations are checked when
 * subscribed (realtime/ws-subscribe.ts), so they are skipped here.
 */
export function useOperationQuota(): Plugin<Context> {
  return {
    async onExecute({ args, setResultAndStopExecution }) {
      const context = args.contextValue as Context & TransportContext;
      if (context.transport === 'websocket') return;
      const refused = await checkOperationQuota(
        context,
        args.document,
        args.operationName,
        args.variableValues as Record<string, unknown> | null | undefined,
      );
      if (refused) setResultAndStopExecution({ errors: [refused] });
    },
  };
}
