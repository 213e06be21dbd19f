import type { FieldNode, GraphQLResolveInfo, SelectionSetNode } from 'graphql';

/**
 * The `Post` fields a `columns: 'page'` row answers (listPostsByOrg, POST_PAGE_COLUMNS): `id`, `title`,
 * `tags`, and `author` when only its name is asked (the joined `author_name`). Any other field
 * (`orgId`, `status`, `createdAt`, `publishedAt`, `author { id }`, or a field added later) makes the page
 * read every column.
 */
const PAGE_FIELDS = new Set(['__typename', 'id', 'title', 'tags', 'author']);
const PAGE_AUTHOR_FIELDS = new Set(['__typename', 'name']);

/** Connection fields that hold no posts, and edge fields other than `node`: they need no column. */
const CONNECTION_FIELDS = new Set(['__typename', 'pageInfo']);
const EDGE_FIELDS = new Set(['__typename', 'cursor']);

/** Fragments nested deeper than this read every column (validation refuses cycles; this is a backstop). */
const MAX_FRAGMENT_DEPTH = 32;

/** Verdicts per `posts` field node: a document's AST lives as long as Yoga's parse cache keeps it. */
const verdicts = new WeakMap<FieldNode, 'all' | 'page'>();

/**
 * Which columns a `posts` page needs for what the request asks of it: `page` when every field asked of
 * its posts (`edges { node { … } }`) is in {@link PAGE_FIELDS}, `all` otherwise, and `all` for anything
 * this does not recognise (a connection field other than `edges`/`pageInfo`, an edge field other than
 * `node`/`cursor`, a fragment it cannot find). Fragments, named and inline, are followed; `@skip` and
 * `@include` are ignored, so a field that may be skipped still counts (the page may read a column it
 * does not use, never the reverse). Hand-written rather than graphql's `collectSubfields`, which applies
 * those directives with this request's variables: this verdict depends on the document alone, so it is
 * worked out once per document and remembered.
 */
export function postPageColumns(info: GraphQLResolveInfo): 'all' | 'page' {
  const first = info.fieldNodes[0];
  if (first === undefined) return 'all';
  let verdict = verdicts.get(first);
  if (verdict === undefined) {
    verdict = needsOnlyPageColumns(info) ? 'page' : 'all';
    verdicts.set(first, verdict);
  }
  return verdict;
}

function needsOnlyPageColumns(info: GraphQLResolveInfo): boolean {
  const edges: FieldNode[] = [];
  const nodes: FieldNode[] = [];
  const onlyKnown = (
    set: SelectionSetNode | undefined,
    take: (name: string, field: FieldNode) => boolean,
    depth = 0,
  ): boolean => {
    if (depth > MAX_FRAGMENT_DEPTH) return false;
    if (set === undefined) return true;
    for (const selection of set.selections) {
      if (selection.kind === 'Field') {
        if (!take(selection.name.value, selection)) return false;
      } else {
        const fragment = selection.kind === 'InlineFragment' ? selection : info.fragments[selection.name.value];
        if (fragment === undefined || !onlyKnown(fragment.selectionSet, take, depth + 1)) return false;
      }
    }
    return true;
  };
  const collect = (name: string, into: FieldNode[], ignored: Set<string>) => (fieldName: string, field: FieldNode) => {
    if (fieldName === name) into.push(field);
    return fieldName === name || ignored.has(fieldName);
  };
  if (!info.fieldNodes.every((posts) => onlyKnown(posts.selectionSet, collect('edges', edges, CONNECTION_FIELDS)))) {
    return false;
  }
  if (!edges.every((edge) => onlyKnown(edge.selectionSet, collect('node', nodes, EDGE_FIELDS)))) return false;
  return nodes.every((node) =>
    onlyKnown(
      node.selectionSet,
      (name, field) =>
        PAGE_FIELDS.has(name) &&
        (name !== 'author' || onlyKnown(field.selectionSet, (authorField) => PAGE_AUTHOR_FIELDS.has(authorField))),
    ),
  );
}
