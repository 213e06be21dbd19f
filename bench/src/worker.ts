/**
 * A load-client process: holds a share of the subscribed sockets, speaks graphql-transport-ws directly
 * over `ws` (connection_init, subscribe, next), and checks every frame it receives.
 *
 * The check is cheap on purpose (the client shares the machine with the server): a frame is accepted
 * when it is byte-identical to `{"id":<this socket's id>,"type":"next","payload":{"data":{"postPublished":
 * {…the expected post…}}}}`; anything else is parsed and checked field by field (right subscription id,
 * post id, title, tags, author name, no errors), so an equivalent but differently serialised frame still
 * counts (as `noncanonical`) and a wrong one never does. A server whose frames for one event all carry the
 * same extra bytes (Herald: `extensions.cursor`) would otherwise be parsed on every frame, costing the
 * clients ~55 % more CPU per delivery than raw's and, on a machine they share with the server, its p99
 * (bench/results/PROFILE.md): so the part after the post id of the first such frame that
 * passes the field-by-field check is kept, and later frames of that event that match it byte for byte are
 * accepted (still counted as `noncanonical`) without parsing.
 */

import { WebSocket } from 'ws';
import { Histogram, wallNow } from './common.js';
import {
  type BenchEvent,
  type ConnectCommand,
  frameHead,
  frameTail,
  type PhaseStats,
  SUBSCRIPTION_QUERY,
  subscriptionId,
  type WorkerCommand,
  type WorkerReply,
} from './protocol.js';

interface Socket {
  local: number;
  ws: WebSocket;
  subId: string;
  head: Buffer;
  subscribed: boolean;
  closed: boolean;
}

interface EventState {
  index: number;
  event: BenchEvent;
  tail: Buffer;
  /** The tail (from the quote after the post id) of a non-canonical frame of this event that checked out. */
  learned: Buffer | undefined;
}

interface PhaseAccumulator {
  valid: number;
  noncanonical: number;
  wrong: number;
  duplicate: number;
  latency: Histogram;
}

const QUOTE = 0x22;
const MAX_SAMPLES = 5;

const sockets: Socket[] = [];
let events: EventState[] = [];
const eventsByPostId = new Map<string, EventState>();
let received = new Uint8Array(0);
let counts = new Int32Array(0);
let publishTimes = new Float64Array(0);
let eventPhases: string[] = [];
let doneSent = new Uint8Array(0);
/** Receive times of deliveries whose publish command hasn't arrived yet, per event index. */
const pending = new Map<number, number[]>();
const phases = new Map<string, PhaseAccumulator>();
const wrongSamples: string[] = [];
const closeSamples: string[] = [];
let subscribedCount = 0;
let closedAfterSubscribe = 0;

function send(message: WorkerReply): void {
  process.send?.(message);
}

function phase(name: string): PhaseAccumulator {
  let accumulator = phases.get(name);
  if (!accumulator) {
    accumulator = { valid: 0, noncanonical: 0, wrong: 0, duplicate: 0, latency: new Histogram() };
    phases.set(name, accumulator);
  }
  return accumulator;
}

function currentPhaseName(): string {
  for (let i = eventPhases.length - 1; i >= 0; i--) if (eventPhases[i]) return eventPhases[i]!;
  return 'setup';
}

function recordWrong(socket: Socket, text: string): void {
  phase(currentPhaseName()).wrong++;
  if (wrongSamples.length < MAX_SAMPLES) wrongSamples.push(`${socket.subId}: ${text.slice(0, 300)}`);
}

function expectedCount(): number {
  return subscribedCount - closedAfterSubscribe;
}

function checkDone(index: number): void {
  if (doneSent[index] || publishTimes[index] === 0) return;
  if (counts[index]! >= expectedCount()) {
    doneSent[index] = 1;
    send({ type: 'eventDone', index, t: wallNow() });
  }
}

