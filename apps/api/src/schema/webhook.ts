import { isMemberOf } from '@herald/auth';
import { WEBHOOK_EVENT_TYPES } from '@herald/contracts';
import {
  createWebhookAttemptsLoader,
  deleteWebhookEndpoint,
  findWebhookDeliveryById,
  findWebhookEndpointById,
  insertWebhookEndpoint,
  listWebhookDeliveries,
  listWebhookEndpointsByOrg,
  replayWebhookDelivery,
  rotateWebhookSecret,
  type WebhookAttempt,
  type WebhookAttemptsLoader,
  type WebhookDelivery,
  type WebhookEndpoint,
} from '@herald/db';
import { checkWebhookUrl } from '@herald/webhook-engine/url-policy';
import { generateWebhookSecret } from '@herald/webhooks';
import type { Context } from '../context.js';
import { BadUserInputError, NotFoundError } from '../errors.js';
import { builder } from './builder.js';
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, resolveSeqConnection } from './seq-connection.js';

const MAX_ENDPOINTS_PER_ORG = 50;
/** How long the secrets in use keep signing beside a new one after a rotation (issue 4: 24 h). */
const DEFAULT_ROTATION_GRACE_SECONDS = 24 * 3_600;
const MAX_ROTATION_GRACE_SECONDS = 7 * 24 * 3_600;

export const WebhookDeliveryStatusEnum = builder.enumType('WebhookDeliveryStatus', {
  values: {
    PENDING: { value: 'PENDING', description: 'Not delivered yet; an attempt is due at `nextAttemptAt`.' },
    SUCCEEDED: { value: 'SUCCEEDED', description: 'The receiver answered 2xx.' },
    DEAD: { value: 'DEAD', description: 'Retries ran out (WEBHOOK_RETRY_HORIZON); parked as a dead letter.' },
    SKIPPED: { value: 'SKIPPED', description: 'Recorded while the endpoint was disabled; never sent.' },
  } as const,
});

export const WebhookAttemptRef = builder.objectRef<WebhookAttempt>('WebhookAttempt').implement({
  description: 'One HTTP attempt of a delivery.',
  fields: (t) => ({
    at: t.field({ type: 'DateTime', resolve: (attempt) => attempt.at }),
    statusCode: t.exposeInt('status_code', {
      nullable: true,
      description: 'The HTTP status; null when no response arrived (timeout, connection error, refused address).',
    }),
    durationMs: t.exposeInt('duration_ms'),
    error: t.exposeString('error', { nullable: true, description: 'Why the attempt failed; null on success.' }),
  }),
});

export const WebhookDeliveryRef = builder.objectRef<WebhookDelivery>('WebhookDelivery').implement({
  description: 'One event sent to one endpoint, with every attempt.',
  fields: (t) => ({
    id: t.exposeID('id'),
    eventId: t.exposeID('event_id'),
    eventType: t.exposeString('event_type'),
    status: t.field({ type: WebhookDeliveryStatusEnum, resolve: (delivery) => delivery.status }),
    attempts: t.field({
      type: [WebhookAttemptRef],
      description: 'Oldest first.',
      resolve: (delivery, _args, context) => attemptsLoader(context).load(delivery.id),
    }),
    nextAttemptAt: t.field({
      type: 'DateTime',
      nullable: true,
      description: 'When the next attempt is due; null once SUCCEEDED or DEAD.',
      resolve: (delivery) => (delivery.status === 'PENDING' ? delivery.next_attempt_at : null),
    }),
    createdAt: t.field({ type: 'DateTime', resolve: (delivery) => delivery.created_at }),
  }),
});

const WebhookDeliveryConnection = builder.connectionObject(
  { type: WebhookDeliveryRef, name: 'WebhookDeliveryConnection' },
  { name: 'WebhookDeliveryEdge' },
);

/** An endpoint; only ever handed to members of its organisation, so its fields need no further check. */
export const WebhookEndpointRef = builder.objectRef<WebhookEndpoint>('WebhookEndpoint').implement({
  description: 'A receiver URL of an organisation and the event types it receives.',
  fields: (t) => ({
    id: t.exposeID('id'),
    orgId: t.exposeID('org_id'),
    url: t.exposeString('url'),
    eventTypes: t.exposeStringList('event_types'),
    createdAt: t.field({ type: 'DateTime', resolve: (endpoint) => endpoint.created_at }),
    deliveries: t.field({
      type: WebhookDeliveryConnection,
      description: 'Deliveries to this endpoint, newest first.',
      args: {
        first: t.arg.int({ description: `Page size, at most ${MAX_PAGE_SIZE}. @default ${DEFAULT_PAGE_SIZE}` }),
        after: t.arg.string(),
        status: t.arg({ type: WebhookDeliveryStatusEnum, description: 'Only deliveries in this state.' }),
      },
      resolve: (endpoint, args, context) =>
        resolveSeqConnection<WebhookDelivery>('delivery', args, (page) =>
          listWebhookDeliveries(context.db, { endpointId: endpoint.id, status: args.status, ...page }),
        ),
    }),
  }),
});

const CreateWebhookEndpointInput = builder.inputType('CreateWebhookEndpointInput', {
  fields: (t) => ({
    orgId: t.id({ required: true }),
    url: t.string({
      required: true,
      description: 'http(s) URL; link-local, and unless allowed, loopback and private addresses are refused.',
    }),
    eventTypes: t.stringList({ required: true, description: `Any of: ${WEBHOOK_EVENT_TYPES.join(', ')}.` }),
  }),
});

const CreateWebhookEndpointPayload = builder
  .objectRef<{ endpoint: WebhookEndpoint; secret: string }>('CreateWebhookEndpointPayload')
  .implement({
    fields: (t) => ({
      endpoint: t.field({ type: WebhookEndpointRef, resolve: (payload) => payload.endpoint }),
      secret: t.exposeString('secret', {
        description: 'The signing secret (`whsec_…`). Shown only here: store it now.',
      }),
    }),
  });

