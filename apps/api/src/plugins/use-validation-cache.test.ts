import type { ValidationRule } from 'graphql';
import { createSchema, createYoga, type Plugin } from 'graphql-yoga';
import { describe, expect, it } from 'vitest';
import { useValidationCache } from './use-validation-cache.js';

/** A Yoga whose validation also runs `rule`, counting how often validation really ran. */
function yogaCounting() {
  const runs = { count: 0 };
  const CountingRule: ValidationRule = () => {
    runs.count++;
    return {};
  };
  const addRule: Plugin = { onValidate: ({ addValidationRule }) => addValidationRule(CountingRule) };
  const yoga = createYoga({
    schema: createSchema({ typeDefs: 'type Query { hello: String }', resolvers: { Query: { hello: () => 'hi' } } }),
    parserAndValidationCache: { validationCache: false },
    plugins: [addRule, useValidationCache()],
  });
  const ask = async (query: string) => {
    const response = await yoga.fetch('http://yoga/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query }),
    });
    return response.json();
  };
  return { runs, ask };
}

describe('useValidationCache', () => {
  it('validates a document once and answers it again from the cache', async () => {
    const { runs, ask } = yogaCounting();
    for (let i = 0; i < 3; i++) expect(await ask('{ hello }')).toEqual({ data: { hello: 'hi' } });
    expect(runs.count).toBe(1);
    await ask('{ other: hello }');
    expect(runs.count).toBe(2);
  });

  it('keeps refusing an invalid document with the same errors', async () => {
    const { runs, ask } = yogaCounting();
    const first = await ask('{ nope }');
    const second = await ask('{ nope }');
    expect(first.errors[0].message).toMatch(/Cannot query field "nope"/);
    expect(second).toEqual(first);
    expect(runs.count).toBe(1);
  });
});
