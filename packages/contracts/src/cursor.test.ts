import { afterEach, describe, expect, it, vi } from 'vitest';
import { encodeCursor, isAfter, MAX_CURSOR_LENGTH, parseCursor, readCursor } from './cursor.js';

const raw = (text: string) => Buffer.from(text).toString('base64url');

describe('subscription cursors', () => {
  it('encode as base64url("v1:<epoch>:<position>:<orgId>") and read back whole', () => {
    const cursor = { orgId: 'org:with:colons é', epoch: 'ab12cd34', position: 42 };
    const encoded = encodeCursor(cursor);
    expect(encoded).toBe(raw('v1:ab12cd34:42:org:with:colons é'));
    expect(parseCursor(encoded)).toEqual(cursor);
    expect(readCursor(encoded)).toEqual({ epoch: 'ab12cd34', position: 42 });
  });

  it('refuse malformed text: each case answers undefined, nothing throws', () => {
    const bad = [
      '',
      '!!',
      'a'.repeat(MAX_CURSOR_LENGTH + 1),
      raw('v2:e:1:o'),
      raw('v1::1:o'),
      raw('v1:e:x:o'),
      raw('v1:e::o'),
      raw('v1:e:1e3:o'),
      raw('v1:e:-1:o'),
      raw('v1:e:1234567890123456:o'),
      'QQ=',
      'Q',
    ];
    for (const cursor of bad) {
      expect(parseCursor(cursor), cursor).toBeUndefined();
      expect(readCursor(cursor), cursor).toBeUndefined();
    }
  });

  it('order places within an epoch; another epoch or an unreadable cursor passes', () => {
    const last = { epoch: 'e', position: 5 };
    expect(isAfter({ epoch: 'e', position: 6 }, last)).toBe(true);
    expect(isAfter({ epoch: 'e', position: 5 }, last)).toBe(false);
    expect(isAfter({ epoch: 'f', position: 1 }, last)).toBe(true);
    expect(isAfter(undefined, last)).toBe(true);
  });
});

describe('without Node’s Buffer (a browser)', () => {
  afterEach(() => {
    vi.unstubAllGlobals();
    vi.resetModules();
  });

  it('encodes the same text', async () => {
    const cursor = { orgId: 'org-é/+?', epoch: 'ff00', position: 7 };
    const expected = encodeCursor(cursor);
    vi.stubGlobal('Buffer', undefined);
    vi.resetModules();
    const portable = await import('./cursor.js');
    expect(portable.encodeCursor(cursor)).toBe(expected);
    expect(portable.parseCursor(expected)).toEqual(cursor);
  });
});
