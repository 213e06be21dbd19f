import type { TokenVerifier } from '@herald/auth';
import type { Database } from '@herald/db';
import type { Kysely } from 'kysely';
import { describe, expect, it } from 'vitest';
import { createContextBuilder } from './context.js';
import { createLogger } from './logger.js';
import { startRequestLog } from './plugins/use-request-logging.js';
import type { PubSubService } from './realtime/pubsub.js';

// No token is sent and no loader runs, so neither the verifier nor the database is used.
function builder() {
  const logger = createLogger('silent');
  const build = createContextBuilder({
    verifier: {} as TokenVerifier,
    db: {} as Kysely<Database>,
    pubsub: {} as PubSubService,
    logger,
    webhooks: {} as never,
    quotas: {} as never,
  });
  return { logger, build };
}

function request(): Request {
  return new Request('http://127.0.0.1/graphql', { method: 'POST' });
}

describe('createContextBuilder', () => {
  it('gives every context the same lazy `log` getter (one hidden class, not a closure per request)', async () => {
    const { build } = builder();
    const a = await build({ request: request(), params: { query: '{ me { id } }' } } as never);
    const b = await build({ request: request(), params: { query: '{ me { id } }' } } as never);
    const getterA = Object.getOwnPropertyDescriptor(a, 'log')?.get;
    expect(getterA).toBeTypeOf('function');
    expect(Object.getOwnPropertyDescriptor(b, 'log')?.get).toBe(getterA);
    expect(Object.keys(a)).toEqual(Object.keys(b));
  });

  it("resolves `log` to the request's logger when one was started, else the process logger", async () => {
    const { logger, build } = builder();
    const logged = request();
    const entry = startRequestLog(logged, 'req-1234567890', logger);
    const withLog = await build({ request: logged, params: { query: '{ me { id } }' } } as never);
    const without = await build({ request: request(), params: { query: '{ me { id } }' } } as never);
    expect(withLog.log).toBe(entry.log);
    expect(without.log).toBe(logger);
    // Spread copies (envelop, Yoga) read it through the same getter.
    expect({ ...withLog }.log).toBe(entry.log);
  });

  it('keeps a logger the transport passed, and lets its own fields win over the initial ones', async () => {
    const { logger, build } = builder();
    const own = logger.child({ socket: 1 });
    const context = await build({
      request: request(),
      params: { query: '{ me { id } }' },
      log: own,
      viewer: 'forged',
      socketViewer: null,
    } as never);
    expect(context.log).toBe(own);
    expect(context.viewer).toBeNull();
    expect((context as unknown as { socketViewer: unknown }).socketViewer).toBeNull();
  });
});
