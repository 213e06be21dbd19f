/**
 * The webhook scenario (`pnpm bench --scenarios webhooks`): a raw keep-alive POST loop and a raw durable loop
 * against one and two `apps/webhook-dispatcher` processes, to the same verifying receiver. The phases live in
 * webhooks/: run.ts (the raw loops' trials and the order of the runs), dispatcher-run.ts (one dispatcher run),
 * steady.ts (the steady-rate trial), scheduler-pass.ts, engine-db.ts (reading a run's database), children.ts
 * (child processes), results.ts (config and result shapes) and report.ts (its lines in results.md).
 */
export { buildDispatcherImage, DISPATCHER_MAIN, redisCommand } from './webhooks/children.js';
export { renderWebhookEngineNotes, renderWebhookEngineRows } from './webhooks/report.js';
export {
  type BesideRatio,
  besideRatio,
  type DispatcherRun,
  type DuplicateEvidence,
  type MachineShare,
  type MultiEndpointResult,
  type RawLoopTrial,
  type SteadyLatency,
  type SteadyStages,
  WARM_FRACTION,
  type WebhookConfig,
  type WebhookResult,
} from './webhooks/results.js';
export { runWebhooks } from './webhooks/run.js';
