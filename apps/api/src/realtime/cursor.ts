import { CursorExpiredError } from '../errors.js';

/**
 * Subscription cursors (docs/subscriptions.md): opaque to clients, `base64url("v1:<epoch>:<position>:<orgId>")`.
 * The epoch tells a cursor of a lost history (a flushed or restarted Redis, a restarted embedded
 * server) from one of the current history, so a stale cursor is refused instead of replaying the
 * wrong events; the organisation keeps one tenant's cursor from reading another's history.
 */

const CURSOR_VERSION = 'v1';
/** Upper bound on an encoded cursor's length; anything longer is malformed without being decoded. */
const MAX_CURSOR_LENGTH = 1_024;

export interface CursorPosition {
  orgId: string;
  epoch: string;
  /** The last event the client received: replay starts after it. */
  position: number;
}

export function encodeCursor(cursor: CursorPosition): string {
  return Buffer.from(`${CURSOR_VERSION}:${cursor.epoch}:${cursor.position}:${cursor.orgId}`).toString('base64url');
}

/**
 * Decodes a cursor and checks it names `orgId`.
 * @throws CursorExpiredError when it is malformed or belongs to another organisation
 */
export function decodeCursor(cursor: string, orgId: string): CursorPosition {
  if (cursor.length === 0 || cursor.length > MAX_CURSOR_LENGTH || !/^[A-Za-z0-9_-]+$/.test(cursor)) {
    throw new CursorExpiredError('malformed cursor');
  }
  const [version, epoch, position, ...org] = Buffer.from(cursor, 'base64url').toString('utf8').split(':');
  const parsed = Number(position);
  if (version !== CURSOR_VERSION || !epoch || !/^[0-9]{1,15}$/.test(position ?? '') || !Number.isSafeInteger(parsed)) {
    throw new CursorExpiredError('malformed cursor');
  }
  if (org.join(':') !== orgId) throw new CursorExpiredError('cursor of another organisation');
  return { orgId, epoch, position: parsed };
}
