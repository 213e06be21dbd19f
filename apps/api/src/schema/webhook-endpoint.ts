import { isMemberOf } from '@herald/auth';
import {
  createEndpointSuccessRateLoader,
  DEFAULT_SUCCESS_RATE_ATTEMPTS,
  type EndpointSuccessRateLoader,
  findWebhookEndpointById,
  findWebhookFifoHead,
  listWebhookDeliveryLog,
  listWebhookEndpointsByOrg,
  type WebhookDelivery,
  type WebhookEndpoint,
} from '@herald/db';
import type { Context } from '../context.js';
import { BadUserInputError } from '../errors.js';
import { builder } from './builder.js';
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, resolveSeqConnection } from './seq-connection.js';
import { WebhookDeliveryConnection } from './webhook-delivery.js';
import { WebhookDeliveryStatusEnum } from './webhook-delivery-status.js';
import { WebhookEndpointOrderingEnum } from './webhook-endpoint-ordering.js';
import { WebhookEndpointStatusEnum } from './webhook-endpoint-status.js';
import { WebhookFifoHeadRef } from './webhook-fifo-head.js';

/** Longest event type or event id accepted as a delivery-log filter. */
const MAX_FILTER_CHARS = 200;
const MAX_SUCCESS_RATE_ATTEMPTS = 1_000;

/** An endpoint; only ever handed to members of its organisation, so its fields need no further check. */
export const WebhookEndpointRef = builder.objectRef<WebhookEndpoint>('WebhookEndpoint').implement({
  description: 'A receiver URL of an organisation and the event types it receives.',
  fields: (t) => ({
    id: t.exposeID('id'),
    orgId: t.exposeID('org_id'),
    url: t.exposeString('url'),
    eventTypes: t.exposeStringList('event_types'),
    createdAt: t.field({ type: 'DateTime', resolve: (endpoint) => endpoint.created_at }),
    rateLimitPerSecond: t.int({
      nullable: true,
      description:
        'Attempts per second at most, across all dispatchers (null: no limit); deliveries over it wait, never fail.',
      resolve: (endpoint) => endpoint.rate_limit_per_second ?? null,
    }),
    status: t.field({ type: WebhookEndpointStatusEnum, resolve: (endpoint) => endpoint.status }),
    ordering: t.field({ type: WebhookEndpointOrderingEnum, resolve: (endpoint) => endpoint.ordering }),
    fifoHead: t.field({
      type: WebhookFifoHeadRef,
      nullable: true,
      description:
        'For a FIFO endpoint, the delivery at the head of its line and how many wait behind it (a head that keeps ' +
        'failing holds them all back); null when nothing is pending or the endpoint is unordered.',
      resolve: (endpoint, _args, context) =>
        endpoint.ordering === 'FIFO' ? findWebhookFifoHead(context.db, endpoint.id) : null,
    }),
    disabledAt: t.field({ type: 'DateTime', nullable: true, resolve: (endpoint) => endpoint.disabled_at }),
    disabledReason: t.exposeString('disabled_reason', {
      nullable: true,
      description: "Why it is disabled: an operator's reason, `410 Gone`, or failing for WEBHOOK_DISABLE_AFTER.",
    }),
    failingSince: t.field({
      type: 'DateTime',
      nullable: true,
      description: 'First failed attempt of the current failure streak; null after a success or when enabled.',
      resolve: (endpoint) => endpoint.failing_since,
    }),
    pausedUntil: t.field({
      type: 'DateTime',
      nullable: true,
      description: 'No attempt before this: the receiver asked to slow down (429/503 with Retry-After).',
      resolve: (endpoint) => endpoint.paused_until,
    }),
    successRate: t.float({
      nullable: true,
      description:
        'Share of the latest attempts to this endpoint that got a 2xx, from 0 to 1; null when it has no attempts.',
      args: {
        lastAttempts: t.arg.int({
          description: `How many of the latest attempts to count, 1 to ${MAX_SUCCESS_RATE_ATTEMPTS}. @default ${DEFAULT_SUCCESS_RATE_ATTEMPTS}`,
        }),
      },
      resolve: async (endpoint, args, context) => {
        const lastAttempts = args.lastAttempts ?? DEFAULT_SUCCESS_RATE_ATTEMPTS;
        if (lastAttempts < 1 || lastAttempts > MAX_SUCCESS_RATE_ATTEMPTS) {
          throw new BadUserInputError(
            `lastAttempts must be between 1 and ${MAX_SUCCESS_RATE_ATTEMPTS}`,
            'lastAttempts',
          );
        }
        const rate = await successRateLoader(context, lastAttempts).load(endpoint.id);
        return rate.attempts === 0 ? null : rate.succeeded / rate.attempts;
      },
    }),
    deliveries: t.field({
      type: WebhookDeliveryConnection,
      description: 'The delivery log of this endpoint, newest first; every filter given must hold.',
      args: {
        first: t.arg.int({ description: `Page size, at most ${MAX_PAGE_SIZE}. @default ${DEFAULT_PAGE_SIZE}` }),
        after: t.arg.string(),
        status: t.arg({ type: WebhookDeliveryStatusEnum, description: 'Only deliveries in this state.' }),
        eventType: t.arg.string({ description: 'Only deliveries of this event type, e.g. `post.published`.' }),
        eventId: t.arg.id({ description: 'Only deliveries of this event (`evt_…`).' }),
        createdAfter: t.arg({ type: 'DateTime', description: 'Only deliveries created at or after this instant.' }),
        createdBefore: t.arg({ type: 'DateTime', description: 'Only deliveries created before this instant.' }),
      },
      resolve: (endpoint, args, context) => {
        const eventId = args.eventId == null ? null : String(args.eventId);
        for (const [name, value] of [
          ['eventType', args.eventType],
          ['eventId', eventId],
        ] as const) {
          if (value != null && value.length > MAX_FILTER_CHARS) {
            throw new BadUserInputError(`${name} must be at most ${MAX_FILTER_CHARS} characters`, name);
          }
        }
        if (args.createdAfter && args.createdBefore && args.createdAfter > args.createdBefore) {
          throw new BadUserInputError('createdAfter must not be later than createdBefore', 'createdAfter');
        }
        return resolveSeqConnection<WebhookDelivery>('delivery', args, (page) =>
          listWebhookDeliveryLog(context.db, {
            endpointId: endpoint.id,
            status: args.status,
            eventType: args.eventType,
            eventId,
            createdAfter: args.createdAfter,
            createdBefore: args.createdBefore,
            ...page,
          }),
        );
      },
    }),
  }),
});

