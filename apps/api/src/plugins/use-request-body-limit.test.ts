import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startTestApi, type TestApi } from '../testing/test-api.js';

let api: TestApi;
let token: string;

beforeAll(async () => {
  api = await startTestApi({ databaseUrl: inject('databaseUrl'), listen: true });
  token = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-a'] });
});

afterAll(() => api.close());

/** POSTs `body` over a real socket: with its Content-Length declared, or chunked (no length). */
function post(body: string, framing: 'content-length' | 'chunked'): Promise<{ status: number; body: any }> {
  const url = new URL('/graphql', api.baseUrl);
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${token}`,
        ...(framing === 'content-length' ? { 'content-length': Buffer.byteLength(body) } : {}),
      },
    });
    req.on('response', (response) => {
      let text = '';
      response.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body: JSON.parse(text) }));
    });
    req.on('error', reject);
    if (framing === 'chunked') {
      // Several writes before end: node:http sends them chunked.
      for (let offset = 0; offset < body.length; offset += 64 * 1024) req.write(body.slice(offset, offset + 64 * 1024));
      req.end();
    } else {
      req.end(body);
    }
  });
}

const ME = JSON.stringify({ query: '{ me { id } }' });
const HUGE = JSON.stringify({ query: '{ me { id } }', variables: { pad: 'x'.repeat(1024 * 1024) } });

describe('request body limit (MAX_REQUEST_BODY_BYTES, 1 MiB by default)', () => {
  it('refuses a declared Content-Length over the limit with 413', async () => {
    const { status, body } = await post(HUGE, 'content-length');
    expect(status).toBe(413);
    expect(body.errors[0].extensions.code).toBe('REQUEST_ENTITY_TOO_LARGE');
  });

  it('refuses a chunked body (no Content-Length) once it passes the limit with 413', async () => {
    const { status, body } = await post(HUGE, 'chunked');
    expect(status).toBe(413);
    expect(body.errors[0].message).toBe('Request body too large');
  });

  it('serves bodies within the limit, declared or chunked', async () => {
    for (const framing of ['content-length', 'chunked'] as const) {
      const { status, body } = await post(ME, framing);
      expect(status).toBe(200);
      expect(body.data.me.id).toBe('alice');
    }
  });
});
