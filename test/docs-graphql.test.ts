import { readFile } from 'node:fs/promises';
import { buildSchema } from 'graphql';
import { describe, expect, it } from 'vitest';
import { renderSchemaGuide } from '../apps/api/src/schema/schema-guide.js';

// docs/graphql.md is generated from apps/api/schema.graphql (which schema-drift.test.ts keeps equal to the
// schema the code builds): this fails when the page was not regenerated (`pnpm docs:config`) or leaves an
// operation or a type out.

const sdl = await readFile(new URL('../apps/api/schema.graphql', import.meta.url), 'utf8');
const committed = await readFile(new URL('../docs/graphql.md', import.meta.url), 'utf8');

describe('docs/graphql.md', () => {
  it('is what `pnpm docs:config` renders from the committed schema today', () => {
    expect(committed).toBe(renderSchemaGuide(sdl));
  });

  it('has a section for every query, mutation and subscription, and for every type they use', () => {
    const schema = buildSchema(sdl);
    const operations = [schema.getQueryType(), schema.getMutationType(), schema.getSubscriptionType()].flatMap((root) =>
      Object.keys(root?.getFields() ?? {}),
    );
    expect(operations).toEqual(expect.arrayContaining(['posts', 'publishPost', 'postPublished']));
    const types = Object.keys(schema.getTypeMap()).filter(
      (name) =>
        !name.startsWith('__') &&
        !['Query', 'Mutation', 'Subscription', 'String', 'Int', 'Float', 'Boolean', 'ID'].includes(name),
    );
    const headings = new Set([...committed.matchAll(/^### `(\w+)`/gm)].map((match) => match[1]));
    expect([...operations, ...types].filter((name) => !headings.has(name))).toEqual([]);
  });

  it('carries the descriptions the schema gives, arguments included', () => {
    expect(committed).toContain('posts(orgId: ID!, first: Int, after: String): PostConnection!');
    expect(committed).toContain('- `first`: Page size, at most 100.');
  });
});
