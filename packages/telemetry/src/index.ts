export {
  activeTraceparent,
  contextFromTraceparent,
  detached,
  formatTraceparent,
  holdContext,
  isTracing,
  linksFromTraceparents,
  operationContext,
  parseTraceparent,
  recordBatchSpan,
  runInOperation,
  traceLogFields,
  traceLogMixin,
  tracer,
} from './trace-context.js';
export { type OtlpProtocol, readTracingConfig, type TracingConfig, TracingConfigError } from './tracing-config.js';
