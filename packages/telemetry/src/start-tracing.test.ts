import { readFileSync, realpathSync } from 'node:fs';
import { createRequire } from 'node:module';
import { trace } from '@opentelemetry/api';
import { Registry } from 'prom-client';
import { describe, expect, inject, it } from 'vitest';
import { runInFreshProcess, START, TELEMETRY } from './fresh-process.test-support.js';
import { startTracing, TRACING_INTERNALS_VERSIONS } from './start-tracing.js';
import { isTracing } from './trace-context.js';
import { TracingConfigError } from './tracing-config.js';

describe('startTracing', () => {
  it('starts nothing without an endpoint: no provider behind the API, no metric', async () => {
    const tracing = await startTracing({ serviceName: 'herald-api', env: { OTEL_SERVICE_NAME: 'x' } });
    expect(tracing.enabled).toBe(false);
    expect(isTracing()).toBe(false);
    // The API's global provider is still its proxy with nothing behind it: every span is a no-op.
    const provider = trace.getTracerProvider() as { getDelegate?: () => object };
    expect(provider.getDelegate?.().constructor.name).toBe('NoopTracerProvider');
    expect(trace.getTracer('herald').startSpan('x').isRecording()).toBe(false);
    const registry = new Registry();
    tracing.registerMetrics(registry);
    expect(await registry.metrics()).toBe('\n');
    await tracing.shutdown();
  });

  it('starts nothing when disabled, even with an endpoint', async () => {
    const tracing = await startTracing({
      serviceName: 'herald-api',
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_SDK_DISABLED: 'true' },
    });
    expect(tracing.enabled).toBe(false);
    expect(isTracing()).toBe(false);
  });

  it('refuses a bad variable before starting anything', async () => {
    await expect(
      startTracing({
        serviceName: 'herald-api',
        env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' },
      }),
    ).rejects.toThrow(TracingConfigError);
    expect(isTracing()).toBe(false);
  });

  it('finds the internals its fast paths use: no fallback, the storage off between operations, pg and ioredis gated', () => {
    const seen = runInFreshProcess<{ enabled: boolean; fallbacks: unknown[]; gated: boolean }>(
      `
      const { startTracing } = await import(${JSON.stringify(START)});
      const tracing = await startTracing({ serviceName: 'fallback-check' });
      // Imported as the app imports it (a require() would let the instrumentation's hook wrap it again).
      const { default: pg } = await import('pg');
      // The gate, in front of the instrumentation's wrapper (shimmer's marks kept on it).
      const query = pg.Client.prototype.query;
      const gated = query.__wrapped === true && String(query).includes('storageOn()');
      process.stdout.write(JSON.stringify({ enabled: tracing.enabled, fallbacks: tracing.fallbacks, gated }));
      await tracing.shutdown(100);
      `,
      {},
    );
    expect(seen).toEqual({ enabled: true, fallbacks: [], gated: true });
  });

  it('runs on the dependency versions its fast paths were written for', () => {
    const require = createRequire(import.meta.url);
    const fromSdk = createRequire(realpathSync(require.resolve('@opentelemetry/sdk-trace-node')));
    const version = (resolve: NodeJS.Require, name: string) =>
      (JSON.parse(readFileSync(resolve.resolve(`${name}/package.json`), 'utf8')) as { version: string }).version;
    expect({
      '@opentelemetry/context-async-hooks': version(fromSdk, '@opentelemetry/context-async-hooks'),
      '@opentelemetry/instrumentation': version(require, '@opentelemetry/instrumentation'),
      '@opentelemetry/instrumentation-pg': version(require, '@opentelemetry/instrumentation-pg'),
    }).toEqual(TRACING_INTERNALS_VERSIONS);
  });

  it("traces a pool's queries without leaving listeners on it: its later checkouts run no instrumentation", () => {
    const seen = runInFreshProcess<{ spans: string[]; listeners: number; rows: number }>(
      `
      const { createServer } = await import('node:http');
      const { startTracing } = await import(${JSON.stringify(START)});
      const telemetry = await import(${JSON.stringify(TELEMETRY)});
      const { ROOT_CONTEXT } = await import('@opentelemetry/api');
      const spans = [];
      const collector = createServer((request, response) => {
        let body = '';
        request.on('data', (chunk) => { body += chunk; });
        request.on('end', () => {
          for (const resource of JSON.parse(body).resourceSpans ?? [])
            for (const scope of resource.scopeSpans ?? []) for (const span of scope.spans ?? []) spans.push(span.name);
          response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        });
      });
      await new Promise((resolve) => collector.listen(0, '127.0.0.1', resolve));
      process.env.OTEL_EXPORTER_OTLP_ENDPOINT = 'http://127.0.0.1:' + collector.address().port;
      const tracing = await startTracing({ serviceName: 'pool-listeners' });
      const { default: pg } = await import('pg');
      const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
      // A sampled operation's queries, through a checkout as the app makes them.
      const span = telemetry.tracer().startSpan('operation');
      const rows = await telemetry.runInOperation(ROOT_CONTEXT, span, async () => {
        const client = await pool.connect();
        try {
          return (await client.query('select 1 as one')).rowCount;
        } finally {
          client.release();
        }
      });
      span.end();
      const listeners = ['connect', 'acquire', 'release', 'remove'].reduce((sum, event) => sum + pool.listenerCount(event), 0);
      await tracing.shutdown(5000);
      await pool.end();
      collector.close();
      process.stdout.write(JSON.stringify({ spans: spans.sort(), listeners, rows }));
      `,
      { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', DATABASE_URL: inject('databaseUrl') },
    );
    // The query was traced under the operation...
    expect(seen.rows).toBe(1);
    expect(seen.spans).toContain('operation');
    expect(seen.spans.some((name) => name.startsWith('pg.query') || name.startsWith('SELECT'))).toBe(true);
    // ...and the pool carries no listener of the instrumentation's (it adds four at a traced checkout).
    expect(seen.listeners).toBe(0);
  });
});
