import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { type TypeCheck, TypeCompiler } from '@sinclair/typebox/compiler';
import {
  POST_PUBLISHED_EVENT,
  WEBHOOK_DELIVERY_DEAD_EVENT,
  WEBHOOK_ENDPOINT_DISABLED_EVENT,
  WEBHOOK_EVENT_TYPES,
  WEBHOOK_TEST_EVENT,
  type WebhookEventType,
} from './webhooks.js';

/*
 * The event catalog: every webhook event type Herald sends, with what it means, the JSON Schema of its
 * body and an example body. It is the one source for the `webhookEventTypes` query, the generated
 * docs/webhook-events.md, and the check every event built in TypeScript passes before it is recorded
 * (`checkWebhookEventBody`), the engine's operational events included. `post.published` is built by
 * the publish statement in SQL: tests that run that statement pin it to its schema, and the posts
 * table's constraints keep a row from holding what the schema refuses (`posts_tags_without_null`).
 *
 * Schemas are strict (`additionalProperties: false`): a field added to a body without being added here
 * is caught by those tests and by the check, so the published schema never lags behind the wire.
 * Receivers should still accept fields they do not know: Herald only ever adds fields.
 */

/** ISO 8601 in UTC with milliseconds, as Herald writes every timestamp in a body. */
const IsoUtc = (description: string) =>
  Type.String({ pattern: '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d{1,6})?Z$', description });

const EventId = Type.String({
  pattern: '^evt_[0-9a-f]{32}$',
  description: 'Event id (`evt_…`), equal to the `X-Webhook-ID` and `webhook-id` headers: deduplicate on it.',
});

/** The envelope every event shares: `{ id, type, created, data }`. */
function envelope<T extends string, D extends TSchema>(type: T, data: D) {
  return Type.Object(
    {
      id: EventId,
      type: Type.Literal(type, { description: 'The event type.' }),
      created: IsoUtc('When the event happened.'),
      data,
    },
    { additionalProperties: false, title: type },
  );
}

const strict = { additionalProperties: false } as const;

export const PostPublishedBody = envelope(
  POST_PUBLISHED_EVENT,
  Type.Object(
    {
      id: Type.String({ description: 'Post id.' }),
      orgId: Type.String({ description: 'Organisation of the post.' }),
      title: Type.String({ description: 'Title of the post.' }),
      tags: Type.Array(Type.String(), { description: 'Tags of the post, each once.' }),
      status: Type.Literal('PUBLISHED', { description: 'Always `PUBLISHED`.' }),
      publishedAt: IsoUtc('When the post was published.'),
      author: Type.Object(
        { id: Type.String({ description: 'User id.' }), name: Type.String({ description: 'Display name.' }) },
        { ...strict, description: 'Who wrote the post.' },
      ),
    },
    { ...strict, description: 'The published post, as the GraphQL API shows it.' },
  ),
);

export const WebhookTestBody = envelope(
  WEBHOOK_TEST_EVENT,
  Type.Object(
    {
      endpointId: Type.String({ description: 'The endpoint the test was sent to (`we_…`).' }),
      message: Type.String({ description: 'A fixed sentence for humans reading their receiver logs.' }),
    },
    strict,
  ),
);

export const WebhookEndpointDisabledBody = envelope(
  WEBHOOK_ENDPOINT_DISABLED_EVENT,
  Type.Object(
    {
      endpointId: Type.String({ description: 'The endpoint that was disabled (never the receiving one).' }),
      url: Type.String({
        description:
          'Its URL; when Herald disabled it, the URL that answered 410 or kept failing (its URL unless it was changed while those attempts were in flight).',
      }),
      reason: Type.String({ description: "Why: an operator's reason, `410 Gone`, or failing for too long." }),
      disabledAt: IsoUtc('When it was disabled.'),
    },
    strict,
  ),
);

export const WebhookDeliveryDeadBody = envelope(
  WEBHOOK_DELIVERY_DEAD_EVENT,
  Type.Object(
    {
      deliveryId: Type.String({ description: 'The delivery that ran out of retries or was given up (`del_…`).' }),
      endpointId: Type.String({ description: 'Its endpoint (never the receiving one).' }),
      eventId: Type.String({ description: 'The event it carried (`evt_…`).' }),
      eventType: Type.String({ description: 'That event’s type.' }),
      attempts: Type.Integer({ minimum: 1, description: 'Attempts made.' }),
      lastError: Type.Union([Type.String(), Type.Null()], { description: 'Why the last attempt failed.' }),
    },
    strict,
  ),
);

export type PostPublishedWebhookEvent = Static<typeof PostPublishedBody>;
export type WebhookTestEvent = Static<typeof WebhookTestBody>;
export type WebhookEndpointDisabledEvent = Static<typeof WebhookEndpointDisabledBody>;
export type WebhookDeliveryDeadEvent = Static<typeof WebhookDeliveryDeadBody>;

/** One entry of the catalog. */
export interface WebhookEventDefinition {
  type: WebhookEventType;
  /** What happened when this event is sent, in a sentence or two. */
  description: string;
  /** JSON Schema (draft 2020-12 compatible) of the whole body; `JSON.stringify` gives the published form. */
  schema: TSchema;
  /** A body as Herald sends it; it validates against `schema` (event-catalog.test.ts). */
  example: unknown;
}

const EXAMPLE_CREATED = '2026-11-28T09:30:00.000Z';

