import { isMemberOf } from '@herald/auth';
import { WEBHOOK_EVENT_CATALOG } from '@herald/contracts';
import { findWebhookEndpointById, setWebhookEndpointFilter } from '@herald/db';
import { NotFoundError } from '../errors.js';
import { builder } from './builder.js';
import { WebhookEndpointRef } from './webhook-endpoint.js';
import { FILTER_INPUT_DESCRIPTION, parseFilterInput } from './webhook-event-input.js';

/*
 * The event catalog over GraphQL (`webhookEventTypes`), and endpoint filters: the `filter` field of an
 * endpoint and `setWebhookEndpointFilter`. The catalog and the filter rules live in @herald/contracts
 * (event-catalog.ts, event-filter.ts); docs/webhook-events.md is generated from the same source.
 */

/** Every event type, published once per process (the catalog is constant). */
const CATALOG_JSON = WEBHOOK_EVENT_CATALOG.map((entry) => ({
  entry,
  schema: JSON.stringify(entry.schema),
  example: JSON.stringify(entry.example),
}));

const WebhookEventTypeRef = builder.objectRef<(typeof CATALOG_JSON)[number]>('WebhookEventType').implement({
  description: 'An event type Herald sends to webhook endpoints, with the JSON Schema of its body.',
  fields: (t) => ({
    name: t.string({ description: 'The type, e.g. `post.published`.', resolve: (item) => item.entry.type }),
    description: t.string({ resolve: (item) => item.entry.description }),
    schema: t.exposeString('schema', { description: 'JSON Schema of the whole body, as JSON text.' }),
    example: t.exposeString('example', { description: 'An example body, as JSON text.' }),
  }),
});

builder.queryField('webhookEventTypes', (t) =>
  t.withAuth({ viewer: true }).field({
    type: [WebhookEventTypeRef],
    description: 'Every event type an endpoint may select, with its body schema and an example.',
    resolve: () => CATALOG_JSON,
  }),
);

builder.objectField(WebhookEndpointRef, 'filter', (t) =>
  t.string({
    nullable: true,
    description:
      'JSON object the event body must contain for this endpoint to get the event (`webhook.test` aside); null: no filter.',
    resolve: (endpoint) => (endpoint.filter == null ? null : JSON.stringify(endpoint.filter)),
  }),
);

builder.mutationField('setWebhookEndpointFilter', (t) =>
  t.withAuth({ viewer: true }).field({
    type: WebhookEndpointRef,
    description:
      'Sets the filter on the event body (null removes it). It applies to the events not yet turned into ' +
      'deliveries: in practice, those published from now on. A filtered-out event makes no delivery for this endpoint.',
    args: {
      id: t.arg.id({ required: true }),
      filter: t.arg.string({ description: FILTER_INPUT_DESCRIPTION }),
    },
    resolve: async (_root, args, context) => {
      const endpoint = await findWebhookEndpointById(context.db, String(args.id));
      if (!endpoint || !isMemberOf(context.viewer, endpoint.org_id)) throw new NotFoundError('Webhook endpoint');
      const filter = parseFilterInput(args.filter, endpoint.event_types);
      const updated = await setWebhookEndpointFilter(context.db, endpoint.id, context.viewer.orgs, filter);
      if (!updated) throw new NotFoundError('Webhook endpoint');
      return updated;
    },
  }),
);