function accept(socket: Socket, state: EventState, canonical: boolean, receivedAt: number): void {
  const key = socket.local * events.length + state.index;
  const published = publishTimes[state.index]!;
  if (received[key]) {
    phase(published ? eventPhases[state.index]! : currentPhaseName()).duplicate++;
    return;
  }
  received[key] = 1;
  counts[state.index]!++;
  if (published === 0) {
    // The frame beat the publish command: keep the time until the command says when it was published.
    const times = pending.get(state.index) ?? [];
    pending.set(state.index, times);
    times.push(canonical ? receivedAt : -receivedAt);
    return;
  }
  const accumulator = phase(eventPhases[state.index]!);
  accumulator.valid++;
  if (!canonical) accumulator.noncanonical++;
  accumulator.latency.record((receivedAt - published) * 1000);
  if (counts[state.index]! >= expectedCount()) checkDone(state.index);
}

function onFrame(socket: Socket, data: Buffer): void {
  const receivedAt = wallNow();
  const head = socket.head;
  if (data.length > head.length + 2 && data.compare(head, 0, head.length, 0, head.length) === 0) {
    const quote = data.indexOf(QUOTE, head.length);
    if (quote > 0) {
      const state = eventsByPostId.get(data.toString('latin1', head.length, quote));
      if (
        state &&
        data.length - quote === state.tail.length &&
        data.compare(state.tail, 0, state.tail.length, quote) === 0
      ) {
        accept(socket, state, true, receivedAt);
        return;
      }
      const learned = state?.learned;
      if (learned && data.length - quote === learned.length && data.compare(learned, 0, learned.length, quote) === 0) {
        accept(socket, state!, false, receivedAt);
        return;
      }
      slowPath(socket, data, receivedAt, quote);
      return;
    }
  }
  slowPath(socket, data, receivedAt, -1);
}

/** `quote`: where the post id ends when the frame starts with the socket's canonical head, else -1. */
function slowPath(socket: Socket, data: Buffer, receivedAt: number, quote: number): void {
  const text = data.toString('utf8');
  let message: any;
  try {
    message = JSON.parse(text);
  } catch {
    recordWrong(socket, `unparseable: ${text}`);
    return;
  }
  if (message?.type === 'ping') {
    socket.ws.send('{"type":"pong"}');
    return;
  }
  if (message?.type === 'pong') return;
  if (message?.type !== 'next' || message.id !== socket.subId) {
    recordWrong(socket, text);
    return;
  }
  const post = message.payload?.data?.postPublished;
  const state = typeof post?.id === 'string' ? eventsByPostId.get(post.id) : undefined;
  if (
    !state ||
    message.payload.errors !== undefined ||
    post.title !== state.event.title ||
    !Array.isArray(post.tags) ||
    post.tags.join('\u0000') !== state.event.tags.join('\u0000') ||
    post.author?.name !== state.event.authorName
  ) {
    recordWrong(socket, text);
    return;
  }
  if (quote > 0 && state.learned === undefined) state.learned = Buffer.from(data.subarray(quote));
  accept(socket, state, false, receivedAt);
}

function onPublish(index: number, phaseName: string, t: number): void {
  publishTimes[index] = t;
  eventPhases[index] = phaseName;
  const accumulator = phase(phaseName);
  const times = pending.get(index);
  if (times) {
    pending.delete(index);
    for (const signed of times) {
      accumulator.valid++;
      if (signed < 0) accumulator.noncanonical++;
      accumulator.latency.record((Math.abs(signed) - t) * 1000);
    }
  }
  checkDone(index);
}

