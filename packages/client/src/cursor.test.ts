import { describe, expect, it } from 'vitest';
import { isAfter, readCursor } from './cursor.js';

const cursor = (text: string) => Buffer.from(text).toString('base64url');

describe('readCursor', () => {
  it("reads the epoch and position of Herald's cursors", () => {
    expect(readCursor(cursor('v1:ab12cd34:42:org-a'))).toEqual({ epoch: 'ab12cd34', position: 42 });
  });

  it('answers undefined for anything else', () => {
    for (const bad of ['', '!!', cursor('v2:e:1:o'), cursor('v1::1:o'), cursor('v1:e:x:o')])
      expect(readCursor(bad)).toBeUndefined();
  });
});

describe('isAfter', () => {
  it('drops positions at or before the last of the same epoch; a new epoch or unknown cursor passes', () => {
    const last = { epoch: 'e', position: 5 };
    expect(isAfter({ epoch: 'e', position: 6 }, last)).toBe(true);
    expect(isAfter({ epoch: 'e', position: 5 }, last)).toBe(false);
    expect(isAfter({ epoch: 'e', position: 2 }, last)).toBe(false);
    expect(isAfter({ epoch: 'f', position: 1 }, last)).toBe(true);
    expect(isAfter(undefined, last)).toBe(true);
    expect(isAfter({ epoch: 'e', position: 1 }, undefined)).toBe(true);
  });
});
