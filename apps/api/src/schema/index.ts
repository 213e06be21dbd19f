import type { GraphQLSchema } from 'graphql';
import { builder } from './builder.js';
import './scalars.js';
import './user.js';
import './post.js';
import './webhook.js';
import './webhook-event-types.js';
import './organization-limits.js';

/** The whole Herald schema. Printed to `apps/api/schema.graphql` by `pnpm schema:print`. */
export const schema: GraphQLSchema = builder.toSchema({ sortSchema: false });
