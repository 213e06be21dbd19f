import type { Database } from '@herald/db';
import { signWebhook } from '@herald/webhooks';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import { markDeadLettersStreamed } from './dead-letters.js';
import type { Deliverer, DeliveryOutcome } from './deliver.js';
import {
  type AttemptOutcome,
  type ClaimedDelivery,
  claimDeliveries,
  createDurabilityBarrier,
  type DeliveryNext,
  flushCommits,
  type QueuedDelivery,
  recordOutcomes,
} from './lease-protocol.js';
import type { DispatcherMetrics } from './metrics.js';
import type { DeadLetter, WebhookQueue } from './queue/webhook-queue.js';
import { decideRetry, MAX_RETRY_AFTER_MS, parseRetryAfterMs, type RetryPolicy } from './retry-policy.js';
import { redactUrl } from './url-policy.js';

/** The `alert` field of the log line written when a delivery goes DEAD; log-based alerting keys on it. */
export const DEAD_LETTER_ALERT = 'HeraldWebhookDeadLetter';
/** The `alert` field of the log line written when an endpoint is disabled. */
export const ENDPOINT_DISABLED_ALERT = 'HeraldWebhookEndpointDisabled';

export interface BatchAttempterDeps {
  db: Kysely<Database>;
  queue: WebhookQueue;
  deliverer: Deliverer;
  metrics: DispatcherMetrics;
  logger: Logger;
  retry: RetryPolicy;
  /** How long a claimed attempt may take before another dispatcher may take the delivery over. */
  attemptLeaseMs: number;
  /** At most this many attempts in flight per endpoint, across all dispatchers. */
  endpointCap: number;
  /** An endpoint whose every attempt failed for this long is disabled (`WEBHOOK_DISABLE_AFTER`). */
  disableAfterMs: number;
  /** Called when operational events were written to the outbox (so the relay looks at once). */
  onOutboxEvents?(): void;
  /** Random source for jitter. @default Math.random */
  random?: () => number;
  /** Called between steps (crash tests). */
  onStep?(step: 'after-claim' | 'after-post'): void;
}

export interface BatchResult {
  /** Attempts made. */
  attempted: number;
  /** Endpoints that had an attempt: their slots are free again, to chain on. */
  endpoints: string[];
  /** Claimed by this batch's record in the slots it freed: the next batch, without a claim. */
  handedOver: ClaimedDelivery[];
  /**
   * Resolves once the batch's claim and record are durable (the WAL is flushed past them) and its
   * dead letters have been handed to the stream; only then may its work entries be acknowledged.
   * Rejects when the flush failed (the entries are then reclaimed and found done or tried again).
   */
  settled: Promise<void>;
}

export interface BatchAttempter {
  /**
   * Claims the named deliveries (and with `chainEndpoints`, those endpoints' next due ones), POSTs
   * them concurrently and records the outcomes: three statements for the whole batch, plus a share of
   * one durability barrier (`settled`). With `handedOver` (the previous batch's record claimed them),
   * they are attempted, and a claim is made only when entries are waiting and the hand-over left room
   * under the cap (otherwise the named deliveries were considered by that hand-over). When every attempt of a one-endpoint batch succeeded and that endpoint is in
   * `chainEndpoints`, the record hands its slots over to the endpoint's next due deliveries
   * (`handedOver` of the result): two statements become one per batch while an endpoint has work.
   * Rejects only when the database fails (the work entries are then reclaimed and done again).
   */
  run(
    queued: readonly QueuedDelivery[],
    chainEndpoints?: readonly string[],
    handedOver?: readonly ClaimedDelivery[],
  ): Promise<BatchResult>;
  /** Resolves once every batch run so far has settled (for a clean stop). */
  drain(): Promise<void>;
}

/**
 * One batch: claim (lease protocol step 3), sign each body with its endpoint's active secrets
 * (`signWebhook`), POST them all at once, record (step 4). A 2xx is SUCCEEDED; anything else is
 * retried with the retry policy's delay, or DEAD past the horizon, in which case the delivery is also
 * written to the dead-letter stream (the alerting feed), counted, and logged as an alert.
 */
