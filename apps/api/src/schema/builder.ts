import { isMemberOf, isPlatformAdmin, type Viewer } from '@herald/auth';
import SchemaBuilder from '@pothos/core';
import RelayPlugin from '@pothos/plugin-relay';
import ScopeAuthPlugin, { RequestCache } from '@pothos/plugin-scope-auth';
import type { Context } from '../context.js';
import { ForbiddenError, UnauthenticatedError } from '../errors.js';

/**
 * The single Pothos builder. Authorization is declared on fields with `authScopes`:
 * - `viewer`: a current user exists (else UNAUTHENTICATED);
 * - `orgMember: orgId`: the current user belongs to that organisation (else FORBIDDEN);
 * - `platformAdmin`: the token's `roles` claim lists `herald:admin` (else FORBIDDEN).
 * Lookups by object id check the object's organisation in the resolver and answer NOT_FOUND/null,
 * because the organisation is not known before the row is read.
 */
export const builder = new SchemaBuilder<{
  Context: Context;
  AuthScopes: { viewer: boolean; orgMember: string; platformAdmin: boolean };
  AuthContexts: { viewer: Context & { viewer: Viewer } };
  DefaultAuthStrategy: 'all';
  Scalars: { DateTime: { Input: Date; Output: Date | string } };
  DefaultFieldNullability: false;
  DefaultEdgesNullability: { list: false; items: false };
  DefaultNodeNullability: false;
}>({
  plugins: [ScopeAuthPlugin, RelayPlugin],
  // Non-null unless a field says otherwise: the public schema (apps/api/schema.graphql) is mostly non-null.
  defaultFieldNullability: false,
  scopeAuth: {
    defaultStrategy: 'all',
    authorizeOnSubscribe: true,
    // Runs for every request. `orgMember` is a method: an arrow function in an object literal gets
    // esbuild's `__name` (keepNames, as tsx and the production bundle build), a defineProperty per call.
    authScopes: (context) => ({
      viewer: context.viewer != null,
      orgMember(orgId) {
        return isMemberOf(context.viewer, orgId);
      },
      platformAdmin: isPlatformAdmin(context.viewer),
    }),
    unauthorizedError: (_parent, context) =>
      context.viewer == null ? new UnauthenticatedError() : new ForbiddenError(),
  },
  relay: {
    clientMutationId: 'omit',
    edgesFieldOptions: { nullable: { list: false, items: false } },
    nodeFieldOptions: { nullable: false },
    cursorType: 'String',
    // The relay `node(id)`/`nodes(ids)` fields would be a second way into every type, each needing its
    // own tenancy check; Herald's lookups are the explicit `post(id)` etc. instead.
    nodeQueryOptions: false,
    nodesQueryOptions: false,
  },
});

builder.queryType();
builder.mutationType();
builder.subscriptionType();

/**
 * Drops the scope-auth cache Pothos keeps for `context` (in a WeakMap keyed by the context) once the
 * context's execution is over: nothing reads it afterwards. Kept until the context is collected, that
 * WeakMap entry made the whole request survive young-generation GCs: V8's scavenger keeps the values of
 * a WeakMap entry alive, and the cache holds the context and, through it, the request, its response and
 * its results. A `posts` request over HTTP then left ~6 KB in the old generation, and the full GCs that
 * clean that up were the request tail (p99, bench/results/PROFILE.md). If a field runs again with the same context, its
 * scopes are evaluated afresh.
 */
export function releaseScopeCache(context: object): void {
  RequestCache.clearForContext(context);
}
