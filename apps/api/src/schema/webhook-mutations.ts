import { isMemberOf } from '@herald/auth';
import type { EncryptionKeyring } from '@herald/config';
import { WEBHOOK_EVENT_TYPES } from '@herald/contracts';
import {
  countPendingTestWebhooks,
  deleteWebhookEndpoint,
  enableWebhookEndpoint,
  findWebhookDeliveryById,
  InvalidWebhookEventError,
  insertWebhookEndpoint,
  listActiveWebhookSecrets,
  listWebhookEndpointsByOrg,
  rotateWebhookSecret,
  SecretUnreadableError,
  setWebhookEndpointRateLimit,
} from '@herald/db';
import {
  disableWebhookEndpoint,
  giveUpWebhookDelivery,
  insertTestWebhook,
  replayDeadLetters,
  replayWebhookDelivery,
  setWebhookEndpointOrdering,
} from '@herald/webhook-engine';
import { checkWebhookUrl } from '@herald/webhook-engine/url-policy';
import { generateWebhookSecret, generateWebhookSigningKeyPair, isWebhookSigningKey } from '@herald/webhooks';
import type { Context } from '../context.js';
import { BadUserInputError, NotFoundError } from '../errors.js';
import { builder } from './builder.js';
import { CreateWebhookEndpointInput, MAX_RATE_LIMIT_PER_SECOND } from './create-webhook-endpoint-input.js';
import { CreateWebhookEndpointPayload } from './create-webhook-endpoint-payload.js';
import { RotateWebhookSecretPayload } from './rotate-webhook-secret-payload.js';
import { UpdateWebhookEndpointInput } from './update-webhook-endpoint-input.js';
import { WebhookDeliveryRef } from './webhook-delivery.js';
import { findOwnEndpoint, WebhookEndpointRef } from './webhook-endpoint.js';
import { parseFilterInput, reportInvalidWebhookEvent } from './webhook-event-input.js';
import { type SignatureScheme, WebhookSignatureSchemeEnum } from './webhook-signature-scheme.js';

const MAX_ENDPOINTS_PER_ORG = 50;
/** How long the secrets in use keep signing beside a new one after a rotation: 24 h by default. */
const DEFAULT_ROTATION_GRACE_SECONDS = 24 * 3_600;
const MAX_ROTATION_GRACE_SECONDS = 7 * 24 * 3_600;
/** `disabledReason` of an endpoint disabled over GraphQL without a reason. */
const DEFAULT_DISABLE_REASON = 'disabled by an operator';
const MAX_DISABLE_REASON_CHARS = 500;
/** Test events of one endpoint not yet delivered (or dead) at once; more is BAD_USER_INPUT. */
const MAX_PENDING_TEST_WEBHOOKS = 5;

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

/** A new signing credential: what Herald stores, and what the receiver is shown once. */
function newSigningCredential(scheme: SignatureScheme): { stored: string; shown: string } {
  if (scheme === 'ED25519') {
    const pair = generateWebhookSigningKeyPair();
    return { stored: pair.signingKey, shown: pair.publicKey };
  }
  const secret = generateWebhookSecret();
  return { stored: secret, shown: secret };
}

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
      const signatureScheme: SignatureScheme = args.signatureScheme ?? (await currentScheme(context, endpoint.id));
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
  giveUpWebhookDelivery: t.withAuth({ viewer: true }).field({
    type: WebhookDeliveryRef,
    description:
      'Stops retrying a PENDING delivery that has failed at least once: it becomes DEAD now, as at its retry ' +
      "horizon, with a `webhook.delivery.dead` event for the organisation's other endpoints. On a FIFO endpoint " +
      'the next delivery in line goes next. Refused while an attempt is in flight. It can be replayed later.',
    args: { id: t.arg.id({ required: true }) },
    resolve: async (_root, args, context) => {
      const result = await giveUpWebhookDelivery(context.db, {
        id: String(args.id),
        orgIds: context.viewer.orgs,
        // A bad body is our bug: the delivery is DEAD all the same, the event is not recorded (logged and counted).
        onInvalidEvent: (error) => reportInvalidWebhookEvent(context, error),
      });
      switch (result.outcome) {
        case 'dead':
          return result.delivery;
        case 'absent':
          throw new NotFoundError('Webhook delivery');
        case 'not-pending':
          throw new BadUserInputError(`only a PENDING delivery can be given up; this one is ${result.status}`, 'id');
        case 'not-attempted':
          throw new BadUserInputError('this delivery has not been attempted yet: there is nothing to give up on', 'id');
        case 'in-flight':
          throw new BadUserInputError(
            `an attempt of this delivery is in flight: give up on it once that attempt is recorded (at the latest ${result.leasedUntil.toISOString()})`,
            'id',
          );
      }
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
      return replayDeadLetters(context.db, { all: true, endpointId: endpoint.id });
    },
  }),
}));

/**
 * The scheme an endpoint signs with now: its newest secret's kind, read by opening it. A secret this
 * server cannot open (sealed under a key its HERALD_ENCRYPTION_KEYS lacks, a keyring that differs from the
 * dispatchers') is the operator's to fix: logged for them with the key id, and refused to the caller as
 * BAD_USER_INPUT naming the way on (say the scheme), never a 500.
 */
async function currentScheme(context: Context, endpointId: string): Promise<SignatureScheme> {
  let newest: string | undefined;
  try {
    [newest] = await listActiveWebhookSecrets(context.db, endpointId, keyringOf(context));
  } catch (error) {
    if (!(error instanceof SecretUnreadableError)) throw error;
    context.log.error({ endpointId, keyId: error.keyId, reason: error.reason }, error.message);
    throw new BadUserInputError(
      "this server cannot read the endpoint's current signing secret to tell its scheme: pass signatureScheme",
      'signatureScheme',
    );
  }
  return newest && isWebhookSigningKey(newest) ? 'ED25519' : 'HMAC_SHA256';
}

/** The keyring that seals signing secrets; createApp resolves it (configured, or embedded mode's generated one). */
function keyringOf(context: Context): EncryptionKeyring {
  const keyring = context.webhooks.encryptionKeys;
  if (!keyring) throw new Error('no HERALD_ENCRYPTION_KEYS keyring: the server was built without createApp');
  return keyring;
}
