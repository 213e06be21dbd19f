import { trace } from '@opentelemetry/api';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { startTracing } from './start-tracing.js';
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
});
