import type { ServerResponse } from 'node:http';
import type { DocumentNode } from 'graphql';
import type { Context } from '../context.js';
import { RateLimitedError } from '../errors.js';
import { namedOrganization } from './operation-org.js';
import { operationSubject } from './tenant-quotas.js';

/** Set on a context whose operation was counted, so no later hook on the same request counts it again. */
const COUNTED = Symbol('herald.operationCounted');

/**
 * Counts one HTTP operation against its tenant's `operationsPerSecond` (see tenant-quotas.ts), once per
 * context: the HTTP fast path checks before running a compiled query, `useOperationQuota` checks every
 * other HTTP execution, and a result the fast path hands to Yoga's execution hooks is not counted twice.
 *
 * First the operation takes its tenant's turn on this pod (operation-turns.ts), given back when its
 * response is done: while one tenant already runs its share of operations here, its next one waits
 * behind them, not ahead of other tenants. One whose client went away while it waited runs nothing: it
 * is refused (uncounted) into the closed response.
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
  const { viewer, quotas } = context;
  if (viewer === null) return undefined;
  const orgId = namedOrganization(document, operationName, variables);
  const res = (context as { res?: ServerResponse }).res;
  if (res === undefined || !quotas.turns.on) return quotas.checkOperation(viewer, orgId);
  // Gone already: its 'close' was emitted and would never give a turn back.
  if (res.closed) return Promise.resolve(gone());
  const turn = quotas.turns.ask(operationSubject(viewer, orgId));
  res.once('close', () => turn.give());
  if (turn.ready === undefined) return quotas.checkOperation(viewer, orgId);
  return turn.ready.then((taken) => (taken ? quotas.checkOperation(viewer, orgId) : gone()));
}

/** The answer to an operation whose client is gone: nobody reads it, and no quota counts it. */
function gone(): RateLimitedError {
  return RateLimitedError.cheap('operationsPerSecond', 1_000);
}
