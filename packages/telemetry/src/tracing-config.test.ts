import { describe, expect, it } from 'vitest';
import { readTracingConfig, TracingConfigError } from './tracing-config.js';

const ENDPOINT = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' };

describe('readTracingConfig', () => {
  it('is off without an endpoint, whatever else is set', () => {
    expect(readTracingConfig({ OTEL_TRACES_SAMPLER: 'nonsense' }, 'herald-api')).toEqual({
      enabled: false,
      protocol: 'http/protobuf',
      serviceName: 'herald-api',
    });
  });

  it('is on with either endpoint variable, protobuf by default, named after the app', () => {
    expect(readTracingConfig(ENDPOINT, 'herald-api')).toEqual({
      enabled: true,
      protocol: 'http/protobuf',
      serviceName: 'herald-api',
    });
    expect(
      readTracingConfig({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://collector/v1/traces' }, 'herald-api').enabled,
    ).toBe(true);
  });

  it('takes the protocol (traces variable first) and the service name from the environment', () => {
    expect(
      readTracingConfig(
        {
          ...ENDPOINT,
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
          OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
          OTEL_SERVICE_NAME: 'herald-api-eu',
        },
        'herald-api',
      ),
    ).toEqual({ enabled: true, protocol: 'http/json', serviceName: 'herald-api-eu' });
  });

  it('is off with OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none, endpoint or not', () => {
    expect(readTracingConfig({ ...ENDPOINT, OTEL_SDK_DISABLED: 'TRUE' }, 'x').enabled).toBe(false);
    expect(readTracingConfig({ ...ENDPOINT, OTEL_TRACES_EXPORTER: 'none' }, 'x').enabled).toBe(false);
    expect(readTracingConfig({ ...ENDPOINT, OTEL_SDK_DISABLED: 'false' }, 'x').enabled).toBe(true);
  });

  it('refuses bad values with one line per variable', () => {
    const read = () =>
      readTracingConfig(
        {
          OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318',
          OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
          OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
          OTEL_TRACES_SAMPLER_ARG: '2',
        },
        'x',
      );
    expect(read).toThrow(TracingConfigError);
    try {
      read();
    } catch (error) {
      expect((error as TracingConfigError).code).toBe('INVALID_TRACING_CONFIG');
      expect((error as TracingConfigError).lines).toEqual([
        'OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318" is not an http(s) URL',
        'OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" is not supported; use http/protobuf or http/json',
        'OTEL_TRACES_SAMPLER_ARG: "2" is not a ratio between 0 and 1',
      ]);
    }
    expect(() => readTracingConfig({ ...ENDPOINT, OTEL_TRACES_SAMPLER: 'sometimes' }, 'x')).toThrow(
      /OTEL_TRACES_SAMPLER: "sometimes" is not one of/,
    );
  });
});
