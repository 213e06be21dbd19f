import { readFileSync, realpathSync } from 'node:fs';
import { createRequire } from 'node:module';
import { trace } from '@opentelemetry/api';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { runInFreshProcess, START } from './fresh-process.test-support.js';
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
    }).toEqual(TRACING_INTERNALS_VERSIONS);
  });
});
