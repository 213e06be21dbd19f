import { encodeCursor, parseCursor, type SubscriptionCursor } from '@herald/contracts';
import { CursorExpiredError } from '../errors.js';

// The cursor format is @herald/contracts' (cursor.ts), shared with @herald/client; what the API adds
// is which cursors a subscription may resume from, and the error it answers otherwise.

export { encodeCursor };
export type CursorPosition = SubscriptionCursor;

/**
 * Decodes a cursor and checks it names `orgId`.
 * @throws CursorExpiredError when it is malformed or belongs to another organisation
 */
export function decodeCursor(cursor: string, orgId: string): CursorPosition {
  const parsed = parseCursor(cursor);
  if (!parsed) throw new CursorExpiredError('malformed cursor');
  if (parsed.orgId !== orgId) throw new CursorExpiredError('cursor of another organisation');
  return parsed;
}
