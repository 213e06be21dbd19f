import type { WebSocketServer } from 'ws';
import type { GraphQLWsAdapter } from './graphql-ws-adapter.js';

/**
 * Ending sockets from the server's side: draining them all with 1012 "Service Restart" at shutdown (so
 * clients reconnect to another pod), dropping what is left when the grace period ends, and shedding some
 * for rebalancing (socket-rebalancer.ts). A socket closing for its own reasons is not handled here.
 */

/** Close code for a graceful shutdown: "Service Restart", so clients reconnect to another pod. */
export const SERVICE_RESTART_CLOSE_CODE = 1012;

export interface SocketLifecycle {
  /** Closes every socket with 1012 and stops accepting upgrades; resolves once they are closed. */
  close(): Promise<void>;
  /** Drops every socket at once (end of the shutdown grace period). */
  terminate(): void;
  /**
   * Closes up to `count` open sockets with 1012 "Service Restart" (rebalancing: clients reconnect through
   * the load balancer, to a less loaded pod). Returns how many it closed.
   */
  shed(count: number): number;
}

/** The lifecycle of `wss`'s sockets, served by `server` (graphql-ws-adapter.ts). */
export function createSocketLifecycle(wss: WebSocketServer, server: GraphQLWsAdapter): SocketLifecycle {
  return {
    async close() {
      const sockets = [...wss.clients];
      const allClosed = Promise.all(
        sockets.map((socket) =>
          socket.readyState === socket.CLOSED ? undefined : new Promise((resolve) => socket.once('close', resolve)),
        ),
      );
      for (const socket of sockets) socket.close(SERVICE_RESTART_CLOSE_CODE, 'Service Restart');
      await allClosed;
      await server.dispose();
    },
    terminate() {
      for (const socket of wss.clients) socket.terminate();
    },
    shed(count) {
      let closed = 0;
      for (const socket of wss.clients) {
        if (closed >= count) break;
        if (socket.readyState !== socket.OPEN) continue;
        socket.close(SERVICE_RESTART_CLOSE_CODE, 'Service Restart: rebalancing');
        closed++;
      }
      return closed;
    },
  };
}
