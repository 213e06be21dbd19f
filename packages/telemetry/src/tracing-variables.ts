/**
 * The standard OpenTelemetry variables Herald's apps read (both the API and the webhook dispatcher), with
 * what each does here: the source of the "Tracing" section of docs/configuration.md (`pnpm docs:config`).
 * test/docs-configuration.test.ts fails when this package reads an `OTEL_*` variable not listed here.
 */
export const TRACING_VARIABLES: readonly { names: readonly string[]; meaning: string }[] = [
  {
    names: ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'],
    meaning:
      'Full URL spans are POSTed to, e.g. `http://otel-collector:4318/v1/traces`. With neither this nor `OTEL_EXPORTER_OTLP_ENDPOINT` set, tracing is off and the SDK is not loaded.',
  },
  {
    names: ['OTEL_EXPORTER_OTLP_ENDPOINT'],
    meaning: 'Base URL of the collector; `/v1/traces` is appended. Used when the variable above is unset.',
  },
  {
    names: ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'OTEL_EXPORTER_OTLP_PROTOCOL'],
    meaning: '`http/protobuf` (default) or `http/json`. `grpc` stops the start with one line naming the variable.',
  },
  {
    names: ['OTEL_TRACES_SAMPLER', 'OTEL_TRACES_SAMPLER_ARG'],
    meaning:
      'The sampler and its ratio; default `parentbased_always_on`. An unknown sampler or a ratio outside 0–1 stops the start.',
  },
  { names: ['OTEL_SERVICE_NAME'], meaning: 'Defaults to `herald-api` and `herald-webhook-dispatcher`.' },
  { names: ['OTEL_RESOURCE_ATTRIBUTES'], meaning: 'Extra resource attributes, e.g. `k8s.pod.name=$(POD_NAME)`.' },
  {
    names: ['OTEL_SDK_DISABLED', 'OTEL_TRACES_EXPORTER'],
    meaning: '`OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`: tracing off even with an endpoint set.',
  },
  {
    names: ['OTEL_EXPORTER_OTLP_HEADERS', 'OTEL_EXPORTER_OTLP_TIMEOUT', 'OTEL_EXPORTER_OTLP_COMPRESSION'],
    meaning: 'Read by the exporter as usual.',
  },
  {
    names: ['OTEL_BSP_MAX_QUEUE_SIZE', 'OTEL_BSP_SCHEDULE_DELAY', 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE'],
    meaning:
      'The in-memory span queue: its bound (default 2048; spans past it are dropped and counted), how often it is sent (5000 ms) and the batch size (512).',
  },
];
