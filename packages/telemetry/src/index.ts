export {
  activeTraceparent,
  bindToOperation,
  contextFromTraceparent,
  detached,
  formatTraceparent,
  holdContext,
  isTracing,
  operationContext,
  parseTraceparent,
  recordBatchSpan,
  runInOperation,
  traceLogFields,
  traceLogMixin,
  tracer,
  unsampledChildTraceparent,
  unsampledParent,
} from './trace-context.js';
export { type OtlpProtocol, readTracingConfig, type TracingConfig, TracingConfigError } from './tracing-config.js';
