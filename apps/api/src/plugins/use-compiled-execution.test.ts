import { GraphQLInt, GraphQLObjectType, GraphQLSchema } from 'graphql';
import { createSchema, createYoga } from 'graphql-yoga';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { schema } from '../schema/index.js';
import { startTestApi, type TestApi } from '../testing/test-api.js';
import { createCompiledExecution, READS_IN_ONE_STEP } from './use-compiled-execution.js';

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

it('lets a traced request carry its operation by hand only through queries of fields that read in one step', async () => {
  const compiled = createCompiledExecution();
  const oneStep = { extensions: { [READS_IN_ONE_STEP]: true } };
  const small = new GraphQLSchema({
    query: new GraphQLObjectType({
      name: 'Query',
      fields: { page: { type: GraphQLInt, ...oneStep }, later: { type: GraphQLInt } },
    }),
    mutation: new GraphQLObjectType({ name: 'Mutation', fields: { write: { type: GraphQLInt, ...oneStep } } }),
  });
  const yoga = createYoga({ schema: small, plugins: [compiled.plugin], logging: false });
  const carries = async (query: string) => {
    await yoga.fetch('http://yoga/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query }),
    });
    return compiled.accepted(query, undefined)?.carriesOperation;
  };
  expect(await carries('{ page }')).toBe(true);
  expect(await carries('{ page __typename }')).toBe(true);
  expect(await carries('{ page later }')).toBe(false);
  expect(await carries('{ ... on Query { page } }')).toBe(false);
  expect(await carries('mutation { write }')).toBe(false);
});

it('marks `posts` as reading in one step (its page statement joins the authors)', () => {
  const fields = schema.getQueryType()?.getFields();
  expect(fields?.posts?.extensions?.[READS_IN_ONE_STEP]).toBe(true);
  expect(fields?.webhookEndpoints?.extensions?.[READS_IN_ONE_STEP]).toBeUndefined();
});
