import type { ServerOptions } from 'graphql-ws';
import type { Context } from '../context.js';
import type { ApiMetrics } from '../metrics.js';
import type { ConnectionExtra } from './graphql-ws-adapter.js';
import { SLOW_CONSUMER_CLOSE_CODE } from './subscription-broadcast.js';

/**
 * How much a socket may carry: the largest message a client may send, and how much may wait in a
 * socket's send buffer before it counts as a slow consumer and is closed (1013) rather than buffered
 * without bound. Subscriptions outside a shared group are guarded here, at graphql-ws's `onNext`, which
 * also counts their deliveries; a shared group checks its members as it writes (subscription-broadcast.ts).
 */

/** Largest WebSocket message accepted; a larger one closes the socket with 1009. */
export const MAX_WS_MESSAGE_BYTES = 1024 * 1024;
/** What `ws` closes a socket with when a message is over {@link MAX_WS_MESSAGE_BYTES} (its `maxPayload`). */
export const MESSAGE_TOO_BIG_CLOSE_CODE = 1009;
/** A socket with more than this waiting in its send buffer when an event is due is closed (1013). */
export const MAX_BUFFERED_BYTES = 512 * 1024;

/**
 * graphql-ws's `onNext` for subscriptions that run on their own: closes a socket past
 * {@link MAX_BUFFERED_BYTES} with 1013 (counted), else counts the delivery and its latency.
 */
export function createOnNext(
  metrics: ApiMetrics,
): NonNullable<ServerOptions<Record<string, unknown>, ConnectionExtra>['onNext']> {
  return function onNext(ctx, _id, _payload, args) {
    const { socket } = ctx.extra;
    if (socket.bufferedAmount > MAX_BUFFERED_BYTES) {
      metrics.slowConsumersClosed.inc();
      socket.close(SLOW_CONSUMER_CLOSE_CODE, 'Try Again Later: too slow to keep up');
      return;
    }
    metrics.eventsDelivered.inc();
    const event = (args.contextValue as Context | undefined)?.event;
    if (event) metrics.eventToSendSeconds.observe((Date.now() - event.emittedAt) / 1000);
    if (event?.replayed) metrics.eventsReplayed.inc();
  };
}
