/**
 * Reads the standard OpenTelemetry variables Herald honours, once, at start. Tracing is on only when an
 * OTLP endpoint is set (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`) and
 * neither `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` says otherwise. Everything else
 * (headers, timeouts, batch sizes, resource attributes) the SDK reads itself from the same variables.
 */

/** The OTLP encodings over HTTP Herald can send; gRPC is not shipped. */
export type OtlpProtocol = 'http/protobuf' | 'http/json';

export interface TracingConfig {
  /** False: the SDK is never loaded, and spans are the API's no-ops. */
  enabled: boolean;
  protocol: OtlpProtocol;
  /** `OTEL_SERVICE_NAME`, else the app's own name (`herald-api`, `herald-webhook-dispatcher`). */
  serviceName: string;
}

/** A bad tracing variable: one line per variable, for the app's start-up message. */
export class TracingConfigError extends Error {
  readonly code = 'INVALID_TRACING_CONFIG';
  constructor(readonly lines: string[]) {
    super(lines.join('; '));
    this.name = 'TracingConfigError';
  }
}

const PROTOCOLS: readonly string[] = ['http/protobuf', 'http/json'];
const SAMPLERS: readonly string[] = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
];

/**
 * @throws TracingConfigError for an endpoint that is not an http(s) URL, a protocol other than
 *   `http/protobuf`/`http/json`, an unknown sampler, or a ratio outside [0, 1]: a typo should stop the
 *   start, not silently trace nothing (or everything).
 */
export function readTracingConfig(env: NodeJS.ProcessEnv, defaultServiceName: string): TracingConfig {
  const lines: string[] = [];
  const serviceName = env.OTEL_SERVICE_NAME?.trim() || defaultServiceName;
  const protocolVariable = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
    ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'
    : 'OTEL_EXPORTER_OTLP_PROTOCOL';
  const protocol = (env[protocolVariable]?.trim() || 'http/protobuf') as OtlpProtocol;
  const disabled =
    env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true' || env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() === 'none';
  const endpointVariable = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
    ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'
    : 'OTEL_EXPORTER_OTLP_ENDPOINT';
  const endpoint = env[endpointVariable]?.trim();
  if (disabled || !endpoint) return { enabled: false, protocol, serviceName };

  if (!/^https?:\/\/[^/]/i.test(endpoint) || !URL.canParse(endpoint))
    lines.push(`${endpointVariable}: "${endpoint}" is not an http(s) URL`);
  if (!PROTOCOLS.includes(protocol))
    lines.push(`${protocolVariable}: "${protocol}" is not supported; use http/protobuf or http/json`);
  const sampler = env.OTEL_TRACES_SAMPLER?.trim();
  if (sampler && !SAMPLERS.includes(sampler))
    lines.push(`OTEL_TRACES_SAMPLER: "${sampler}" is not one of ${SAMPLERS.join(', ')}`);
  const ratio = env.OTEL_TRACES_SAMPLER_ARG?.trim();
  if (sampler?.endsWith('traceidratio') && ratio) {
    const value = Number(ratio);
    if (!Number.isFinite(value) || value < 0 || value > 1)
      lines.push(`OTEL_TRACES_SAMPLER_ARG: "${ratio}" is not a ratio between 0 and 1`);
  }
  if (lines.length > 0) throw new TracingConfigError(lines);
  return { enabled: true, protocol, serviceName };
}
