import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as ws from 'ws';
import { WebSocket, WebSocketServer } from 'ws';
import { checkWsInternals, createDirectFrames, WS_VERSION } from './ws-direct-frames.js';

let server: WebSocketServer;
let serverSide: WebSocket;
let client: WebSocket;
const received: string[] = [];

beforeAll(async () => {
  server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await once(server, 'listening');
  const accepted = once(server, 'connection');
  client = new WebSocket(`ws://127.0.0.1:${(server.address() as AddressInfo).port}`);
  client.on('message', (data) => received.push(data.toString('utf8')));
  await once(client, 'open');
  [serverSide] = (await accepted) as [WebSocket];
});

afterAll(async () => {
  client?.terminate();
  await new Promise((resolve) => server?.close(resolve));
});

/** Waits (bounded) until the client has `count` messages. */
async function receivedCount(count: number): Promise<string[]> {
  for (let turn = 0; turn < 200 && received.length < count; turn++) await new Promise((r) => setTimeout(r, 5));
  return received.splice(0, received.length);
}

/** Messages of each frame-header size: 7-bit, 16-bit and 64-bit payload lengths. */
const MESSAGES = [
  '{"id":"a","payload":{}}',
  `{"id":"b","x":"${'é'.repeat(200)}"}`,
  `{"id":"c","x":"${'y'.repeat(70_000)}"}`,
];

function sendAll(frames: ReturnType<typeof createDirectFrames>, errors: unknown[]) {
  for (const message of MESSAGES) {
    const head = message.slice(0, 8);
    frames.send(serverSide, head, Buffer.byteLength(head), Buffer.from(message.slice(8)), (error) => {
      if (error) errors.push(error);
    });
  }
}

describe('ws direct frames', () => {
  it('the installed ws is the version the direct path was written for', () => {
    const require = createRequire(import.meta.url);
    const manifest = JSON.parse(readFileSync(require.resolve('ws/package.json'), 'utf8')) as { version: string };
    expect(manifest.version).toBe(WS_VERSION);
    const declared = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
    expect(declared.dependencies.ws).toBe(WS_VERSION);
  });

  it("finds ws's internals", () => {
    expect(checkWsInternals()).toBeUndefined();
  });

  it('writes every frame straight to the TCP socket, and the client reads what was sent', async () => {
    let fellBack: string | undefined;
    const frames = createDirectFrames({ onFallback: (reason) => (fellBack = reason) });
    const errors: unknown[] = [];
    sendAll(frames, errors);
    expect(await receivedCount(MESSAGES.length)).toEqual(MESSAGES);
    expect(frames.directFrames).toBe(MESSAGES.length);
    expect(frames.fallbackReason).toBeUndefined();
    expect(fellBack).toBeUndefined();
    expect(errors).toEqual([]);
  });

  it('writes byte for byte what ws would frame', () => {
    const written: Buffer[] = [];
    const fake = {
      _socket: { write: (data: Buffer) => written.push(data) },
      _sender: { _state: 0, _queue: [], _firstFragment: true },
    } as unknown as WebSocket;
    const frames = createDirectFrames();
    const Sender = (ws as unknown as { Sender: { frame(data: Buffer, options: object): Buffer[] } }).Sender;
    for (const message of MESSAGES) {
      frames.send(
        fake,
        message.slice(0, 4),
        Buffer.byteLength(message.slice(0, 4)),
        Buffer.from(message.slice(4)),
        () => {},
      );
      const framed = Sender.frame(Buffer.from(message), {
        fin: true,
        opcode: 1,
        mask: false,
        readOnly: false,
        rsv1: false,
      });
      expect(written.pop()?.equals(Buffer.concat(framed))).toBe(true);
    }
  });

  it('goes through ws.send while the sender is busy, so frames never overtake', async () => {
    const frames = createDirectFrames();
    // ws reads a Blob asynchronously; meanwhile its sender is busy and queues what comes next.
    serverSide.send(new Blob(['sent first, as a Blob']));
    const errors: unknown[] = [];
    sendAll(frames, errors);
    expect(frames.directFrames).toBe(0);
    expect(await receivedCount(MESSAGES.length + 1)).toEqual(['sent first, as a Blob', ...MESSAGES]);
    expect(errors).toEqual([]);
  });

  it('when the internals are missing: says so once, and every frame goes through ws.send', async () => {
    const reasons: string[] = [];
    const frames = createDirectFrames({
      check: () => 'ws Sender has no _firstFragment',
      onFallback: (r) => reasons.push(r),
    });
    const errors: unknown[] = [];
    sendAll(frames, errors);
    sendAll(frames, errors);
    expect(await receivedCount(MESSAGES.length * 2)).toEqual([...MESSAGES, ...MESSAGES]);
    expect(frames.directFrames).toBe(0);
    expect(frames.fallbackReason).toBe('ws Sender has no _firstFragment');
    expect(reasons).toEqual(['ws Sender has no _firstFragment']);
    expect(errors).toEqual([]);
  });
});
