import { AuthUnavailableError, type TokenVerifier, type Viewer } from '@herald/auth';
import { ErrorCode } from '@herald/contracts';
import { GraphQLError } from 'graphql';
import { CloseCode, type ServerOptions } from 'graphql-ws';
import { readConnectionToken } from '../context.js';
import type { TenantQuotas } from '../tenancy/tenant-quotas.js';
import type { ConnectionExtra } from './graphql-ws-adapter.js';

/**
 * Connection admission: who a socket is and how long it may stay. The token is verified once, at
 * `connection_init` (a bad one: 4403; the key source down: 1013), the user's `socketsPerUser` quota
 * (docs/tenancy.md) counts the socket until it closes (over it: 1013), and the socket is closed with 4403
 * at its token's expiry. An anonymous socket may instead authenticate one operation at a time
 * ({@link SocketAdmission.authenticateOperation}); the subscribe path (ws-subscribe.ts) asks for that.
 * The `connection_init` deadline itself is enforced by graphql-ws-adapter.ts.
 */

/** A client that doesn't send `connection_init` within this is closed with 4408. */
export const CONNECTION_INIT_TIMEOUT_MS = 3_000;
/** The token could not be checked (key source down): "Try Again Later", so the client backs off. */
export const AUTH_UNAVAILABLE_CLOSE_CODE = 1013;
/** A user over their `socketsPerUser` quota: "Try Again Later", after `connection_init`. */
export const SOCKET_LIMIT_CLOSE_CODE = 1013;
/**
 * The longest one wait of a socket's expiry timer; a token that lives longer is waited for in steps of
 * exactly this. Node keeps a list for every distinct duration an unref'd timer was set with until that
 * duration has passed, even after the timer is cleared (it deletes an empty list at once only for ref'd
 * timers): a timer set for a token's whole remaining life, cleared when its socket closes, left about
 * 160 bytes behind per connection for as long as the token had left, days for most (a 100-minute soak's
 * pod held 1,700 such lists). In steps of one duration, the long waits of every socket share one list,
 * and only a last step, shorter than this, has a list of its own for at most this long.
 */
export const EXPIRY_STEP_MS = 60_000;

export interface SocketAdmission {
  /** graphql-ws's `onConnect`: verifies the `connection_init` token and counts the socket for its user. */
  onConnect: NonNullable<ServerOptions<Record<string, unknown>, ConnectionExtra>['onConnect']>;
  /**
   * Credentials sent with one operation rather than at `connection_init`: Yoga's GraphiQL puts its
   * Headers tab into each subscribe message as `extensions.headers` and never into `connection_init`.
   * Only consulted for a socket that authenticated nobody at `connection_init`; verified exactly like
   * connection credentials, and the socket is closed at that token's expiry as well.
   * @returns the viewer, undefined when the operation carries no credentials, or the error to answer with
   */
  authenticateOperation(extensions: unknown): Promise<Viewer | GraphQLError | undefined>;
  /** The socket closed: stops its expiry timer and releases its `socketsPerUser` count. */
  release(extra: ConnectionExtra): void;
}

export function createSocketAdmission(deps: { verifier: TokenVerifier; quotas: TenantQuotas }): SocketAdmission {
  const { verifier } = deps;
  return {
    async onConnect(ctx) {
      const state = ctx.extra;
      let token: string | undefined;
      try {
        token = readConnectionToken(ctx.connectionParams);
      } catch {
        return false;
      }
      // The token is read: the `connection_init` payload (the token itself) is not kept for the socket's life.
      (ctx as { connectionParams?: unknown }).connectionParams = undefined;
      if (token === undefined) {
        state.viewer = null;
        return true;
      }
      try {
        state.viewer = await verifier.verify(token);
      } catch (error) {
        if (error instanceof AuthUnavailableError) {
          // Closed first, so graphql-ws's own 4403 for `false` finds the socket closing and is dropped.
          state.socket.close(AUTH_UNAVAILABLE_CLOSE_CODE, 'Try Again Later: authentication unavailable');
        }
        return false; // graphql-ws closes with 4403 Forbidden
      }
      // A socket closed meanwhile is not counted: its close already ran.
      if (state.socket.readyState !== state.socket.OPEN) return false;
      if (!(await deps.quotas.openSocket(state.viewer))) {
        state.socket.close(SOCKET_LIMIT_CLOSE_CODE, 'Try Again Later: too many sockets open for this user');
        return false;
      }
      state.countedViewer = state.viewer;
      if (state.socket.readyState !== state.socket.OPEN) {
        // Closed while being counted: onClose found nothing to release.
        state.countedViewer = undefined;
        deps.quotas.closeSocket(state.viewer);
        return false;
      }
      scheduleExpiry(state, state.viewer.expiresAt);
      return true;
    },

    async authenticateOperation(extensions) {
      const headers = (extensions as { headers?: unknown } | null | undefined)?.headers;
      if (headers == null || typeof headers !== 'object') return undefined;
      try {
        const token = readConnectionToken(headers as Record<string, unknown>);
        return token === undefined ? undefined : await verifier.verify(token);
      } catch (error) {
        if (error instanceof AuthUnavailableError) {
          return new GraphQLError('Authentication is temporarily unavailable: retry later with the same token', {
            extensions: { code: ErrorCode.AUTH_UNAVAILABLE },
          });
        }
        return new GraphQLError('Invalid, expired or malformed token in the operation headers', {
          extensions: { code: 'UNAUTHENTICATED' },
        });
      }
    },

    release(extra) {
      clearTimeout(extra.expiryTimer);
      if (extra.countedViewer) {
        deps.quotas.closeSocket(extra.countedViewer);
        extra.countedViewer = undefined;
      }
    },
  };
}

/**
 * Closes the socket with 4403 at `expiresAt` (Unix seconds), or at an earlier expiry already set; nothing
 * for a socket no longer open. The timer calls a module function with arguments rather than a closure per
 * socket.
 */
export function scheduleExpiry(state: ConnectionExtra, expiresAt: number | undefined) {
  // A socket that closed while its token was being verified has run its release already: a timer armed
  // now would keep the connection (and its socket) alive until the token expires.
  if (expiresAt === undefined || state.socket.readyState !== state.socket.OPEN) return;
  if (state.expiresAt !== undefined && state.expiresAt <= expiresAt) return;
  state.expiresAt = expiresAt;
  clearTimeout(state.expiryTimer);
  const remainingMs = expiresAt * 1000 - Date.now();
  if (remainingMs <= 0) {
    state.socket.close(CloseCode.Forbidden, 'Forbidden: token expired');
    return;
  }
  state.expiryTimer = setTimeout(onExpiryTimer, Math.min(remainingMs, EXPIRY_STEP_MS), state, expiresAt);
  state.expiryTimer.unref();
}

/** The expiry timer fired: closes the socket, or waits the next step ({@link EXPIRY_STEP_MS}). */
function onExpiryTimer(state: ConnectionExtra, expiresAt: number) {
  if (expiresAt * 1000 - Date.now() > 0) {
    state.expiresAt = undefined;
    scheduleExpiry(state, expiresAt);
  } else state.socket.close(CloseCode.Forbidden, 'Forbidden: token expired');
}
