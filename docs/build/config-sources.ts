import { EnvSchema as ApiEnvSchema } from '../../apps/api/src/env.js';
import { EnvSchema as DispatcherEnvSchema } from '../../apps/webhook-dispatcher/src/env.js';
import type { ConfigSource } from './config-reference.js';

/** Every app's environment schema, in the order docs/configuration.md lists them. */
export const CONFIG_SOURCES: readonly ConfigSource[] = [
  {
    app: 'api',
    title: 'API (`apps/api`, `pnpm start`)',
    intro:
      'The GraphQL server. Without `DATABASE_URL` it runs in embedded mode (PGlite in `HERALD_DATA_DIR`, pub/sub and ' +
      'the webhook dispatcher in-process); with `DATABASE_URL` and `REDIS_URL` in cluster mode.',
    schema: ApiEnvSchema,
  },
  {
    app: 'dispatcher',
    title: 'Webhook dispatcher (`apps/webhook-dispatcher`, cluster mode)',
    intro:
      'The worker that delivers webhooks in cluster mode (embedded and single mode run it inside the API, ' +
      "configured by the API's `WEBHOOK_*` variables). Give it the same `DATABASE_URL`, `REDIS_URL` and " +
      '`HERALD_REDIS_PREFIX` as the API.',
    schema: DispatcherEnvSchema,
  },
];
