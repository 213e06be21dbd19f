import { isMemberOf } from '@herald/auth';
import type { EncryptionKeyring } from '@herald/config';
import { WEBHOOK_EVENT_TYPES } from '@herald/contracts';
import {
  countPendingTestWebhooks,
  createEndpointSuccessRateLoader,
  createWebhookAttemptsLoader,
  DEFAULT_SUCCESS_RATE_ATTEMPTS,
  deleteWebhookEndpoint,
  disableWebhookEndpoint,
  type EndpointSuccessRateLoader,
  enableWebhookEndpoint,
  findWebhookDeliveryById,
  findWebhookEndpointById,
  findWebhookFifoHead,
  InvalidWebhookEventError,
  insertTestWebhook,
  insertWebhookEndpoint,
  listActiveWebhookSecrets,
  listWebhookDeliveryLog,
  listWebhookEndpointsByOrg,
  replayDeadWebhookDeliveries,
  replayWebhookDelivery,
  rotateWebhookSecret,
  setWebhookEndpointOrdering,
  setWebhookEndpointRateLimit,
  type WebhookAttempt,
  type WebhookAttemptsLoader,
  type WebhookDelivery,
  type WebhookEndpoint,
  type WebhookFifoHead,
} from '@herald/db';
import { checkWebhookUrl } from '@herald/webhook-engine/url-policy';
import { generateWebhookSecret, generateWebhookSigningKeyPair, isWebhookSigningKey } from '@herald/webhooks';
import type { Context } from '../context.js';
import { BadUserInputError, NotFoundError } from '../errors.js';
import { builder } from './builder.js';
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, resolveSeqConnection } from './seq-connection.js';
import { FILTER_INPUT_DESCRIPTION, parseFilterInput, reportInvalidWebhookEvent } from './webhook-event-input.js';

const MAX_ENDPOINTS_PER_ORG = 50;
/** How long the secrets in use keep signing beside a new one after a rotation: 24 h by default. */
const DEFAULT_ROTATION_GRACE_SECONDS = 24 * 3_600;
const MAX_ROTATION_GRACE_SECONDS = 7 * 24 * 3_600;
/** `disabledReason` of an endpoint disabled over GraphQL without a reason. */
const DEFAULT_DISABLE_REASON = 'disabled by an operator';
const MAX_DISABLE_REASON_CHARS = 500;
/** Longest event type or event id accepted as a delivery-log filter. */
const MAX_FILTER_CHARS = 200;
const MAX_SUCCESS_RATE_ATTEMPTS = 1_000;
/** Test events of one endpoint not yet delivered (or dead) at once; more is BAD_USER_INPUT. */
const MAX_PENDING_TEST_WEBHOOKS = 5;
/** Highest `rateLimitPerSecond` accepted: far above what one receiver takes, low enough to stay meaningful. */
const MAX_RATE_LIMIT_PER_SECOND = 10_000;

/** `rateLimitPerSecond` as given: a positive integer up to the maximum, or null (no limit). */
function checkRateLimit(value: number | null | undefined): number | null {
  if (value === null || value === undefined) return null;
  if (!Number.isInteger(value) || value < 1 || value > MAX_RATE_LIMIT_PER_SECOND) {
    throw new BadUserInputError(
      `rateLimitPerSecond must be an integer from 1 to ${MAX_RATE_LIMIT_PER_SECOND}, or null for no limit`,
      'rateLimitPerSecond',
    );
  }
  return value;
}

export const WebhookEndpointStatusEnum = builder.enumType('WebhookEndpointStatus', {
  values: {
    ENABLED: { value: 'ENABLED', description: 'Receives deliveries.' },
    DISABLED: {
      value: 'DISABLED',
      description: 'Receives nothing: events meanwhile are recorded as SKIPPED and not sent when it is enabled again.',
    },
  } as const,
});

export const WebhookEndpointOrderingEnum = builder.enumType('WebhookEndpointOrdering', {
  description: 'In what order an endpoint gets its deliveries.',
  values: {
    UNORDERED: {
      value: 'UNORDERED',
      description: 'Several deliveries at once, each retried on its own schedule: the fastest.',
    },
    FIFO: {
      value: 'FIFO',
      description:
        "Strictly in the order the organisation's events were committed, one at a time: a delivery is attempted only " +
        'once the one before it succeeded or went DEAD, so a failing delivery holds back those after it.',
    },
  } as const,
});

export const WebhookDeliveryStatusEnum = builder.enumType('WebhookDeliveryStatus', {
  values: {
    PENDING: {
      value: 'PENDING',
      description:
        'Not delivered yet; an attempt is due at `nextAttemptAt` (on a FIFO endpoint, once it heads the line).',
    },
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
    responseBody: t.exposeString('response_body', {
      nullable: true,
      description: "The first bytes (at most 1 KiB, as UTF-8 text) of the receiver's answer; null when none arrived.",
    }),
  }),
});

