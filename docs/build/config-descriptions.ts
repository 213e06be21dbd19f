/**
 * One line per environment variable, for docs/configuration.md. Keyed by variable name; a key
 * `<app>:<NAME>` (`api:PORT`) overrides the shared line for one app. A variable an app's schema has and
 * this map lacks is listed as undocumented and `pnpm docs:config` exits non-zero. Lines for variables
 * no schema has (yet) are harmless.
 */
export const VARIABLE_DESCRIPTIONS: Readonly<Record<string, string>> = {
  NODE_ENV:
    '`production` turns off GraphiQL and introspection by default and requires `https://` for `JWT_JWKS_URL`. Internal error details are shown only with `development` set, or in embedded mode when unset; single and cluster modes mask them when unset.',
  'dispatcher:NODE_ENV': 'Deployment environment: `production` in deployments.',
  LOG_LEVEL: 'Least severe log level written (JSON lines on stdout).',

  PORT: 'TCP port of GraphQL over HTTP and WebSocket (`/graphql`), `/health`, `/readiness` and `/metrics`.',
  'dispatcher:PORT': 'TCP port of the operations server: `/health`, `/readiness` and `/metrics`.',
  HOST: 'Address to listen on.',
  MAX_REQUEST_BODY_BYTES: 'Largest HTTP request body accepted; a larger one gets 413.',
  HTTP_FAST_PATH:
    'Answer `POST /graphql` JSON requests straight from node:http (same answers as Yoga, less CPU per request); `false` sends every request through Yoga.',
  SHUTDOWN_GRACE_MS:
    'On SIGTERM, how long in-flight work may take before the process exits (sockets are closed with 1012 at once so clients reconnect elsewhere).',

  SHUTDOWN_DRAIN_DELAY_MS:
    'After SIGTERM, how long `/readiness` answers 503 while the pod still accepts and serves, so load balancers stop sending before it stops accepting. Unset: 5000 (0 in embedded mode).',
  MAX_QUERY_COST:
    "Largest document cost accepted (graphql-armor's cost model); a costlier document is refused with `GRAPHQL_VALIDATION_FAILED`.",
  MAX_QUERY_DIRECTIVES: 'Most directives accepted in one document; more are refused with `GRAPHQL_VALIDATION_FAILED`.',
  'dispatcher:SHUTDOWN_GRACE_MS':
    'On SIGTERM, how long attempts in flight may finish before the process exits; an unfinished one is attempted again by another dispatcher.',
  DATABASE_URL:
    'PostgreSQL URL. Unset: embedded mode with PGlite in `HERALD_DATA_DIR` (one process only). Migrations run at start.',
  'dispatcher:DATABASE_URL': 'PostgreSQL URL: the same database as the API.',
  DATABASE_POOL_MAX: 'Most PostgreSQL connections this process opens.',
  DATABASE_QUERY_TIMEOUT_MS:
    'A PostgreSQL query unanswered for this long fails as `SERVICE_UNAVAILABLE` (a frozen server that keeps its connections open) and its connection is replaced; 0 waits for ever. Migrations are exempt. The dispatcher uses the same 30 s.',
  DATABASE_PREPARED_STATEMENTS:
    'Send queries with parameters as named prepared statements (parsed and planned once per connection). Set `false` behind a PgBouncer in transaction mode older than 1.21.',
  'dispatcher:DATABASE_PREPARED_STATEMENTS':
    "Send the engine's statements as named prepared statements (parsed once per connection: planning its record statement costs more than running it; the claim and the fan-out are functions that plan their statement once per connection either way). Set `false` behind a PgBouncer in transaction mode older than 1.21.",
  REDIS_URL:
    'Redis for pub/sub across pods and the webhook work stream: `redis://`, `rediss://`, `redis+sentinel://` or `redis+cluster://`. Needs `DATABASE_URL`; unset keeps pub/sub in memory (one pod).',
  'dispatcher:REDIS_URL':
    'The Redis the API uses (`redis://`, `rediss://`, `redis+sentinel://` or `redis+cluster://`).',
  HERALD_REDIS_PREFIX:
    'Prefix of every Redis key, stream and pub/sub channel, so several installations can share one Redis. Must match between the API and the dispatcher.',
  HERALD_DATA_DIR:
    'Embedded mode only: where PGlite keeps its data and the generated development JWT secret and webhook encryption key live. One process at a time: a second server or `pnpm migrate` on a directory in use is refused (see docs/operations.md).',
  HERALD_CONSOLE_DIR:
    'Folder of the built operator console served at `/console/` (apps/console). Unset: `dist/console/` beside the production bundle, else `apps/console/dist/` of the workspace (built by `pnpm install` / `pnpm start`); none found: `/console/` answers 503 saying how to build it. Set to a folder without `index.html`: the API refuses to start.',

  JWT_SECRET:
    'HS256 key that verifies bearer tokens, at least 32 characters. Required in cluster mode unless `JWT_PUBLIC_KEY` or `JWT_JWKS_URL` is set; embedded mode generates one in `HERALD_DATA_DIR`. Set only one of the three.',
  JWT_PUBLIC_KEY: 'PEM public key (SPKI) for RS256/ES256 tokens; `\\n` escapes are accepted for one-line values.',
  JWT_JWKS_URL:
    'JWKS URL for RS256/ES256 tokens; keys are cached. Must be `https://` in production. Unreachable: requests get 503 `AUTH_UNAVAILABLE`, never 401.',
  JWT_ISSUER: 'When set, tokens must carry this `iss`.',
  JWT_AUDIENCE: 'When set, tokens must carry this `aud`.',

  GRAPHQL_INTROSPECTION: 'Allow introspection over HTTP and WebSocket. Unset: on, except when `NODE_ENV=production`.',
  GRAPHIQL: 'Serve GraphiQL at `/graphql` to browsers. Unset: on, except when `NODE_ENV=production`.',
  MAX_QUERY_DEPTH: 'Deepest selection accepted; deeper documents are refused before execution.',
  MAX_QUERY_ALIASES: 'Most aliases in one document.',
  MAX_QUERY_TOKENS: 'Most lexical tokens in one document (bounds parsing work).',

  WS_KEEPALIVE_MS:
    'Server ping interval on WebSockets; a socket that does not answer within it is dropped. At most 30000, below common proxy idle timeouts.',
  WS_SHARED_EXECUTION:
    'Execute each published event once per group of subscriptions that get the same result and send it to every member, instead of once per socket.',
  WS_REBALANCE:
    'Cluster mode: each pod publishes its socket count in Redis and one above its fair share closes the excess gradually with 1012, so clients reconnect (and resume) on less loaded pods. See docs/scaling.md.',
  SUBSCRIPTION_HISTORY_SIZE:
    'Events kept per organisation channel for resuming subscriptions with `after`; `0` turns resuming off.',
  SUBSCRIPTION_HISTORY_TTL: "How long a channel's history is kept after its last event.",
  SUBSCRIPTION_REPLAY_CONCURRENCY:
    'History reads (one page of 200 events each) for resuming subscriptions at a time, per pod; more wait their turn, and clients resuming from the same cursor share reads.',

  WEBHOOK_TIMEOUT_MS: 'Per delivery attempt: no complete answer within it counts as a failed attempt.',
  WEBHOOK_RETRY_BASE_MS: 'First retry delay; each later one grows exponentially, with jitter.',
  WEBHOOK_RETRY_HORIZON:
    'Give up after this age: a retry that would fall later is not scheduled and the delivery becomes `DEAD` (a dead letter).',
  WEBHOOK_ALLOW_PRIVATE_URLS:
    'Allow receiver URLs on loopback and private addresses. Unset: on in embedded mode, off otherwise. Link-local addresses (cloud metadata) are always refused.',
  'dispatcher:WEBHOOK_ALLOW_PRIVATE_URLS':
    'Allow receiver URLs on loopback and private addresses, checked again at delivery (DNS rebinding). Link-local addresses are always refused.',
  HERALD_ENCRYPTION_KEYS:
    'Keyring that webhook signing secrets are stored encrypted under (AES-256-GCM): `<id>:<base64 32-byte key>`, comma-separated, e.g. `k2:…,k1:…`. The first key encrypts, every key decrypts. Required when `DATABASE_URL` is set (the API and every dispatcher need the same keyring); embedded mode generates one in `HERALD_DATA_DIR`. A malformed value, or one that cannot decrypt the stored secrets, stops the start. See docs/operations.md ("Webhook encryption keys") for generating and rotating it.',
  WEBHOOK_RETENTION:
    'Succeeded deliveries, their attempts and dispatched outbox rows older than this are deleted, in bounded batches. DEAD deliveries are kept until replayed or past it.',
  WEBHOOK_DISABLE_AFTER:
    'An endpoint whose every attempt has failed for this long is disabled (`disabledReason` says so) and a `webhook.endpoint.disabled` event is sent.',
  TENANT_OPERATIONS_PER_SECOND:
    'GraphQL operations per second per organisation, over HTTP and WebSocket, across the cluster (a burst of one second passes); an operation counts against the organisation it names when the caller is a member, else against the caller. Past it: 429 `RATE_LIMITED`. `0`: no limit. Overridable per organisation (docs/tenancy.md).',
  TENANT_PUBLISHES_PER_SECOND:
    '`publishPost` per second per organisation, across the cluster; a refused publish commits nothing. `0`: no limit. Overridable per organisation.',
  TENANT_SOCKETS_PER_USER:
    "Open WebSockets per user (`sub`) across the cluster; the next one is closed with 1013 after `connection_init`. The largest of the user's organisations' values applies. `0`: no limit.",
  TENANT_SUBSCRIPTIONS:
    'Active subscriptions per organisation across the cluster; a subscribe past it gets `SUBSCRIPTION_LIMIT_EXCEEDED`, the socket stays open. `0`: no limit. Overridable per organisation.',
  TENANT_CONCURRENT_OPERATIONS_PER_POD:
    'HTTP operations one tenant (the organisation an operation is counted against, else its caller) runs at once on one pod; its further requests wait, in arrival order, behind its own, never ahead of another tenant\'s. Not a quota: nothing is refused for it. A tenant alone on the pod (no other tenant\'s request in the last second) may run up to `DATABASE_POOL_MAX` − 1 at once (one connection stays free for the next tenant). `0`: no turns (docs/tenancy.md, "Turns on a pod").',
  HERALD_TEST_CRASH_AT:
    'Tests only: the dispatcher kills itself (SIGKILL) at this step of a delivery, to pin crash recovery. Never set it in a deployment.',
  WEBHOOK_CONCURRENCY:
    'Most delivery attempts in flight at once in this dispatcher, all endpoints together. When they are all taken, organisations waiting for one take turns.',
  TENANT_WEBHOOK_ATTEMPTS_IN_FLIGHT:
    'Most delivery attempts in flight at once for one organisation, across all dispatchers (0: no cap). Overridable per organisation. Throttled deliveries wait; they never fail for it.',
  WEBHOOK_ENDPOINT_CONCURRENCY:
    'Most requests to one endpoint in flight at once, across all dispatchers, so one slow receiver cannot take every slot (a dispatcher holds up to 20 × the slots it has of the endpoint’s deliveries leased ahead; those take no slot).',
  WEBHOOK_POLL_INTERVAL_MS: 'How often due retries and unrelayed outbox events are looked for.',
};
