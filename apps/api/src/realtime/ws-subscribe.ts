import { isMemberOf } from '@herald/auth';
import { ErrorCode } from '@herald/contracts';
import type { Span } from '@opentelemetry/api';
import { type DocumentNode, type execute, GraphQLError, Kind, type subscribe } from 'graphql';
import type { ServerOptions } from 'graphql-ws';
import { isAsyncIterable, type YogaServerInstance } from 'graphql-yoga';
import type { Context } from '../context.js';
import type { Logger } from '../logger.js';
import type { ApiMetrics } from '../metrics.js';
import { documentError, GRAPHQL_PARSE_FAILED, GRAPHQL_VALIDATION_FAILED } from '../plugins/use-error-codes.js';
import { namedOrganization, selectedOperation } from '../tenancy/operation-org.js';
import type { TenantQuotas } from '../tenancy/tenant-quotas.js';
import type { ConnectionExtra } from './graphql-ws-adapter.js';
import { runInSocketOperationSpan, startSocketOperationSpan } from './operation-span.js';
import type { GroupMember, SubscriptionGroups } from './subscription-groups.js';
import { type SocketAdmission, scheduleExpiry } from './ws-admission.js';
import { onEnd, refusalAsError, withCursors } from './ws-subscription-streams.js';

/**
 * The subscribe path: graphql-ws's `onSubscribe`, `execute`, `subscribe` and `onError`. A subscribe
 * message is parsed and validated through Yoga's envelop, checked against the socket's subscription cap
 * and the tenant quotas (docs/tenancy.md), and its `after` cursor read (docs/subscriptions.md); its
 * stream then joins a shared group (subscription-groups.ts) or runs on its own. Every refusal is a
 * graphql-ws `error` message with a code, and the socket stays open.
 */

/** Subscriptions per socket; the next subscribe gets an error and the socket stays up. */
export const MAX_SUBSCRIPTIONS_PER_SOCKET = 50;

/** Yoga's enveloped execute/subscribe, carried to graphql-ws's execute/subscribe in the root value. */
interface EnvelopedRoot {
  execute: typeof execute;
  subscribe: typeof subscribe;
  /** Set when this subscription may share execution with identical ones (see subscription-groups.ts). */
  share?: { key: string; member: GroupMember; resuming: boolean };
  /** The organisation whose `subscriptions` quota counts this subscription until it ends. */
  countedOrg?: string;
  /**
   * With tracing on: the operation's span (operation-span.ts), ended once it ran or its stream opened;
   * none for a new trace the sampler left out (the operation then runs as with tracing off).
   */
  span?: Span;
}

export interface SubscribeDeps {
  yoga: YogaServerInstance<Record<string, unknown>, Context>;
  logger: Logger;
  metrics: ApiMetrics;
  /** Share one execution per event among subscriptions whose results cannot differ. */
  sharedExecution: boolean;
  /** Tenant quotas: operations and subscriptions at subscribe. */
  quotas: TenantQuotas;
  groups: SubscriptionGroups;
  /** Per-operation credentials of an anonymous socket. */
  admission: Pick<SocketAdmission, 'authenticateOperation'>;
}

export type SubscribeHooks = Required<
  Pick<ServerOptions<Record<string, unknown>, ConnectionExtra>, 'onSubscribe' | 'execute' | 'subscribe' | 'onError'>
>;

