import { signToken, type TokenClaims } from '@herald/auth';
import { createTestSchema, TEST_ENCRYPTION_KEYS, type TestSchema } from '@herald/testing';
import { pino } from 'pino';
import { createApp, type HeraldApp } from '../app.js';
import { type ApiConfig, loadApiConfig } from '../env.js';
import { GRAPHQL_PATH } from '../server.js';

/** The HS256 secret every test API is configured with. */
export const TEST_JWT_SECRET = 'herald-test-secret-0123456789abcdef';

export interface GraphQLResponse {
  status: number;
  headers: Headers;
  body: { data?: any; errors?: Array<{ message: string; path?: unknown[]; extensions?: Record<string, any> }> };
}

export interface TestApi {
  app: HeraldApp;
  config: ApiConfig;
  /** `http://127.0.0.1:<port>` once started with `listen: true`. */
  baseUrl: string | undefined;
  /** Signs a token for the test secret. */
  token(claims: TokenClaims, options?: Parameters<typeof signToken>[2]): Promise<string>;
  /** POSTs a GraphQL request through `yoga.fetch` (no socket). */
  graphql(query: string, variables?: Record<string, unknown>, token?: string): Promise<GraphQLResponse>;
  /**
   * Creates a post and publishes it through the API, as a client would.
   * @returns the post id
   * @throws Error when either mutation answers with errors
   */
  createAndPublish(token: string, orgId: string, title: string, tags?: string[]): Promise<string>;
  /** Any request through `yoga.fetch`; `path` is relative to the server root. */
  fetch(path: string, init?: RequestInit): Promise<Response>;
  close(): Promise<void>;
}

export interface TestApiOptions {
  /** Base PostgreSQL URL; the API gets its own fresh schema in it. Omit for embedded PGlite in memory. */
  databaseUrl?: string | undefined;
  /** Extra environment, as a user would set it; `undefined` unsets a default (e.g. NODE_ENV). */
  env?: Record<string, string | undefined>;
  /** Listen on 127.0.0.1 with a free port. @default false */
  listen?: boolean;
}

/** Starts a real Herald API (real database, real auth) for a test file. */
export async function startTestApi(options: TestApiOptions = {}): Promise<TestApi> {
  let schema: TestSchema | undefined;
  if (options.databaseUrl) schema = await createTestSchema(options.databaseUrl);
  const config = loadApiConfig({
    NODE_ENV: 'test',
    HOST: '127.0.0.1',
    PORT: '0',
    JWT_SECRET: TEST_JWT_SECRET,
    // TEST_KEYRING of @herald/testing: tests open what the API sealed.
    HERALD_ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
    HERALD_DATA_DIR: 'memory://',
    SHUTDOWN_DRAIN_DELAY_MS: '0',
    ...(schema ? { DATABASE_URL: schema.url } : {}),
    ...options.env,
  });
  if (config.database.kind === 'embedded' && config.dataDir === 'memory://') {
    config.database = { kind: 'embedded', dataDir: 'memory://' };
  }
  const app = await createApp(config, pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }));
  let baseUrl: string | undefined;
  if (options.listen) {
    const address = await app.listen();
    baseUrl = `http://127.0.0.1:${address.port}`;
  }
  const fetchApi = (path: string, init?: RequestInit) =>
    Promise.resolve(app.yoga.fetch(new Request(`http://herald.test${path}`, init)));
  const api: TestApi = {
    app,
    config,
    baseUrl,
    token: (claims, signOptions) => signToken(TEST_JWT_SECRET, claims, signOptions),
    fetch: fetchApi,
    async graphql(query, variables, token) {
      const response = await fetchApi(GRAPHQL_PATH, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          ...(token ? { authorization: `Bearer ${token}` } : {}),
        },
        body: JSON.stringify({ query, variables }),
      });
      return { status: response.status, headers: response.headers, body: await response.json() };
    },
    async createAndPublish(token, orgId, title, tags = []) {
      const created = await api.graphql(
        'mutation($input: CreatePostInput!) { createPost(input: $input) { id } }',
        { input: { orgId, title, tags } },
        token,
      );
      if (created.body.errors) throw new Error(`createPost failed: ${JSON.stringify(created.body.errors)}`);
      const id = created.body.data.createPost.id as string;
      const published = await api.graphql('mutation($id: ID!) { publishPost(id: $id) { id } }', { id }, token);
      if (published.body.errors) throw new Error(`publishPost failed: ${JSON.stringify(published.body.errors)}`);
      return id;
    },
    async close() {
      await app.stop();
      await schema?.drop();
    },
  };
  return api;
}