export function createBatchAttempter(deps: BatchAttempterDeps): BatchAttempter {
  const { db, queue, deliverer, metrics, logger, retry } = deps;
  const barrier = createDurabilityBarrier(() => flushCommits(db));
  const settling = new Set<Promise<void>>();

  function decide(delivery: ClaimedDelivery, outcome: DeliveryOutcome, at: Date): AttemptOutcome {
    let next: DeliveryNext;
    let health: AttemptOutcome['health'] = 'success';
    let pauseMs: number | undefined;
    if (outcome.ok) {
      next = { status: 'SUCCEEDED' };
    } else {
      health = outcome.statusCode === 410 ? 'gone' : 'failure';
      if (outcome.statusCode === 429 || outcome.statusCode === 503) {
        const asked = parseRetryAfterMs(outcome.retryAfter, at.getTime());
        if (asked !== undefined) {
          health = 'throttled';
          pauseMs = Math.min(asked, MAX_RETRY_AFTER_MS);
        }
      }
      const decision = decideRetry(
        retry,
        {
          attempts: delivery.attemptCount + 1,
          ageMs: delivery.ageMs + outcome.durationMs,
          statusCode: outcome.statusCode,
          retryAfter: outcome.retryAfter,
        },
        deps.random,
      );
      next =
        decision.retry && outcome.statusCode !== 410
          ? { status: 'PENDING', retryInMs: decision.delayMs }
          : { status: 'DEAD' };
    }
    return {
      deliveryId: delivery.id,
      endpointId: delivery.endpointId,
      lease: delivery.lease,
      at,
      statusCode: outcome.statusCode,
      durationMs: outcome.durationMs,
      error: outcome.error,
      responseBody: outcome.responseBody ?? null,
      next,
      health,
      pauseMs,
    };
  }

  async function attemptOne(delivery: ClaimedDelivery): Promise<AttemptOutcome> {
    const at = new Date();
    const outcome: DeliveryOutcome =
      delivery.secrets.length === 0
        ? {
            ok: false,
            statusCode: null,
            durationMs: 0,
            error: 'the endpoint has no active signing secret',
            retryAfter: null,
          }
        : await deliverer.deliver({
            endpointId: delivery.endpointId,
            url: delivery.url,
            body: delivery.body,
            headers: signWebhook({ eventId: delivery.eventId, rawBody: delivery.body, secrets: delivery.secrets }),
          });
    const label = { outcome: outcome.ok ? 'success' : 'failure' };
    metrics.attempts.inc(label);
    metrics.deliverySeconds.observe(label, outcome.durationMs / 1_000);
    return decide(delivery, outcome, at);
  }

  async function afterRecord(
    claimed: readonly ClaimedDelivery[],
    outcomes: readonly AttemptOutcome[],
    recorded: Set<string>,
  ): Promise<void> {
    const letters: DeadLetter[] = [];
    outcomes.forEach((outcome, index) => {
      const delivery = claimed[index] as ClaimedDelivery;
      const context = {
        deliveryId: delivery.id,
        eventId: delivery.eventId,
        endpointId: delivery.endpointId,
        url: redactUrl(delivery.url),
        attempt: delivery.attemptCount + 1,
        statusCode: outcome.statusCode,
        durationMs: outcome.durationMs,
      };
      if (!recorded.has(delivery.id)) {
        logger.info(context, 'webhook attempt made, but the delivery changed meanwhile (replayed or taken over)');
        return;
      }
      if (outcome.next.status === 'DEAD') {
        const letter: DeadLetter = {
          deliveryId: delivery.id,
          eventId: delivery.eventId,
          eventType: delivery.eventType,
          orgId: delivery.orgId,
          endpointId: delivery.endpointId,
          url: redactUrl(delivery.url),
          attempts: delivery.attemptCount + 1,
          lastStatusCode: outcome.statusCode,
          lastError: outcome.error,
          deadAt: new Date().toISOString(),
        };
        letters.push(letter);
        metrics.deadLetters.inc();
        logger.error({ alert: DEAD_LETTER_ALERT, ...letter }, 'webhook delivery is DEAD: retries ran out');
      } else if (outcome.next.status === 'PENDING') {
        logger.info(
          { ...context, error: outcome.error, retryInMs: outcome.next.retryInMs },
          'webhook attempt failed; retry scheduled',
        );
      }
    });
    if (letters.length === 0) return;
    try {
      for (const letter of letters) await queue.deadLetter(letter);
      await markDeadLettersStreamed(
        db,
        letters.map((letter) => letter.deliveryId),
      );
    } catch (error) {
      // The deliveries are DEAD in the database (listed and replayed from there); the scheduler writes
      // the stream entries later (`dead_letter_streamed_at` is still null).
      logger.warn({ err: error, deliveries: letters.length }, 'could not write the dead-letter stream; will retry');
    }
  }

  return {
    async run(queued, chainEndpoints, handedOver) {
      const claimed = [...(handedOver ?? [])];
      // A hand-over keeps the slots a batch had; new entries with room under the cap widen it.
      if (claimed.length === 0 || (queued.length > 0 && claimed.length < deps.endpointCap)) {
        claimed.push(
          ...(await claimDeliveries(db, {
            queued,
            chainEndpoints,
            endpointCap: deps.endpointCap,
            leaseMs: deps.attemptLeaseMs,
          })),
        );
      }
      if (claimed.length === 0) return { attempted: 0, endpoints: [], handedOver: [], settled: Promise.resolve() };
      deps.onStep?.('after-claim');
      const outcomes = await Promise.all(claimed.map(attemptOne));
      deps.onStep?.('after-post');
      const endpointId = claimed[0]!.endpointId;
      const handOver =
        chainEndpoints?.includes(endpointId) &&
        claimed.every((delivery) => delivery.endpointId === endpointId) &&
        outcomes.every((outcome) => outcome.health === 'success')
          ? { endpointId, leaseMs: deps.attemptLeaseMs }
          : undefined;
      const result = await recordOutcomes(db, outcomes, { disableAfterMs: deps.disableAfterMs, handOver });
      for (const disabled of result.disabled) {
        metrics.disabledEndpoints.inc();
        logger.error(
          { alert: ENDPOINT_DISABLED_ALERT, endpointId: disabled.endpointId, reason: disabled.reason },
          'webhook endpoint disabled',
        );
      }
      // The record committed without waiting for the WAL flush: the endpoint's slots are free now, and
      // the caller may chain on at once; the batch is done (acknowledged, dead letters streamed) once
      // the shared barrier says it is durable.
      const settled = barrier.wait().then(async () => {
        if (result.events > 0) deps.onOutboxEvents?.();
        await afterRecord(claimed, outcomes, result.recorded);
      });
      const tracked = settled.catch(() => {});
      settling.add(tracked);
      void tracked.then(() => settling.delete(tracked));
      return {
        attempted: claimed.length,
        endpoints: [...new Set(claimed.map((delivery) => delivery.endpointId))],
        handedOver: result.handedOver,
        settled,
      };
    },
    async drain() {
      while (settling.size > 0) await Promise.all([...settling]);
    },
  };
}