export function createSubscribeHooks(deps: SubscribeDeps): SubscribeHooks {
  const { yoga, logger, metrics, groups } = deps;
  const { authenticateOperation } = deps.admission;

  const decrementActive = () => metrics.activeSubscriptions.dec();

  return {
    async onSubscribe(ctx, id, payload) {
      // graphql-ws has already registered this id, so the count includes the one being subscribed.
      if (Object.keys(ctx.subscriptions).length > MAX_SUBSCRIPTIONS_PER_SOCKET) {
        return [
          new GraphQLError(`Too many subscriptions on this socket: at most ${MAX_SUBSCRIPTIONS_PER_SOCKET}`, {
            extensions: { code: ErrorCode.SUBSCRIPTION_LIMIT_EXCEEDED, limit: 'subscriptionsPerSocket' },
          }),
        ];
      }
      const state = ctx.extra;
      let viewer = state.viewer ?? null;
      if (viewer === null) {
        const operationAuth = await authenticateOperation(payload.extensions);
        if (operationAuth instanceof GraphQLError) return [operationAuth];
        if (operationAuth) {
          viewer = operationAuth;
          scheduleExpiry(state, viewer.expiresAt);
        }
      }
      const { schema, execute, subscribe, contextFactory, parse, validate } = yoga.getEnveloped({
        ...ctx,
        socketViewer: viewer,
        transport: 'websocket',
        params: payload,
      });
      // A refused document is an `error` message with a code, never a 4500 close.
      let document: ReturnType<typeof parse>;
      let errors: readonly GraphQLError[];
      try {
        document = parse(payload.query);
      } catch (error) {
        return [documentError(error, GRAPHQL_PARSE_FAILED)];
      }
      try {
        errors = validate(schema, document);
      } catch (error) {
        return [documentError(error, GRAPHQL_VALIDATION_FAILED)];
      }
      if (errors.length > 0) return errors;
      // Tenant quotas (docs/tenancy.md), refused as an `error` message with the socket kept open.
      const named = namedOrganization(document, payload.operationName, payload.variables);
      if (viewer !== null) {
        const refused = await deps.quotas.checkOperation(viewer, named);
        if (refused) return [socketError(refused)];
      }
      const resume = resumeArgument(document, payload.variables);
      const shareKey = deps.sharedExecution
        ? groups.keyFor(document, payload.operationName, payload.query, resume.keyVariables)
        : undefined;
      const rootValue: EnvelopedRoot = {
        execute,
        subscribe,
        ...(shareKey
          ? { share: { key: shareKey, member: { socket: ctx.extra.socket, id }, resuming: resume.resuming } }
          : {}),
      };
      const contextValue = await contextFactory();
      // Counted last, once nothing before `subscribe` can fail: `subscribe` releases it.
      if (
        named !== undefined &&
        isMemberOf(viewer, named) &&
        selectedOperation(document, payload.operationName)?.operation === 'subscription'
      ) {
        const refused = await deps.quotas.openSubscription(named);
        if (refused) return [refused];
        rootValue.countedOrg = named;
      }
      // Tracing on: the operation's span, a child of `extensions.traceparent` when the caller sent one
      // (none when it starts a new trace the sampler leaves out).
      rootValue.span = startSocketOperationSpan(payload.extensions, document, payload.operationName);
      return {
        schema,
        document,
        operationName: payload.operationName,
        variableValues: payload.variables,
        contextValue,
        rootValue,
      };
    },
    execute: (args) => {
      const root = args.rootValue as EnvelopedRoot;
      return root.span ? runInSocketOperationSpan(root.span, true, () => root.execute(args)) : root.execute(args);
    },
    subscribe: async (args) => {
      const root = args.rootValue as EnvelopedRoot;
      const context = args.contextValue as Context;
      const countedOrg = root.countedOrg;
      // The real subscribe runs for every subscriber, so authorization is never shared.
      let result: Awaited<ReturnType<typeof root.subscribe>>;
      try {
        result = await (root.span
          ? runInSocketOperationSpan(root.span, false, () => root.subscribe(args))
          : root.subscribe(args));
      } catch (error) {
        if (countedOrg !== undefined) deps.quotas.closeSubscription(countedOrg);
        throw error;
      }
      if (!isAsyncIterable(result)) {
        if (countedOrg !== undefined) deps.quotas.closeSubscription(countedOrg);
        return refusalAsError(result);
      }
      metrics.activeSubscriptions.inc();
      const ended =
        countedOrg === undefined
          ? decrementActive
          : () => {
              decrementActive();
              deps.quotas.closeSubscription(countedOrg);
            };
      const withCursor = withCursors(result, context);
      if (!root.share) return onEnd(withCursor, ended);
      // The member reports its own end: no EndWatcher (and its per-`next` closures) around it.
      const stream = groups.join(root.share.key, root.share.member, withCursor, context, root.share.resuming, ended);
      if (!root.share.resuming) {
        // graphql-ws keeps these args until the subscription ends, but a grouped member that is not
        // catching up never executes: the group runs on its first member's context. Dropping this
        // member's context frees it and what hangs off it (Pothos' per-request auth caches, scope
        // loaders): ~3 KB per subscribed socket (bench/results/PROFILE.md).
        args.contextValue = undefined;
        args.rootValue = undefined;
      }
      return stream;
    },
    onError(_ctx, _id, _payload, errors) {
      logger.debug({ errors: errors.map((error) => error.message) }, 'subscribe refused');
    },
  };
}

/**
 * A refusal as graphql-ws sends it: the same code and extensions as over HTTP, without the HTTP status
 * and headers (meaningless on a socket).
 */
function socketError(error: GraphQLError): GraphQLError {
  const { http: _http, ...extensions } = error.extensions;
  return new GraphQLError(error.message, { extensions });
}

/**
 * Whether the subscription resumes (`after` set on its root field), and the variables that identify
 * its shared group: without the cursor, so resuming subscribers end up in the same group.
 */
export function resumeArgument(
  document: DocumentNode,
  variables: Record<string, unknown> | null | undefined,
): { resuming: boolean; keyVariables: Record<string, unknown> | null | undefined } {
  for (const definition of document.definitions) {
    if (definition.kind !== Kind.OPERATION_DEFINITION || definition.operation !== 'subscription') continue;
    for (const selection of definition.selectionSet.selections) {
      if (selection.kind !== Kind.FIELD) continue;
      const after = selection.arguments?.find((argument) => argument.name.value === 'after');
      if (!after) continue;
      if (after.value.kind === Kind.VARIABLE) {
        const name = after.value.name.value;
        const value = variables?.[name];
        const { [name]: _cursor, ...rest } = variables ?? {};
        return { resuming: value != null, keyVariables: rest };
      }
      return { resuming: after.value.kind !== Kind.NULL, keyVariables: variables };
    }
  }
  return { resuming: false, keyVariables: variables };
}
