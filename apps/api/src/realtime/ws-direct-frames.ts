import type { Duplex } from 'node:stream';
import type { WebSocket } from 'ws';
import * as ws from 'ws';

/**
 * The one module that reaches past `ws`'s public API: a shared subscription event is written to each
 * subscriber's TCP socket as a complete text frame, skipping `ws.send`'s per-call work (options object,
 * buffer conversion, the sender's queue checks, the callback wrapper). Only while the socket's sender is
 * idle (nothing queued behind a compression or a Blob read, not inside a fragmented message), so a
 * direct frame never overtakes one `ws` still holds; otherwise, and for anything that is not a real
 * `ws` socket (tests' fakes), the frame goes through `ws.send`.
 *
 * What it reads: `WebSocket#_socket` (the TCP socket) and `WebSocket#_sender` with its `_state`,
 * `_queue` and `_firstFragment`, as ws {@link WS_VERSION} lays them out. At creation it checks that a
 * `ws` WebSocket and Sender still have these fields, with the meaning assumed here; when they do not,
 * every frame goes through `ws.send` and `onFallback` is told why, once (the API logs one warning and
 * sets `herald_fast_path_fallback{path="ws_frames"}` to 1).
 *
 * Tests: ws-direct-frames.test.ts (the frames a client receives, the direct path taken, the pinned ws
 * version). docs/development.md lists them under "Upgrading dependencies".
 */

/** The `ws` version this module was written and tested against (package.json pins it exactly). */
export const WS_VERSION = '8.23.0';

/** ws's Sender state when nothing is queued behind a compression or a Blob read. */
const SENDER_IDLE = 0;
/** First byte of an unmasked, unfragmented WebSocket text frame: FIN + opcode 1 (RFC 6455, section 5.2). */
const FIN_TEXT = 0x81;
/** What `ws.send` is called with when the direct path is not taken. */
const TEXT_FRAME = { binary: false, compress: false } as const;

/** The parts of a server-side `ws` WebSocket that a frame written past `send` must respect. */
interface WsInternals {
  _socket?: { write(data: Buffer, callback: (error?: Error | null) => void): boolean } | null;
  _sender?: { _state: number; _queue: unknown[]; _firstFragment: boolean } | null;
}

export interface DirectFrames {
  /**
   * Sends the text message `head` + `suffix` (`headBytes`: head's UTF-8 length) on `socket`: byte for
   * byte what `socket.send(data, { binary: false, compress: false })` would write.
   */
  send(
    socket: WebSocket,
    head: string,
    headBytes: number,
    suffix: Buffer,
    onSendError: (error?: Error | null) => void,
  ): void;
  /** Why the direct path is off for every socket, or undefined when it is on. */
  readonly fallbackReason: string | undefined;
  /** Frames written directly to the TCP socket (read by tests). */
  readonly directFrames: number;
}

export interface DirectFramesOptions {
  /** Told once, at creation, when ws's internals are not what this module needs. @default nothing */
  onFallback?: (reason: string) => void;
  /** The internals check; tests replace it. @default {@link checkWsInternals} */
  check?: () => string | undefined;
}

/**
 * Checks that a server-side `ws` WebSocket has `_socket` and `_sender`, and that a fresh Sender is idle
 * as this module reads it (`_state` 0, an empty `_queue` array, `_firstFragment` true).
 * @returns undefined when all is there, else what is missing
 */
export function checkWsInternals(): string | undefined {
  try {
    // A server-side WebSocket (no address): what ws's server makes before it hands it the TCP socket.
    const ServerSide = ws.WebSocket as unknown as new (address: null, protocols: undefined, options: object) => object;
    const socket = new ServerSide(null, undefined, {}) as Record<string, unknown>;
    if (!('_socket' in socket) || !('_sender' in socket)) return 'ws WebSocket has no _socket/_sender';
    // Exported by ws, not declared by @types/ws.
    const SenderClass = (ws as unknown as { Sender?: new (socket: Duplex) => Record<string, unknown> }).Sender;
    if (typeof SenderClass !== 'function') return 'ws exports no Sender';
    const sender = new SenderClass({} as Duplex);
    if (sender._state !== SENDER_IDLE) return 'ws Sender has no idle _state 0';
    if (!Array.isArray(sender._queue) || sender._queue.length !== 0) return 'ws Sender has no empty _queue';
    if (sender._firstFragment !== true) return 'ws Sender has no _firstFragment';
    return undefined;
  } catch (error) {
    return `ws internals check failed: ${(error as Error).message}`;
  }
}

export function createDirectFrames(options: DirectFramesOptions = {}): DirectFrames {
  const fallbackReason = (options.check ?? checkWsInternals)();
  if (fallbackReason !== undefined) options.onFallback?.(fallbackReason);
  const direct = fallbackReason === undefined;
  let directFrames = 0;

  return {
    send(socket, head, headBytes, suffix, onSendError) {
      const length = headBytes + suffix.length;
      const internals = socket as unknown as WsInternals;
      const tcp = direct ? internals._socket : undefined;
      const sender = internals._sender;
      if (!tcp || !sender || sender._state !== SENDER_IDLE || sender._queue.length > 0 || !sender._firstFragment) {
        const data = Buffer.allocUnsafe(length);
        data.write(head, 0, 'utf8');
        data.set(suffix, headBytes);
        socket.send(data, TEXT_FRAME, onSendError);
        return;
      }
      const headerBytes = length < 126 ? 2 : length < 65_536 ? 4 : 10;
      const frame = Buffer.allocUnsafe(headerBytes + length);
      frame[0] = FIN_TEXT;
      if (headerBytes === 2) frame[1] = length;
      else if (headerBytes === 4) {
        frame[1] = 126;
        frame.writeUInt16BE(length, 2);
      } else {
        frame[1] = 127;
        frame.writeUInt32BE(Math.floor(length / 2 ** 32), 2);
        frame.writeUInt32BE(length >>> 0, 6);
      }
      frame.write(head, headerBytes, 'utf8');
      frame.set(suffix, headerBytes + headBytes);
      directFrames++;
      tcp.write(frame, onSendError);
    },
    fallbackReason,
    get directFrames() {
      return directFrames;
    },
  };
}
