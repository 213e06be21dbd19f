import { describe, expect, it } from 'vitest';
import { resumableRequest } from './resumable-document.js';

const squash = (query: string) => query.replace(/\s+/g, ' ').trim();

describe('resumableRequest', () => {
  it('keeps a document that already passes a variable to after, and names that variable', () => {
    const query = 'subscription($orgId: ID!, $cursor: String) { postPublished(orgId: $orgId, after: $cursor) { id } }';
    const request = resumableRequest(query, { orgId: 'org-1' }, undefined);
    expect(request.query).toBe(query);
    expect(request.cursorVariable).toBe('cursor');
    expect(request.orgId).toBe('org-1');
  });

  it('adds $after and the argument to a document without them', () => {
    const request = resumableRequest(
      'subscription S($orgId: ID!) { postPublished(orgId: $orgId, tags: ["a"]) { id } }',
      { orgId: 'org-1' },
      'S',
    );
    expect(squash(request.query)).toBe(
      'subscription S($orgId: ID!, $after: String) { postPublished(orgId: $orgId, tags: ["a"], after: $after) { id } }',
    );
    expect(request.cursorVariable).toBe('after');
    expect(request.variables).toEqual({ orgId: 'org-1' });
  });

  it('moves a literal cursor into the variable, and reads a literal orgId', () => {
    const request = resumableRequest(
      'subscription { postPublished(orgId: "org-2", after: "c1") { id } }',
      undefined,
      undefined,
    );
    expect(squash(request.query)).toBe(
      'subscription ($after: String) { postPublished(orgId: "org-2", after: $after) { id } }',
    );
    expect(request.variables).toEqual({ after: 'c1' });
    expect(request.orgId).toBe('org-2');
  });

  it('picks a free name when $after is taken by something else', () => {
    const request = resumableRequest(
      'subscription($orgId: ID!, $after: Int) { postPublished(orgId: $orgId) { id } other(after: $after) }',
      { orgId: 'o', after: 3 },
      undefined,
    );
    expect(request.cursorVariable).toBe('after2');
    expect(request.query).toContain('postPublished(orgId: $orgId, after: $after2)');
  });

  it('sends other documents unchanged, with no cursor variable', () => {
    for (const query of ['query { me { id } }', 'subscription { somethingElse }']) {
      const request = resumableRequest(query, { x: 1 }, undefined);
      expect(request).toMatchObject({ query, cursorVariable: undefined, variables: { x: 1 } });
    }
  });

  it.each([
    ['a syntax error', 'subscription { postPublished(orgId: "o" { id } }', /does not parse/],
    [
      'two postPublished fields',
      'subscription { a: postPublished(orgId: "o") { id } b: postPublished(orgId: "p") { id } }',
      /one postPublished/,
    ],
    [
      'the field inside a fragment',
      'subscription { ...F } fragment F on Subscription { postPublished(orgId: "o") { id } }',
      /fragment/,
    ],
    ['a non-string cursor', 'subscription { postPublished(orgId: "o", after: 5) { id } }', /cursor string/],
  ])('refuses %s with a coded error', (_, query, message) => {
    let thrown: unknown;
    try {
      resumableRequest(query, {}, undefined);
    } catch (error) {
      thrown = error;
    }
    expect(Array.isArray(thrown)).toBe(true);
    const [error] = thrown as Array<{ message: string; extensions: { code: string } }>;
    expect(error?.message).toMatch(message);
    expect(error?.extensions.code).toBe('BAD_SUBSCRIPTION_DOCUMENT');
  });
});
