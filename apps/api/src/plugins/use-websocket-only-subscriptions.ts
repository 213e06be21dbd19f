import { ErrorCode } from '@herald/contracts';
import { GraphQLError } from 'graphql';
import { type Plugin, processRegularResult } from 'graphql-yoga';
import type { TransportContext } from '../context.js';

export const WEBSOCKET_REQUIRED_MESSAGE =
  'Subscriptions are served over WebSocket only (graphql-transport-ws on /graphql), not over HTTP';

/**
 * Refuses subscription operations on every transport but Herald's WebSocket server.
 *
 * Yoga serves subscriptions over HTTP by default (server-sent events, GraphQL over SSE, multipart), and
 * none of the socket's controls hold there: no close at token expiry, no per-connection limit, no
 * slow-consumer guard, no drain. Rather than re-implement each for SSE, such a subscription is answered
 * with one error, code `WEBSOCKET_REQUIRED`, and no stream is ever created.
 *
 * Runs at `subscribe` (after validation, before the source stream is created), so a document that holds
 * a query and a subscription can still run its query over HTTP. Only a context the WebSocket server
 * marked `transport: 'websocket'` may subscribe: anything unmarked is refused. The refusal is JSON
 * (HTTP 400) when the client accepts nothing Yoga serves a subscription with (`multipart/mixed`), rather
 * than an empty 406.
 */
export function useWebSocketOnlySubscriptions(): Plugin<TransportContext> {
  const refused = new WeakSet<Request>();
  return {
    onSubscribe({ args, setResultAndStopExecution }) {
      const context = args.contextValue as TransportContext & { request?: Request };
      if (context.transport === 'websocket') return;
      if (context.request) refused.add(context.request);
      setResultAndStopExecution({
        errors: [
          new GraphQLError(WEBSOCKET_REQUIRED_MESSAGE, {
            extensions: { code: ErrorCode.WEBSOCKET_REQUIRED, http: { status: 400 } },
          }),
        ],
      });
    },
    onResultProcess({ request, resultProcessor, setResultProcessor }) {
      if (!resultProcessor && refused.has(request)) setResultProcessor(processRegularResult, 'application/json');
    },
  };
}
