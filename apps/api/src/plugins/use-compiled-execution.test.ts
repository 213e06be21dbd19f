import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '../testing/test-api.js';

let api: TestApi;
let token: string;

beforeAll(async () => {
  api = await startTestApi();
  token = await api.token({ sub: 'alice', name: 'Alice', orgs: ['org-a'] });
});

afterAll(() => api.close());

async function run(query: string, operationName: string) {
  const response = await api.fetch('/graphql', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, operationName }),
  });
  return response.json();
}

it('runs the operation named, in a document holding several (one compilation per operation)', async () => {
  // @envelop/graphql-jit compiled a document once, for the first operation asked for, and ran that one
  // whatever the later requests named.
  const document = 'query A { me { id } } query B { me { name } }';
  expect(await run(document, 'B')).toEqual({ data: { me: { name: 'Alice' } } });
  expect(await run(document, 'A')).toEqual({ data: { me: { id: 'alice' } } });
  expect(await run(document, 'B')).toEqual({ data: { me: { name: 'Alice' } } });
});
