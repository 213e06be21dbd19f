import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import {
  CLIENT_ERROR_CODES,
  CLOSE_CODES,
  closeCodesInSource,
  ERROR_CODES,
  errorCodesInSource,
  renderErrorReference,
} from '../docs/build/error-reference.js';

// docs/errors.md is generated from docs/build/error-reference.ts; this fails when a code the code sets is
// not described there, or the page was not regenerated (`pnpm docs:config`).

describe('docs/errors.md', () => {
  it('is what `pnpm docs:config` renders today', async () => {
    const committed = await readFile(new URL('../docs/errors.md', import.meta.url), 'utf8');
    expect(committed).toBe(renderErrorReference());
  });

  it('describes every extensions.code the server and the client set', () => {
    const described = new Set([...Object.keys(ERROR_CODES), ...Object.keys(CLIENT_ERROR_CODES)]);
    const found = errorCodesInSource();
    expect(found).toContain('RATE_LIMITED');
    expect(found).toContain('REQUEST_ENTITY_TOO_LARGE');
    expect(found.filter((code) => !described.has(code))).toEqual([]);
  });

  it('describes every close code the API sends', () => {
    const described = new Set(CLOSE_CODES.map((entry) => entry.code));
    const found = closeCodesInSource();
    expect(found).toEqual(expect.arrayContaining([1001, 1009, 1012, 1013, 4400, 4403, 4406, 4408, 4500]));
    expect(found.filter((code) => !described.has(code))).toEqual([]);
  });
});