export const WebhookDeliveryRef = builder.objectRef<WebhookDelivery>('WebhookDelivery').implement({
  description: 'One event sent to one endpoint, with every attempt.',
  fields: (t) => ({
    id: t.exposeID('id'),
    eventId: t.exposeID('event_id'),
    eventType: t.exposeString('event_type'),
    endpointId: t.exposeID('endpoint_id'),
    status: t.field({ type: WebhookDeliveryStatusEnum, resolve: (delivery) => delivery.status }),
    attempts: t.field({
      type: [WebhookAttemptRef],
      description: 'Oldest first.',
      resolve: (delivery, _args, context) => attemptsLoader(context).load(delivery.id),
    }),
    nextAttemptAt: t.field({
      type: 'DateTime',
      nullable: true,
      description:
        "When the next attempt is due; null once SUCCEEDED or DEAD, and while waiting in a FIFO endpoint's line.",
      resolve: (delivery) => (delivery.status === 'PENDING' ? delivery.next_attempt_at : null),
    }),
    createdAt: t.field({ type: 'DateTime', resolve: (delivery) => delivery.created_at }),
  }),
});

const WebhookDeliveryConnection = builder.connectionObject(
  { type: WebhookDeliveryRef, name: 'WebhookDeliveryConnection' },
  { name: 'WebhookDeliveryEdge' },
);

const WebhookFifoHeadRef = builder.objectRef<WebhookFifoHead>('WebhookFifoHead').implement({
  description: "The head of a FIFO endpoint's line: the delivery every later one waits for.",
  fields: (t) => ({
    delivery: t.field({ type: WebhookDeliveryRef, resolve: (head) => head.delivery }),
    heldBack: t.exposeInt('heldBack', { description: 'Pending deliveries of the endpoint waiting behind it.' }),
  }),
});

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

type SignatureScheme = 'HMAC_SHA256' | 'ED25519';

const WebhookSignatureSchemeEnum = builder.enumType('WebhookSignatureScheme', {
  description: 'How deliveries to an endpoint are signed.',
  values: {
    HMAC_SHA256: {
      value: 'HMAC_SHA256',
      description:
        "A shared `whsec_…` secret: `X-Webhook-Signature` (Stripe's scheme) and `webhook-signature: v1,…` (Standard Webhooks).",
    },
    ED25519: {
      value: 'ED25519',
      description:
        'Asymmetric Standard Webhooks `webhook-signature: v1a,…`: Herald keeps the signing key, the receiver verifies with the `whpk_…` public key. No `X-Webhook-Signature`.',
    },
  } as const,
});

/** A new signing credential: what Herald stores, and what the receiver is shown once. */
function newSigningCredential(scheme: SignatureScheme): { stored: string; shown: string } {
  if (scheme === 'ED25519') {
    const pair = generateWebhookSigningKeyPair();
    return { stored: pair.signingKey, shown: pair.publicKey };
  }
  const secret = generateWebhookSecret();
  return { stored: secret, shown: secret };
}

interface SecretPayload {
  endpoint: WebhookEndpoint;
  secret: string;
  signatureScheme: SignatureScheme;
}

const CreateWebhookEndpointInput = builder.inputType('CreateWebhookEndpointInput', {
  fields: (t) => ({
    orgId: t.id({ required: true }),
    url: t.string({
      required: true,
      description: 'http(s) URL; link-local, and unless allowed, loopback and private addresses are refused.',
    }),
    eventTypes: t.stringList({ required: true, description: `Any of: ${WEBHOOK_EVENT_TYPES.join(', ')}.` }),
    signatureScheme: t.field({
      type: WebhookSignatureSchemeEnum,
      description: 'How deliveries are signed. @default HMAC_SHA256',
    }),
    filter: t.string({ description: FILTER_INPUT_DESCRIPTION }),
    rateLimitPerSecond: t.int({
      description: `Attempts per second at most, 1 to ${MAX_RATE_LIMIT_PER_SECOND}. @default null (no limit)`,
    }),
    ordering: t.field({
      type: WebhookEndpointOrderingEnum,
      description: 'In what order deliveries are made. @default UNORDERED',
    }),
  }),
});

const UpdateWebhookEndpointInput = builder.inputType('UpdateWebhookEndpointInput', {
  description: 'The settings to change; a field left out keeps its value.',
  fields: (t) => ({
    ordering: t.field({
      type: WebhookEndpointOrderingEnum,
      description:
        'FIFO orders the deliveries made from now on (those already pending keep no order among themselves); ' +
        'UNORDERED lets every waiting delivery go at once.',
    }),
  }),
});

