export {
  activeTraceparent,
  contextFromTraceparent,
  contextWithSpan,
  detached,
  formatTraceparent,
  isTracing,
  linksFromTraceparents,
  parseTraceparent,
  recordBatchSpan,
  traceLogFields,
  traceLogMixin,
  tracer,
  withSpan,
} from './trace-context.js';
export { type OtlpProtocol, readTracingConfig, type TracingConfig, TracingConfigError } from './tracing-config.js';
