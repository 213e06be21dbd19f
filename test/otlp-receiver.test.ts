import { ROOT_CONTEXT, SpanKind, trace } from '@opentelemetry/api';
import { JsonTraceSerializer, ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { describe, expect, it } from 'vitest';
import { decodeJsonRequest, decodeProtobufRequest } from './support/otlp-receiver.js';

// The tracing tests' collector decodes OTLP/protobuf by hand (test/support/otlp-receiver.ts): checked
// here against the OpenTelemetry packages' own serializers, on spans with a remote parent, attributes of
// every scalar type and links.

async function recordSpans() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'herald-test', 'herald.test.pod': 'a' }),
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  const tracer = provider.getTracer('otlp-receiver-test');
  const parent = trace.setSpanContext(ROOT_CONTEXT, {
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: 'b7ad6b7169203331',
    traceFlags: 1,
    isRemote: true,
  });
  const linked = { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags: 1 };
  const child = tracer.startSpan(
    'webhook attempt',
    {
      kind: SpanKind.CLIENT,
      attributes: { 'herald.webhook.attempt': 3, 'url.full': 'http://x/hook', ok: true, ratio: 0.25 },
      links: [{ context: linked }],
    },
    parent,
  );
  child.end();
  tracer.startSpan('root', { kind: SpanKind.SERVER }, ROOT_CONTEXT).end();
  await provider.forceFlush();
  return exporter.getFinishedSpans();
}

describe('the test collector decodes OTLP', () => {
  it('protobuf exactly as the JSON the same spans serialize to', async () => {
    const spans = await recordSpans();
    const fromProtobuf = decodeProtobufRequest(ProtobufTraceSerializer.serializeRequest(spans) as Uint8Array);
    const json = JSON.parse(Buffer.from(JsonTraceSerializer.serializeRequest(spans) as Uint8Array).toString('utf8'));
    expect(fromProtobuf).toEqual(decodeJsonRequest(json));
    expect(fromProtobuf).toEqual([
      {
        service: 'herald-test',
        resource: expect.objectContaining({ 'service.name': 'herald-test', 'herald.test.pod': 'a' }),
        traceId: '0af7651916cd43dd8448eb211c80319c',
        spanId: spans[0]?.spanContext().spanId,
        parentSpanId: 'b7ad6b7169203331',
        name: 'webhook attempt',
        kind: 3,
        attributes: { 'herald.webhook.attempt': 3, 'url.full': 'http://x/hook', ok: true, ratio: 0.25 },
        links: [{ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7' }],
      },
      expect.objectContaining({ name: 'root', kind: 2, parentSpanId: '' }),
    ]);
  });

  it('refuses a truncated protobuf body rather than inventing spans', async () => {
    const body = ProtobufTraceSerializer.serializeRequest(await recordSpans()) as Uint8Array;
    expect(() => decodeProtobufRequest(body.subarray(0, body.length - 5))).toThrow(/truncated/);
  });
});
