export { RECONNECT_BASE_MS, RECONNECT_MAX_MS, reconnectDelayMs } from './backoff.js';
export {
  AFTER_VARIABLE,
  CURSOR_EXPIRED,
  createHeraldClient,
  HEAD_QUERY,
  type HeraldClient,
  type HeraldClientOptions,
  HISTORY_UNAVAILABLE,
  RATE_LIMITED,
  retryDelayMs,
  SUBSCRIPTION_INTERRUPTED,
  type SubscribeRequest,
} from './client.js';
export { type CursorPlace, isAfter, readCursor } from './cursor.js';
