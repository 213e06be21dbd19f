import { buildSchema, parse } from 'graphql';
import { describe, expect, it } from 'vitest';
import { schema as heraldSchema } from '../schema/index.js';
import { SHARED_ACROSS_VIEWERS, selectionIsViewerIndependent } from './shared-across-viewers.js';

describe('selectionIsViewerIndependent', () => {
  const schema = buildSchema(`
    type Query { x: Int }
    type Subscription { shared: Item  private: Item }
    type Item { name: String  owner: Owner }
    type Owner { email: String }
  `);
  schema.getSubscriptionType()!.getFields().shared!.extensions = { [SHARED_ACROSS_VIEWERS]: true };
  (schema.getType('Item') as { extensions: Record<string, unknown> }).extensions = { [SHARED_ACROSS_VIEWERS]: true };

  it('accepts a selection of flagged fields and types only', () => {
    expect(selectionIsViewerIndependent(schema, parse('subscription { shared { name __typename } }'))).toBe(true);
  });

  it('refuses a root field, or a nested type, that is not flagged', () => {
    expect(selectionIsViewerIndependent(schema, parse('subscription { private { name } }'))).toBe(false);
    expect(selectionIsViewerIndependent(schema, parse('subscription { shared { owner { email } } }'))).toBe(false);
    expect(
      selectionIsViewerIndependent(
        schema,
        parse('subscription { shared { ...F } } fragment F on Item { owner { email } }'),
      ),
    ).toBe(false);
  });

  it('refuses queries and documents with several operations', () => {
    expect(selectionIsViewerIndependent(schema, parse('{ x }'))).toBe(false);
    expect(
      selectionIsViewerIndependent(
        schema,
        parse('subscription A { shared { name } } subscription B { shared { name } }'),
      ),
    ).toBe(false);
  });

  it("marks Herald's postPublished selection of Post and Author as shareable", () => {
    expect(
      selectionIsViewerIndependent(
        heraldSchema,
        parse('subscription { postPublished(orgId: "o") { id title tags status publishedAt author { id name } } }'),
      ),
    ).toBe(true);
  });
});
