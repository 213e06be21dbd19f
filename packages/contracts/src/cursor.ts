/**
 * Subscription cursors (docs/subscriptions.md), the one definition of their format for the API (which
 * writes and checks them) and @herald/client (which reads their place to drop an event it already
 * delivered): `base64url("v1:<epoch>:<position>:<orgId>")`, opaque to applications.
 * The epoch tells a cursor of a lost history (a flushed or restarted Redis, a restarted embedded
 * server) from one of the current history, so a stale cursor is refused instead of replaying the wrong
 * events; the organisation keeps one tenant's cursor from reading another's history.
 * Runs in Node and in browsers (no Node import).
 */

/** The format's version, first in the decoded text; another version is not read. */
export const CURSOR_VERSION = 'v1';
/** Upper bound on an encoded cursor's length; anything longer is malformed without being decoded. */
export const MAX_CURSOR_LENGTH = 1_024;

/** What a cursor names: the last event the client received, in one organisation's history. */
export interface SubscriptionCursor {
  orgId: string;
  epoch: string;
  /** The last event the client received: replay starts after it. */
  position: number;
}

/** A cursor's place in a history, without its organisation (what a client compares). */
export interface CursorPlace {
  epoch: string;
  position: number;
}

/** Node's Buffer when there is one (the server, which encodes a cursor per event): faster than btoa. */
const nodeBuffer = (
  globalThis as { Buffer?: { from(text: string, encoding: 'utf8'): { toString(encoding: 'base64url'): string } } }
).Buffer;

export function encodeCursor(cursor: SubscriptionCursor): string {
  const text = `${CURSOR_VERSION}:${cursor.epoch}:${cursor.position}:${cursor.orgId}`;
  if (nodeBuffer) return nodeBuffer.from(text, 'utf8').toString('base64url');
  let binary = '';
  for (const byte of new TextEncoder().encode(text)) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
}

/**
 * Reads a cursor whole.
 * @returns its organisation and place, or undefined when it is malformed (too long, not base64url,
 *   another version, no epoch, a position that is not a whole number of at most 15 digits)
 */
export function parseCursor(cursor: string): SubscriptionCursor | undefined {
  if (cursor.length === 0 || cursor.length > MAX_CURSOR_LENGTH || !/^[A-Za-z0-9_-]+$/.test(cursor)) return undefined;
  const text = decodeBase64Url(cursor);
  if (text === undefined) return undefined;
  const [version, epoch, position, ...org] = text.split(':');
  if (version !== CURSOR_VERSION || !epoch || !/^[0-9]{1,15}$/.test(position ?? '')) return undefined;
  return { orgId: org.join(':'), epoch, position: Number(position) };
}

/** @returns the cursor's place, or undefined when it isn't one this format describes */
export function readCursor(cursor: string): CursorPlace | undefined {
  const parsed = parseCursor(cursor);
  return parsed && { epoch: parsed.epoch, position: parsed.position };
}

/** True when `next` comes after `last` (or they can't be compared: a new history, unknown formats). */
export function isAfter(next: CursorPlace | undefined, last: CursorPlace | undefined): boolean {
  if (!next || !last || next.epoch !== last.epoch) return true;
  return next.position > last.position;
}

function decodeBase64Url(value: string): string | undefined {
  try {
    const base64 = value.replaceAll('-', '+').replaceAll('_', '/');
    const binary = atob(base64 + '='.repeat((4 - (base64.length % 4)) % 4));
    return new TextDecoder().decode(Uint8Array.from(binary, (char) => char.charCodeAt(0)));
  } catch {
    return undefined;
  }
}