const CreateWebhookEndpointPayload = builder.objectRef<SecretPayload>('CreateWebhookEndpointPayload').implement({
  fields: (t) => ({
    endpoint: t.field({ type: WebhookEndpointRef, resolve: (payload) => payload.endpoint }),
    secret: t.exposeString('secret', {
      description:
        'What the receiver verifies with: the signing secret (`whsec_…`), or for ED25519 the public key (`whpk_…`). ' +
        'Shown only here: store it now.',
    }),
    signatureScheme: t.field({ type: WebhookSignatureSchemeEnum, resolve: (payload) => payload.signatureScheme }),
  }),
});

const RotateWebhookSecretPayload = builder.objectRef<SecretPayload>('RotateWebhookSecretPayload').implement({
  fields: (t) => ({
    endpoint: t.field({ type: WebhookEndpointRef, resolve: (payload) => payload.endpoint }),
    secret: t.exposeString('secret', {
      description:
        'The new signing secret (`whsec_…`), or for ED25519 the new public key (`whpk_…`). Shown only here: store it now.',
    }),
    signatureScheme: t.field({ type: WebhookSignatureSchemeEnum, resolve: (payload) => payload.signatureScheme }),
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
      const filter = parseFilterInput(input.filter, eventTypes);
      const rateLimitPerSecond = checkRateLimit(input.rateLimitPerSecond);
      const checked = await checkWebhookUrl(input.url.trim(), context.webhooks);
      if ('refused' in checked) throw new BadUserInputError(`url refused: ${checked.refused}`, 'url');
      const existing = await listWebhookEndpointsByOrg(context.db, orgId);
      if (existing.length >= MAX_ENDPOINTS_PER_ORG) {
        throw new BadUserInputError(`an organisation may have at most ${MAX_ENDPOINTS_PER_ORG} webhook endpoints`);
      }
      const signatureScheme = input.signatureScheme ?? 'HMAC_SHA256';
      const { stored, shown } = newSigningCredential(signatureScheme);
      const endpoint = await insertWebhookEndpoint(context.db, {
        orgId,
        url: checked.url,
        eventTypes,
        secret: stored,
        keyring: keyringOf(context),
        filter,
        rateLimitPerSecond,
        ordering: input.ordering ?? 'UNORDERED',
      });
      return { endpoint, secret: shown, signatureScheme };
    },
  }),
  setWebhookEndpointRateLimit: t.withAuth({ viewer: true }).field({
    type: WebhookEndpointRef,
    description:
      'Sets the most attempts per second to an endpoint, across all dispatchers; null removes the limit. ' +
      'Deliveries over it are delayed, never failed.',
    args: {
      id: t.arg.id({ required: true }),
      rateLimitPerSecond: t.arg.int({ description: `1 to ${MAX_RATE_LIMIT_PER_SECOND}, or null for no limit.` }),
    },
    resolve: async (_root, args, context) => {
      const endpoint = await setWebhookEndpointRateLimit(context.db, {
        id: String(args.id),
        orgIds: context.viewer.orgs,
        rateLimitPerSecond: checkRateLimit(args.rateLimitPerSecond),
      });
      if (!endpoint) throw new NotFoundError('Webhook endpoint');
      return endpoint;
    },
  }),
  rotateWebhookSecret: t.withAuth({ viewer: true }).field({
    type: RotateWebhookSecretPayload,
    description:
      'Issues a new signing secret. The secrets in use keep signing beside it for the grace period, so ' +
      'deliveries carry one `v1=` per secret until the receiver has switched over.',
    args: {
      id: t.arg.id({ required: true }),
      signatureScheme: t.arg({
        type: WebhookSignatureSchemeEnum,
        description: 'Switch to this scheme (both sign during the grace period). @default the current one',
      }),
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
      const [newest] = await listActiveWebhookSecrets(context.db, endpoint.id, keyringOf(context));
      const signatureScheme: SignatureScheme =
        args.signatureScheme ?? (newest && isWebhookSigningKey(newest) ? 'ED25519' : 'HMAC_SHA256');
      const { stored, shown } = newSigningCredential(signatureScheme);
      await rotateWebhookSecret(context.db, {
        endpointId: endpoint.id,
        secret: stored,
        graceMs: graceSeconds * 1_000,
        keyring: keyringOf(context),
      });
      return { endpoint, secret: shown, signatureScheme };
    },
  }),
  updateWebhookEndpoint: t.withAuth({ viewer: true }).field({
    type: WebhookEndpointRef,
    description: "Changes an endpoint's settings.",
    args: {
      id: t.arg.id({ required: true }),
      input: t.arg({ type: UpdateWebhookEndpointInput, required: true }),
    },
    resolve: async (_root, { id, input }, context) => {
      let endpoint = await findOwnEndpoint(context, String(id));
      if (!endpoint) throw new NotFoundError('Webhook endpoint');
      if (input.ordering && input.ordering !== endpoint.ordering) {
        endpoint = await setWebhookEndpointOrdering(context.db, {
          id: endpoint.id,
          orgIds: context.viewer.orgs,
          ordering: input.ordering,
        });
        if (!endpoint) throw new NotFoundError('Webhook endpoint');
      }
      return endpoint;
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
  disableWebhookEndpoint: t.withAuth({ viewer: true }).field({
    type: WebhookEndpointRef,
    description:
      'Stops deliveries to an endpoint: events meanwhile are recorded as SKIPPED and never sent. Records a ' +
      "`webhook.endpoint.disabled` event for the organisation's other endpoints. Disabling a disabled endpoint " +
      'changes nothing.',
    args: {
      id: t.arg.id({ required: true }),
      reason: t.arg.string({
        description: `Shown as \`disabledReason\`, at most ${MAX_DISABLE_REASON_CHARS} characters. @default "${DEFAULT_DISABLE_REASON}"`,
      }),
    },
    resolve: async (_root, args, context) => {
      const reason = args.reason?.trim() || DEFAULT_DISABLE_REASON;
      if (reason.length > MAX_DISABLE_REASON_CHARS) {
        throw new BadUserInputError(`reason must be at most ${MAX_DISABLE_REASON_CHARS} characters`, 'reason');
      }
      const endpoint = await disableWebhookEndpoint(context.db, {
        id: String(args.id),
        orgIds: context.viewer.orgs,
        reason,
        // A bad body is our bug: the disable stands, the event is not recorded (logged and counted).
        onInvalidEvent: (error) => reportInvalidWebhookEvent(context, error),
      });
      if (!endpoint) throw new NotFoundError('Webhook endpoint');
      return endpoint;
    },
  }),
  enableWebhookEndpoint: t.withAuth({ viewer: true }).field({
    type: WebhookEndpointRef,
    description:
      'Resumes deliveries to an endpoint and resets its failure streak and any pause. Deliveries SKIPPED while ' +
      'it was disabled are not sent.',
    args: { id: t.arg.id({ required: true }) },
    resolve: async (_root, args, context) => {
      const endpoint = await enableWebhookEndpoint(context.db, String(args.id), context.viewer.orgs);
      if (!endpoint) throw new NotFoundError('Webhook endpoint');
      return endpoint;
    },
  }),
  sendTestWebhook: t.withAuth({ viewer: true }).field({
    type: WebhookDeliveryRef,
    description:
      'Sends a `webhook.test` event to this endpoint only (whatever its eventTypes), delivered and retried like ' +
      'any other; returns its delivery, whose status and attempts show the result. SKIPPED when the endpoint is ' +
      `disabled. At most ${MAX_PENDING_TEST_WEBHOOKS} may be pending per endpoint.`,
    args: { endpointId: t.arg.id({ required: true }) },
    resolve: async (_root, args, context) => {
      const endpoint = await findOwnEndpoint(context, String(args.endpointId));
      if (!endpoint) throw new NotFoundError('Webhook endpoint');
      if ((await countPendingTestWebhooks(context.db, endpoint.id)) >= MAX_PENDING_TEST_WEBHOOKS) {
        throw new BadUserInputError(
          `${MAX_PENDING_TEST_WEBHOOKS} test events to this endpoint are still pending: wait for them to be delivered`,
          'endpointId',
        );
      }
      try {
        return await insertTestWebhook(context.db, endpoint);
      } catch (error) {
        if (error instanceof InvalidWebhookEventError) reportInvalidWebhookEvent(context, error);
        throw error;
      }
    },
  }),
  replayDeadWebhookDeliveries: t.withAuth({ viewer: true }).field({
    type: 'Int',
    description:
      'Sends every DEAD delivery of the endpoint again, each with its own event id and a fresh retry horizon; ' +
      'returns how many. Refused while the endpoint is disabled (enable it first).',
    args: { endpointId: t.arg.id({ required: true }) },
    resolve: async (_root, args, context) => {
      const endpoint = await findOwnEndpoint(context, String(args.endpointId));
      if (!endpoint) throw new NotFoundError('Webhook endpoint');
      if (endpoint.status === 'DISABLED') {
        throw new BadUserInputError('the endpoint is disabled: enable it before replaying its dead deliveries');
      }
      return replayDeadWebhookDeliveries(context.db, endpoint.id);
    },
  }),
}));

/** The endpoint when it exists and the viewer is a member of its organisation; else undefined. */
/** The keyring that seals signing secrets; createApp resolves it (configured, or embedded mode's generated one). */
function keyringOf(context: Context): EncryptionKeyring {
  const keyring = context.webhooks.encryptionKeys;
  if (!keyring) throw new Error('no HERALD_ENCRYPTION_KEYS keyring: the server was built without createApp');
  return keyring;
}

async function findOwnEndpoint(context: Context, id: string): Promise<WebhookEndpoint | undefined> {
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
