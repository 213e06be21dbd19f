import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import type { ConnectionExtra } from './graphql-ws-adapter.js';
import { scheduleExpiry } from './ws-admission.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
/** The V8 heap in use after two full collections. */
const heapUsed = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};

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

  it('leaves nothing behind for sockets that close long before their tokens expire', () => {
    // 30,000 connections whose tokens expire in two days, each at a second of its own, closed at once
    // (their release clears the timer). Node keeps an empty timer list per distinct duration an unref'd
    // timer had until that duration has passed: armed for the token's whole life, ~160 bytes each stayed.
    const before = heapUsed();
    const inTwoDays = Math.floor(Date.now() / 1000) + 2 * 86_400;
    for (let i = 0; i < 30_000; i++) {
      const { state } = connectionState(WebSocket.OPEN);
      scheduleExpiry(state, inTwoDays + i);
      clearTimeout(state.expiryTimer);
    }
    expect(heapUsed() - before).toBeLessThan(1024 * 1024);
  });

  it('closes an open socket at once with 4403 when the token has already expired', () => {
    const { state, closes } = connectionState(WebSocket.OPEN);
    scheduleExpiry(state, Math.floor(Date.now() / 1000) - 1);
    expect(closes).toEqual([[4403, 'Forbidden: token expired']]);
    expect(state.expiryTimer).toBeUndefined();
  });
});