builder.queryFields((t) => ({
  webhookEndpoints: t.field({
    type: [WebhookEndpointRef],
    description: "An organisation's webhook endpoints, oldest first.",
    authScopes: (_root, args) => ({ viewer: true, orgMember: String(args.orgId) }),
    args: { orgId: t.arg.id({ required: true }) },
    resolve: (_root, args, context) => listWebhookEndpointsByOrg(context.db, String(args.orgId)),
  }),
  webhookEndpoint: t.withAuth({ viewer: true }).field({
    type: WebhookEndpointRef,
    nullable: true,
    description: "An endpoint by id; null when it does not exist or belongs to an organisation you're not in.",
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, args, context) => findOwnEndpoint(context, String(args.id)),
  }),
}));

/** The endpoint when it exists and the viewer is a member of its organisation; else undefined. */
export async function findOwnEndpoint(context: Context, id: string): Promise<WebhookEndpoint | undefined> {
  const endpoint = await findWebhookEndpointById(context.db, id);
  return endpoint && isMemberOf(context.viewer, endpoint.org_id) ? endpoint : undefined;
}

/** Per request and window size: the success rates of every endpoint of a list in one query. */
const successRateLoaders = new WeakMap<Context, Map<number, EndpointSuccessRateLoader>>();

function successRateLoader(context: Context, lastAttempts: number): EndpointSuccessRateLoader {
  let byWindow = successRateLoaders.get(context);
  if (!byWindow) {
    byWindow = new Map();
    successRateLoaders.set(context, byWindow);
  }
  let loader = byWindow.get(lastAttempts);
  if (!loader) {
    loader = createEndpointSuccessRateLoader(context.db, lastAttempts);
    byWindow.set(lastAttempts, loader);
  }
  return loader;
}
