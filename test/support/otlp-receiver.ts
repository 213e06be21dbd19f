import { createServer, type Server } from 'node:http';
import { gunzipSync } from 'node:zlib';

/**
 * A real OTLP/HTTP trace receiver for tests: `POST /v1/traces` with `application/x-protobuf` or
 * `application/json` bodies (optionally gzip), decoded into flat spans. `answer` switches it to refuse
 * every export (500) to stand for a broken collector.
 *
 * The protobuf side decodes the few fields of `ExportTraceServiceRequest` tests look at (resource
 * attributes, span ids, parent, name, kind, attributes, links), straight from the wire format of
 * opentelemetry-proto's trace.proto. The OpenTelemetry JS packages Herald pins encode requests but ship
 * no decoder for them; `otlp-receiver.test.ts` checks this one against their JSON serializer.
 */
export interface ReceivedSpan {
  service: string;
  /** The resource's attributes (`service.name`, `OTEL_RESOURCE_ATTRIBUTES`, …). */
  resource: Record<string, string | number | boolean>;
  traceId: string;
  spanId: string;
  /** Empty for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP's SpanKind number: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, string | number | boolean>;
  links: Array<{ traceId: string; spanId: string }>;
}

export interface OtlpReceiver {
  url: string;
  spans: ReceivedSpan[];
  /** Requests received, by content type (`application/x-protobuf`, `application/json`). */
  requests: string[];
  /** 200 (accept) or 500 (refuse every export). */
  answer: 200 | 500;
  close(): Promise<void>;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const receiver = { spans: [] as ReceivedSpan[], requests: [] as string[], answer: 200 as 200 | 500 };
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const type = (request.headers['content-type'] ?? '').split(';')[0]!.trim();
      receiver.requests.push(type);
      if (receiver.answer !== 200) {
        response.writeHead(receiver.answer).end();
        return;
      }
      let body = Buffer.concat(chunks);
      if (request.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
      try {
        if (type === 'application/json') receiver.spans.push(...decodeJsonRequest(JSON.parse(body.toString('utf8'))));
        else receiver.spans.push(...decodeProtobufRequest(body));
      } catch (error) {
        response.writeHead(400).end(String(error));
        return;
      }
      response.writeHead(200, { 'content-type': type || 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return Object.assign(receiver, {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}

// --- OTLP/JSON ------------------------------------------------------------------------------------

interface JsonKeyValue {
  key: string;
  value: { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };
}

function jsonAttributes(list: JsonKeyValue[] | undefined): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const { key, value } of list ?? []) {
    if (value.stringValue !== undefined) out[key] = value.stringValue;
    else if (value.intValue !== undefined) out[key] = Number(value.intValue);
    else if (value.doubleValue !== undefined) out[key] = value.doubleValue;
    else if (value.boolValue !== undefined) out[key] = value.boolValue;
  }
  return out;
}

export function decodeJsonRequest(request: any): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const resourceSpans of request.resourceSpans ?? []) {
    const resource = jsonAttributes(resourceSpans.resource?.attributes);
    const service = String(resource['service.name'] ?? '');
    for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
      for (const span of scopeSpans.spans ?? []) {
        spans.push({
          service,
          resource,
          traceId: span.traceId,
          spanId: span.spanId,
          parentSpanId: span.parentSpanId ?? '',
          name: span.name,
          kind: span.kind ?? 0,
          attributes: jsonAttributes(span.attributes),
          links: (span.links ?? []).map((link: { traceId: string; spanId: string }) => ({
            traceId: link.traceId,
            spanId: link.spanId,
          })),
        });
      }
    }
  }
  return spans;
}

// --- OTLP/protobuf (wire format) -------------------------------------------------------------------

class Reader {
  pos = 0;
  constructor(private readonly buf: Uint8Array) {}
  get done() {
    return this.pos >= this.buf.length;
  }
  varint(): number {
    let result = 0;
    let shift = 0;
    for (;;) {
      if (this.pos >= this.buf.length) throw new Error('truncated varint');
      const byte = this.buf[this.pos++]!;
      result += (byte & 0x7f) * 2 ** shift;
      if ((byte & 0x80) === 0) return result;
      shift += 7;
    }
  }
  tag(): { field: number; wire: number } {
    const tag = this.varint();
    return { field: Math.floor(tag / 8), wire: tag & 7 };
  }
  bytes(): Uint8Array {
    const length = this.varint();
    const out = this.buf.subarray(this.pos, this.pos + length);
    if (out.length !== length) throw new Error('truncated field');
    this.pos += length;
    return out;
  }
  string(): string {
    return Buffer.from(this.bytes()).toString('utf8');
  }
  double(): number {
    const value = Buffer.from(this.buf.subarray(this.pos, this.pos + 8)).readDoubleLE(0);
    this.pos += 8;
    return value;
  }
  skip(wire: number) {
    if (wire === 0) this.varint();
    else if (wire === 1) this.pos += 8;
    else if (wire === 2) this.bytes();
    else if (wire === 5) this.pos += 4;
    else throw new Error(`unsupported wire type ${wire}`);
  }
}

