import { createSchema, createYoga } from 'graphql-yoga';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '../testing/test-api.js';
import { createCompiledExecution } from './use-compiled-execution.js';

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

it('remembers at most `maxAccepted` documents, forgetting the least recently used first', async () => {
  const compiled = createCompiledExecution({ maxAccepted: 2 });
  const yoga = createYoga({
    schema: createSchema({ typeDefs: 'type Query { a: Int, b: Int, c: Int }', resolvers: {} }),
    plugins: [compiled.plugin],
    logging: false,
  });
  const post = (query: string) =>
    yoga.fetch('http://yoga/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query }),
    });
  const [a, b, c] = ['{ a }', '{ b }', '{ c }'];
  await post(a);
  await post(b);
  expect(compiled.accepted(a, undefined)).toBeDefined(); // `a` is now the most recently used
  await post(c);
  expect(compiled.accepted(b, undefined)).toBeUndefined();
  expect(compiled.accepted(a, undefined)).toBeDefined();
  expect(compiled.accepted(c, undefined)).toBeDefined();
});
