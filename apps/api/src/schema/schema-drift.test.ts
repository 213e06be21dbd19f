import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { printHeraldSchema, SCHEMA_FILE } from './print.js';

describe('schema.graphql', () => {
  it('matches the schema the code builds (run `pnpm schema:print` after changing a type)', () => {
    expect(readFileSync(SCHEMA_FILE, 'utf8')).toBe(printHeraldSchema());
  });

  it('keeps the public schema names', () => {
    const sdl = printHeraldSchema();
    for (const fragment of [
      'me: User',
      'post(id: ID!): Post',
      'createPost(input: CreatePostInput!): Post!',
      'publishPost(id: ID!): Post!',
      'edges: [PostEdge!]!',
      'pageInfo: PageInfo!',
      'publishedAt: DateTime',
      'author: Author!',
      'status: PostStatus!',
    ]) {
      expect(sdl).toContain(fragment);
    }
    expect(sdl).toMatch(/posts\(\s*orgId: ID!\s*(""".*"""\s*)?first: Int\s*after: String\s*\): PostConnection!/s);
  });
});
