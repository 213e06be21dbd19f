import type { IncomingMessage, ServerResponse } from 'node:http';
import { PayloadTooLargeError, readRawBody } from './read-raw-body.js';
import { verifyWebhook } from './verify-webhook.js';
import type { WebhookEvent } from './webhook-event.js';
import type { WebhookEventStore } from './webhook-event-store.js';
import { WebhookVerificationError } from './webhook-verification-error.js';

/** Largest body accepted unless told otherwise: 1 MiB, Herald's own request limit. */
export const DEFAULT_MAX_BODY_BYTES = 1_048_576;

/** The step of a request at which an unexpected failure happened, for {@link WebhookHandlerOptions.onError}. */
export type WebhookHandlerStage = 'read' | 'secrets' | 'verify' | 'store' | 'enqueue';

interface CommonOptions {
  /**
   * Persists accepted events, deduplicated by id; called before the answer, so a 2xx always means
   * "stored". A rejection is answered with 500 and the sender retries.
   */
  store: WebhookEventStore;
  /**
   * Hands a newly stored event to background work. Called once per new event (never for a
   * duplicate) after the 2xx has been sent; the handler never waits for the returned promise, and a
   * throw or rejection only reaches `onError`: the event is already stored, so a worker that scans
   * the store for unprocessed events (see `PostgresEventStore.listUnprocessed`) still finds it.
   */
  enqueue: (event: WebhookEvent) => void | Promise<void>;
  /** Larger bodies are answered 413 without being read to the end. @default 1048576 (1 MiB) */
  maxBodyBytes?: number;
  /** Replay window passed to `verifyWebhook`, in seconds. @default 300 */
  toleranceSec?: number;
  /**
   * Told about failures that are not the sender's fault (the request was answered 500, or the
   * enqueue failed after a 2xx). Refused deliveries (400, 413) are not reported here.
   * @default writes to console.error
   */
  onError?: (error: unknown, stage: WebhookHandlerStage) => void;
}

/** Options of {@link createWebhookHandler}: the signing secrets, fixed or looked up per request. */
export type WebhookHandlerOptions = CommonOptions &
  (
    | {
        /**
         * The endpoint's signing secrets (`whsec_…`), or for an ED25519 endpoint its public keys
         * (`whpk_…`); list the old and the new one during a rotation.
         */
        secrets: readonly string[];
        getSecrets?: never;
      }
    | {
        secrets?: never;
        /**
         * Looks the secrets up per request (a secrets manager, a per-tenant path). A throw or
         * rejection is answered with 500, so the sender retries.
         */
        getSecrets: (req: IncomingMessage) => readonly string[] | Promise<readonly string[]>;
      }
  );

/** A node:http request listener; it never rejects (every failure becomes an HTTP answer). */
export type WebhookRequestHandler = (req: IncomingMessage, res: ServerResponse) => Promise<void>;

/**
 * A webhook endpoint: read the raw body (over `maxBodyBytes`: 413), verify it
 * (refused: 400 with the reason, nothing stored), persist it deduplicated by event id (failure: 500,
 * so the sender retries), answer 200 for a new and for an already seen event alike, then hand new
 * events to `enqueue` without waiting for the slow work. Methods other than POST get 405.
 *
 * Answer bodies are JSON: `{ received: true, duplicate }`, or `{ error, reason?, message? }`.
 */
export function createWebhookHandler(options: WebhookHandlerOptions): WebhookRequestHandler {
  const { store, enqueue, toleranceSec, secrets: fixedSecrets } = options;
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  if (!options.getSecrets && !fixedSecrets) throw new TypeError('createWebhookHandler: pass secrets or getSecrets');
  const getSecrets = options.getSecrets ?? (() => fixedSecrets ?? []);
  const reportError = options.onError ?? reportToConsole;
  // A throwing error hook must not turn into an unhandled rejection of the request listener.
  const onError = (error: unknown, stage: WebhookHandlerStage) => {
    try {
      reportError(error, stage);
    } catch {}
  };
  if (!Number.isSafeInteger(maxBodyBytes) || maxBodyBytes <= 0) {
    throw new TypeError('createWebhookHandler: maxBodyBytes must be a positive integer');
  }

  return async (req, res) => {
    if (req.method !== 'POST') {
      res.setHeader('Allow', 'POST');
      return answer(res, 405, { error: 'method_not_allowed' });
    }

    let rawBody: Buffer;
    try {
      rawBody = await readRawBody(req, maxBodyBytes);
    } catch (error) {
      if (error instanceof PayloadTooLargeError) {
        // The unread rest of the body must not be parsed as the next request on this connection.
        res.setHeader('Connection', 'close');
        return answer(res, 413, { error: 'payload_too_large', limitBytes: maxBodyBytes });
      }
      onError(error, 'read');
      res.destroy();
      return;
    }

    let secrets: readonly string[];
    try {
      secrets = await getSecrets(req);
    } catch (error) {
      onError(error, 'secrets');
      return answer(res, 500, { error: 'internal_error' });
    }

    let event: WebhookEvent;
    try {
      event = verifyWebhook({ rawBody, headers: req.headers, secrets, toleranceSec });
    } catch (error) {
      if (error instanceof WebhookVerificationError) {
        return answer(res, 400, { error: 'invalid_webhook', reason: error.reason, message: error.message });
      }
      // Not the sender's fault (no secrets configured, say): 500 makes it retry once we're fixed.
      onError(error, 'verify');
      return answer(res, 500, { error: 'internal_error' });
    }

    let isNew: boolean;
    try {
      isNew = await store.recordIfNew(event);
    } catch (error) {
      onError(error, 'store');
      return answer(res, 500, { error: 'internal_error' });
    }

    answer(res, 200, { received: true, duplicate: !isNew });
    if (isNew) {
      // Not awaited: the slow work must not hold the request; a synchronous throw lands in catch too.
      void Promise.resolve(event)
        .then(enqueue)
        .catch((error: unknown) => onError(error, 'enqueue'));
    }
  };
}

function answer(res: ServerResponse, statusCode: number, body: Record<string, unknown>): void {
  const json = JSON.stringify(body);
  res.writeHead(statusCode, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(json) });
  res.end(json);
}

function reportToConsole(error: unknown, stage: WebhookHandlerStage): void {
  console.error(`@herald/webhooks: webhook handler failed at ${stage}:`, error);
}
