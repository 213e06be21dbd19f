import type { DocumentNode } from 'graphql';
import type { Context } from '../context.js';
import type { RateLimitedError } from '../errors.js';
import { namedOrganization } from './operation-org.js';

/** Set on a context whose operation was counted, so no later hook on the same request counts it again. */
const COUNTED = Symbol('herald.operationCounted');

/**
 * Counts one HTTP operation against its tenant's `operationsPerSecond` (see tenant-quotas.ts), once per
 * context: the HTTP fast path checks before running a compiled query, `useOperationQuota` checks every
 * other HTTP execution, and a result the fast path hands to Yoga's execution hooks is not counted twice.
 * @returns the refusal to answer with, or undefined when the operation may run
 */
export function checkOperationQuota(
  context: Context,
  document: DocumentNode,
  operationName: string | null | undefined,
  variables: Readonly<Record<string, unknown>> | null | undefined,
): Promise<RateLimitedError | undefined> | undefined {
  const marked = context as Context & { [COUNTED]?: true };
  if (marked[COUNTED]) return undefined;
  marked[COUNTED] = true;
  if (context.viewer === null) return undefined;
  return context.quotas.checkOperation(context.viewer, namedOrganization(document, operationName, variables));
}