/** Every event type, in the order of {@link WEBHOOK_EVENT_TYPES}. */
export const WEBHOOK_EVENT_CATALOG: readonly WebhookEventDefinition[] = [
  {
    type: POST_PUBLISHED_EVENT,
    description:
      'A draft post was published. Sent once per publication to every endpoint of the organisation that selects it.',
    schema: PostPublishedBody,
    example: {
      id: 'evt_5f0c6a3e2b8d4c1f9a7e6d5c4b3a2910',
      type: POST_PUBLISHED_EVENT,
      created: EXAMPLE_CREATED,
      data: {
        id: 'post_01',
        orgId: 'org_acme',
        title: 'Quarterly results',
        tags: ['finance', 'urgent'],
        status: 'PUBLISHED',
        publishedAt: EXAMPLE_CREATED,
        author: { id: 'user_42', name: 'Ada' },
      },
    } satisfies PostPublishedWebhookEvent,
  },
  {
    type: WEBHOOK_TEST_EVENT,
    description:
      '`sendTestWebhook` was called for this endpoint: sent to that endpoint only, whatever its event types and filter.',
    schema: WebhookTestBody,
    example: {
      id: 'evt_0a1b2c3d4e5f60718293a4b5c6d7e8f9',
      type: WEBHOOK_TEST_EVENT,
      created: EXAMPLE_CREATED,
      data: {
        endpointId: 'we_3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a87',
        message: 'A test event sent from Herald: your receiver is reachable.',
      },
    } satisfies WebhookTestEvent,
  },
  {
    type: WEBHOOK_ENDPOINT_DISABLED_EVENT,
    description:
      'Another endpoint of the organisation was disabled, by an operator or by Herald (410 Gone, or every attempt failing for WEBHOOK_DISABLE_AFTER). Never sent to the disabled endpoint itself.',
    schema: WebhookEndpointDisabledBody,
    example: {
      id: 'evt_9e8d7c6b5a4f3e2d1c0b9a8776655443',
      type: WEBHOOK_ENDPOINT_DISABLED_EVENT,
      created: EXAMPLE_CREATED,
      data: {
        endpointId: 'we_11223344556677889900aabbccddeeff',
        url: 'https://hooks.example.com/herald',
        reason: 'the receiver answered 410 Gone',
        disabledAt: EXAMPLE_CREATED,
      },
    } satisfies WebhookEndpointDisabledEvent,
  },
  {
    type: WEBHOOK_DELIVERY_DEAD_EVENT,
    description:
      'A delivery to another endpoint of the organisation ran out of retries (WEBHOOK_RETRY_HORIZON), or was given up by hand (`giveUpWebhookDelivery`), and is now DEAD. Never sent to that endpoint itself.',
    schema: WebhookDeliveryDeadBody,
    example: {
      id: 'evt_abcdefabcdefabcdefabcdefabcdef01',
      type: WEBHOOK_DELIVERY_DEAD_EVENT,
      created: EXAMPLE_CREATED,
      data: {
        deliveryId: 'del_0f1e2d3c4b5a69788796a5b4c3d2e1f0',
        endpointId: 'we_11223344556677889900aabbccddeeff',
        eventId: 'evt_5f0c6a3e2b8d4c1f9a7e6d5c4b3a2910',
        eventType: POST_PUBLISHED_EVENT,
        attempts: 12,
        lastError: 'HTTP 503',
      },
    } satisfies WebhookDeliveryDeadEvent,
  },
];

const BY_TYPE = new Map<string, WebhookEventDefinition>(WEBHOOK_EVENT_CATALOG.map((entry) => [entry.type, entry]));

/** The catalog entry of a type; undefined for a type Herald does not send. */
export function webhookEventDefinition(type: string): WebhookEventDefinition | undefined {
  return BY_TYPE.get(type);
}

/** At most this many problems are reported per body: enough to fix a builder, bounded for a log line. */
const MAX_REPORTED_ERRORS = 5;

/**
 * Validators compiled on first use per type (TypeBox's compiler): about 0.1–0.2 µs of CPU per check of a
 * parsed body, 0.6–1.2 µs with `JSON.parse` of the text (`node --import tsx bench/micro/event-check-micro.ts`).
 */
const compiled = new Map<string, TypeCheck<TSchema>>();

function validatorOf(entry: WebhookEventDefinition): TypeCheck<TSchema> {
  let check = compiled.get(entry.type);
  if (!check) {
    check = TypeCompiler.Compile(entry.schema);
    compiled.set(entry.type, check);
  }
  return check;
}

/**
 * Checks an event body against its type's schema.
 * @param body the body, parsed or as the JSON text that will be signed and sent
 * @returns undefined when it is valid; otherwise what is wrong, one line per problem (at most 5), each
 *   naming the JSON pointer of the offending value
 */
export function checkWebhookEventBody(type: string, body: unknown): string[] | undefined {
  const entry = BY_TYPE.get(type);
  if (!entry) return [`unknown event type ${JSON.stringify(type)} (known: ${WEBHOOK_EVENT_TYPES.join(', ')})`];
  let value = body;
  if (typeof body === 'string') {
    try {
      value = JSON.parse(body);
    } catch {
      return ['the body is not JSON'];
    }
  }
  const check = validatorOf(entry);
  if (check.Check(value)) return undefined;
  const problems: string[] = [];
  for (const error of check.Errors(value)) {
    problems.push(`${error.path || '/'}: ${error.message}`);
    if (problems.length >= MAX_REPORTED_ERRORS) break;
  }
  return problems;
}