function connectOne(command: ConnectCommand, globalIndex: number): Promise<string | undefined> {
  const url = command.urls[globalIndex % command.urls.length]!;
  const localAddress = command.localAddresses[globalIndex % command.localAddresses.length];
  const subId = subscriptionId(globalIndex);
  return new Promise((resolve) => {
    const ws = new WebSocket(url, 'graphql-transport-ws', {
      perMessageDeflate: false,
      skipUTF8Validation: true,
      handshakeTimeout: 60_000,
      ...(localAddress ? { localAddress } : {}),
    });
    const socket: Socket = {
      local: -1,
      ws,
      subId,
      head: Buffer.from(frameHead(subId)),
      subscribed: false,
      closed: false,
    };
    let settled = false;
    const settle = (error?: string) => {
      if (settled) return;
      settled = true;
      resolve(error);
    };
    ws.on('open', () => {
      ws.send(JSON.stringify({ type: 'connection_init', payload: { authToken: command.token } }));
    });
    ws.on('message', (data: Buffer) => {
      if (socket.subscribed) {
        onFrame(socket, data);
        return;
      }
      const message = JSON.parse(data.toString('utf8'));
      if (message.type === 'connection_ack') {
        ws.send(
          JSON.stringify({
            id: subId,
            type: 'subscribe',
            payload: { query: SUBSCRIPTION_QUERY, operationName: 'PostPublished', variables: { orgId: command.orgId } },
          }),
        );
        socket.subscribed = true;
        socket.local = sockets.length;
        sockets.push(socket);
        subscribedCount++;
        settle();
      } else if (message.type === 'ping') {
        ws.send('{"type":"pong"}');
      } else {
        settle(`unexpected before ack: ${data.toString('utf8').slice(0, 200)}`);
        ws.terminate();
      }
    });
    ws.on('error', (error) => settle(`${error.message}`));
    ws.on('close', (code, reason) => {
      if (socket.subscribed && !socket.closed) {
        socket.closed = true;
        closedAfterSubscribe++;
        if (closeSamples.length < MAX_SAMPLES) closeSamples.push(`${subId}: closed ${code} ${reason.toString()}`);
        for (let i = 0; i < events.length; i++) checkDone(i);
      }
      settle(`closed ${code} ${reason.toString()} before ack`);
    });
  });
}

async function connectAll(command: ConnectCommand): Promise<void> {
  const errors: string[] = [];
  let failed = 0;
  let next = 0;
  const lane = async () => {
    while (next < command.count) {
      const globalIndex = command.firstIndex + next++;
      const error = await connectOne(command, globalIndex);
      if (error) {
        failed++;
        if (errors.length < MAX_SAMPLES) errors.push(error);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, command.concurrency) }, lane));
  // Sockets were appended in ack order; `local` indexes `received` rows.
  send({ type: 'connected', subscribed: subscribedCount, failed, errors });
}

function setEvents(list: BenchEvent[]): void {
  events = list.map((event, index) => ({ index, event, tail: Buffer.from(frameTail(event)), learned: undefined }));
  eventsByPostId.clear();
  for (const state of events) eventsByPostId.set(state.event.postId, state);
  received = new Uint8Array(Math.max(1, sockets.length) * Math.max(1, events.length));
  counts = new Int32Array(events.length);
  publishTimes = new Float64Array(events.length);
  doneSent = new Uint8Array(events.length);
  eventPhases = new Array(events.length).fill('');
}

function collect(): void {
  const result: Record<string, PhaseStats> = {};
  for (const [name, accumulator] of phases) {
    result[name] = {
      valid: accumulator.valid,
      noncanonical: accumulator.noncanonical,
      wrong: accumulator.wrong,
      duplicate: accumulator.duplicate,
      latency: accumulator.latency.data(),
    };
  }
  send({
    type: 'stats',
    phases: result,
    counts,
    wrongSamples,
    closed: closedAfterSubscribe,
    closeSamples,
  });
}

process.on('message', (command: WorkerCommand) => {
  switch (command.type) {
    case 'connect':
      void connectAll(command);
      break;
    case 'events':
      setEvents(command.events);
      break;
    case 'publish':
      onPublish(command.index, command.phase, command.t);
      break;
    case 'collect':
      collect();
      break;
    case 'close':
      for (const socket of sockets) socket.ws.terminate();
      process.exit(0);
  }
});
// The coordinator went away (Ctrl-C, crash): never outlive it.
process.on('disconnect', () => process.exit(0));
// Exit through process.exit, so `--cpu-prof` (when profiling the client) gets to write its profile.
process.on('SIGTERM', () => process.exit(0));
