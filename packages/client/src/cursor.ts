/**
 * Herald's subscription cursors are opaque to applications; this library reads them only to drop an
 * event it already delivered (a position at or before the last one of the same history epoch).
 * Format (see the API's realtime/cursor.ts): `base64url("v1:<epoch>:<position>:<orgId>")`.
 */
export interface CursorPlace {
  epoch: string;
  position: number;
}

/** @returns the cursor's place, or undefined when it isn't one this library understands */
export function readCursor(cursor: string): CursorPlace | undefined {
  try {
    const text = decodeBase64Url(cursor);
    const [version, epoch, position] = text.split(':');
    const parsed = Number(position);
    if (version !== 'v1' || !epoch || !Number.isSafeInteger(parsed)) return undefined;
    return { epoch, position: parsed };
  } catch {
    return undefined;
  }
}

/** True when `next` comes after `last` (or they can't be compared: a new history, unknown formats). */
export function isAfter(next: CursorPlace | undefined, last: CursorPlace | undefined): boolean {
  if (!next || !last || next.epoch !== last.epoch) return true;
  return next.position > last.position;
}

function decodeBase64Url(value: string): string {
  const base64 = value.replaceAll('-', '+').replaceAll('_', '/');
  const binary = atob(base64 + '='.repeat((4 - (base64.length % 4)) % 4));
  return new TextDecoder().decode(Uint8Array.from(binary, (char) => char.charCodeAt(0)));
}
