import { describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import type { ConnectionExtra } from './graphql-ws-adapter.js';
import { scheduleExpiry } from './ws-admission.js';

/** A connection's state around a socket in `readyState`, with close calls recorded. */
function connectionState(readyState: number) {
  const closes: Array<[number, string]> = [];
  const socket = {
    OPEN: WebSocket.OPEN,
    readyState,
    close: (code: number, reason: string) => closes.push([code, reason]),
  } as unknown as WebSocket;
  const state: ConnectionExtra = {
    socket,
    viewer: null,
    expiryTimer: undefined,
    expiresAt: undefined,
    countedViewer: undefined,
  };
  return { state, closes };
}

const inAnHour = () => Math.floor(Date.now() / 1000) + 3600;

describe('scheduleExpiry', () => {
  it('arms a timer for an open socket at its token expiry', () => {
    const { state } = connectionState(WebSocket.OPEN);
    scheduleExpiry(state, inAnHour());
    expect(state.expiryTimer).toBeDefined();
    clearTimeout(state.expiryTimer);
  });

  it('arms nothing for a socket that closed while an operation token was being verified', () => {
    // The subscribe path verifies `extensions.headers` after an await; the socket may close meanwhile and
    // its release (which clears the timer) has run already. A timer armed then would hold the socket.
    for (const readyState of [WebSocket.CLOSING, WebSocket.CLOSED]) {
      const { state, closes } = connectionState(readyState);
      scheduleExpiry(state, inAnHour());
      expect(state.expiryTimer).toBeUndefined();
      expect(state.expiresAt).toBeUndefined();
      expect(closes).toEqual([]);
    }
  });

  it('closes an open socket at once with 4403 when the token has already expired', () => {
    const { state, closes } = connectionState(WebSocket.OPEN);
    scheduleExpiry(state, Math.floor(Date.now() / 1000) - 1);
    expect(closes).toEqual([[4403, 'Forbidden: token expired']]);
    expect(state.expiryTimer).toBeUndefined();
  });
});