const RotateWebhookSecretPayload = builder
  .objectRef<{ endpoint: WebhookEndpoint; secret: string }>('RotateWebhookSecretPayload')
  .implement({
    fields: (t) => ({
      endpoint: t.field({ type: WebhookEndpointRef, resolve: (payload) => payload.endpoint }),
      secret: t.exposeString('secret', { description: 'The new signing secret. Shown only here: store it now.' }),
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

builder.mutationFields((t) => ({
  createWebhookEndpoint: t.field({
    type: CreateWebhookEndpointPayload,
    description: 'Registers a receiver URL. The signing secret is returned once, here.',
    authScopes: (_root, args) => ({ viewer: true, orgMember: String(args.input.orgId) }),
    args: { input: t.arg({ type: CreateWebhookEndpointInput, required: true }) },
    resolve: async (_root, { input }, context) => {
      const orgId = String(input.orgId);
      const eventTypes = [...new Set(input.eventTypes)];
      const unknown = eventTypes.filter((type) => !(WEBHOOK_EVENT_TYPES as readonly string[]).includes(type));
      if (eventTypes.length === 0 || unknown.length > 0) {
        throw new BadUserInputError(
          `eventTypes must list one or more of ${WEBHOOK_EVENT_TYPES.join(', ')}` +
            (unknown.length > 0 ? `; unknown: ${unknown.join(', ')}` : ''),
          'eventTypes',
        );
      }
      const checked = await checkWebhookUrl(input.url.trim(), context.webhooks);
      if ('refused' in checked) throw new BadUserInputError(`url refused: ${checked.refused}`, 'url');
      const existing = await listWebhookEndpointsByOrg(context.db, orgId);
      if (existing.length >= MAX_ENDPOINTS_PER_ORG) {
        throw new BadUserInputError(`an organisation may have at most ${MAX_ENDPOINTS_PER_ORG} webhook endpoints`);
      }
      const secret = generateWebhookSecret();
      const endpoint = await insertWebhookEndpoint(context.db, { orgId, url: checked.url, eventTypes, secret });
      return { endpoint, secret };
    },
  }),
  rotateWebhookSecret: t.withAuth({ viewer: true }).field({
    type: RotateWebhookSecretPayload,
    description:
      'Issues a new signing secret. The secrets in use keep signing beside it for the grace period, so ' +
      'deliveries carry one `v1=` per secret until the receiver has switched over.',
    args: {
      id: t.arg.id({ required: true }),
      gracePeriodSeconds: t.arg.int({
        description: `How long the current secret keeps signing, 0 to ${MAX_ROTATION_GRACE_SECONDS}. @default ${DEFAULT_ROTATION_GRACE_SECONDS} (24 h)`,
      }),
    },
    resolve: async (_root, args, context) => {
      const graceSeconds = args.gracePeriodSeconds ?? DEFAULT_ROTATION_GRACE_SECONDS;
      if (graceSeconds < 0 || graceSeconds > MAX_ROTATION_GRACE_SECONDS) {
        throw new BadUserInputError(
          `gracePeriodSeconds must be between 0 and ${MAX_ROTATION_GRACE_SECONDS}`,
          'gracePeriodSeconds',
        );
      }
      const endpoint = await findOwnEndpoint(context, String(args.id));
      if (!endpoint) throw new NotFoundError('Webhook endpoint');
      const secret = generateWebhookSecret();
      await rotateWebhookSecret(context.db, { endpointId: endpoint.id, secret, graceMs: graceSeconds * 1_000 });
      return { endpoint, secret };
    },
  }),
  deleteWebhookEndpoint: t.withAuth({ viewer: true }).field({
    type: 'Boolean',
    description: 'Deletes an endpoint with its deliveries; nothing more is sent to it.',
    args: { id: t.arg.id({ required: true }) },
    resolve: async (_root, args, context) => {
      if (!(await deleteWebhookEndpoint(context.db, String(args.id), context.viewer.orgs))) {
        throw new NotFoundError('Webhook endpoint');
      }
      return true;
    },
  }),
  replayWebhookDelivery: t.withAuth({ viewer: true }).field({
    type: WebhookDeliveryRef,
    description:
      'Sends a delivery again (a dead letter, or one that succeeded) with the same event id, with a fresh ' +
      'retry horizon. Its attempt history is kept.',
    args: { id: t.arg.id({ required: true }) },
    resolve: async (_root, args, context) => {
      const delivery = await findWebhookDeliveryById(context.db, String(args.id));
      if (!delivery || !isMemberOf(context.viewer, delivery.org_id)) throw new NotFoundError('Webhook delivery');
      const replayed = await replayWebhookDelivery(context.db, delivery.id);
      if (!replayed) throw new NotFoundError('Webhook delivery');
      return replayed;
    },
  }),
}));

/** The endpoint when it exists and the viewer is a member of its organisation; else undefined. */
async function findOwnEndpoint(context: Context, id: string): Promise<WebhookEndpoint | undefined> {
  const endpoint = await findWebhookEndpointById(context.db, id);
  return endpoint && isMemberOf(context.viewer, endpoint.org_id) ? endpoint : undefined;
}

/** One attempts loader per request (the context object), so no cached attempt outlives it. */
const attemptsLoaders = new WeakMap<Context, WebhookAttemptsLoader>();

function attemptsLoader(context: Context): WebhookAttemptsLoader {
  let loader = attemptsLoaders.get(context);
  if (!loader) {
    loader = createWebhookAttemptsLoader(context.db);
    attemptsLoaders.set(context, loader);
  }
  return loader;
}
