import type { GraphQLSchema } from 'graphql';
import { builder } from './builder.js';
// One file per type. The order of these imports is the order the types and fields are registered in, which
// is their order (within each kind) in schema.graphql: a type or root field goes in the place it takes
// there. schema-drift.test.ts fails when it does not.
import './scalars.js';
import './user.js';
import './author.js';
import './post.js';
import './create-post-input.js';
import './webhook-endpoint-status.js';
import './webhook-endpoint-ordering.js';
import './webhook-delivery-status.js';
import './webhook-attempt.js';
import './webhook-delivery.js';
import './webhook-fifo-head.js';
import './webhook-endpoint.js';
import './webhook-signature-scheme.js';
import './create-webhook-endpoint-input.js';
import './update-webhook-endpoint-input.js';
import './create-webhook-endpoint-payload.js';
import './rotate-webhook-secret-payload.js';
import './webhook-mutations.js';
import './webhook-event-types.js';
import './organization-limit-overrides.js';
import './organization-limits.js';
import './organization-throttled.js';
import './organization-usage.js';
import './organization-limits-input.js';

/** The whole Herald schema. Printed to `apps/api/schema.graphql` by `pnpm schema:print`. */
export const schema: GraphQLSchema = builder.toSchema({ sortSchema: false });