/** Each length-delimited field of a message, with its number. */
function* fields(buf: Uint8Array): Generator<{ field: number; wire: number; reader: Reader }> {
  const reader = new Reader(buf);
  while (!reader.done) {
    const { field, wire } = reader.tag();
    yield { field, wire, reader };
  }
}

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');

/** AnyValue: string 1, bool 2, int 3, double 4 (arrays, maps and bytes are not read). */
function anyValue(buf: Uint8Array): string | number | boolean | undefined {
  let value: string | number | boolean | undefined;
  for (const { field, wire, reader } of fields(buf)) {
    if (field === 1 && wire === 2) value = reader.string();
    else if (field === 2 && wire === 0) value = reader.varint() !== 0;
    else if (field === 3 && wire === 0) value = reader.varint();
    else if (field === 4 && wire === 1) value = reader.double();
    else reader.skip(wire);
  }
  return value;
}

/** KeyValue: key 1, value 2. */
function keyValue(buf: Uint8Array, into: Record<string, string | number | boolean>) {
  let key = '';
  let value: string | number | boolean | undefined;
  for (const { field, wire, reader } of fields(buf)) {
    if (field === 1 && wire === 2) key = reader.string();
    else if (field === 2 && wire === 2) value = anyValue(reader.bytes());
    else reader.skip(wire);
  }
  if (value !== undefined) into[key] = value;
}

/** Span: trace_id 1, span_id 2, parent_span_id 4, name 5, kind 6, attributes 9, links 13. */
function span(buf: Uint8Array, resource: Record<string, string | number | boolean>): ReceivedSpan {
  const out: ReceivedSpan = {
    service: String(resource['service.name'] ?? ''),
    resource,
    traceId: '',
    spanId: '',
    parentSpanId: '',
    name: '',
    kind: 0,
    attributes: {},
    links: [],
  };
  for (const { field, wire, reader } of fields(buf)) {
    if (field === 1 && wire === 2) out.traceId = hex(reader.bytes());
    else if (field === 2 && wire === 2) out.spanId = hex(reader.bytes());
    else if (field === 4 && wire === 2) out.parentSpanId = hex(reader.bytes());
    else if (field === 5 && wire === 2) out.name = reader.string();
    else if (field === 6 && wire === 0) out.kind = reader.varint();
    else if (field === 9 && wire === 2) keyValue(reader.bytes(), out.attributes);
    else if (field === 13 && wire === 2) {
      const link = { traceId: '', spanId: '' };
      for (const part of fields(reader.bytes())) {
        if (part.field === 1 && part.wire === 2) link.traceId = hex(part.reader.bytes());
        else if (part.field === 2 && part.wire === 2) link.spanId = hex(part.reader.bytes());
        else part.reader.skip(part.wire);
      }
      out.links.push(link);
    } else reader.skip(wire);
  }
  return out;
}

/** ExportTraceServiceRequest: resource_spans 1 → resource 1 (attributes 1), scope_spans 2 → spans 2. */
export function decodeProtobufRequest(body: Uint8Array): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const top of fields(body)) {
    if (top.field !== 1 || top.wire !== 2) {
      top.reader.skip(top.wire);
      continue;
    }
    const resourceSpans = top.reader.bytes();
    const resource: Record<string, string | number | boolean> = {};
    const scopes: Uint8Array[] = [];
    for (const part of fields(resourceSpans)) {
      if (part.field === 1 && part.wire === 2) {
        for (const attribute of fields(part.reader.bytes())) {
          if (attribute.field === 1 && attribute.wire === 2) keyValue(attribute.reader.bytes(), resource);
          else attribute.reader.skip(attribute.wire);
        }
      } else if (part.field === 2 && part.wire === 2) scopes.push(part.reader.bytes());
      else part.reader.skip(part.wire);
    }
    for (const scope of scopes) {
      for (const part of fields(scope)) {
        if (part.field === 2 && part.wire === 2) spans.push(span(part.reader.bytes(), resource));
        else part.reader.skip(part.wire);
      }
    }
  }
  return spans;
}
