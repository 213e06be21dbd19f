import {
  type ClaimedDelivery,
  claimDeliveryForAttempt,
  claimNextDueDelivery,
  type Database,
  type DeliveryNext,
  recordDeliveryAttempt,
} from '@herald/db';
import { signWebhook } from '@herald/webhooks';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { Deliverer } from './deliver.js';
import type { DispatcherMetrics } from './metrics.js';
import type { DeadLetter, WebhookQueue, WorkMessage } from './queue/webhook-queue.js';
import { decideRetry, type RetryPolicy } from './retry-policy.js';

/** The `alert` field of the log line written when a delivery goes DEAD; log-based alerting keys on it. */
export const DEAD_LETTER_ALERT = 'HeraldWebhookDeadLetter';

export interface AttemptDeps {
  db: Kysely<Database>;
  queue: WebhookQueue;
  deliverer: Deliverer;
  metrics: DispatcherMetrics;
  logger: Logger;
  retry: RetryPolicy;
  /** How long a claimed attempt may take before another dispatcher may take the delivery over. */
  attemptLeaseMs: number;
  /** Random source for jitter. @default Math.random */
  random?: () => number;
}

export type DeliveryWork = Extract<WorkMessage, { kind: 'delivery' }>;

export interface DeliveryAttempter {
  /**
   * Makes one attempt of the work item's delivery. A stale or duplicate work item claims nothing.
   * @returns whether an attempt was made
   */
  attempt(work: DeliveryWork): Promise<boolean>;
  /**
   * Makes one attempt of the endpoint's next due delivery that nobody holds, if there is one.
   * @returns whether an attempt was made
   */
  attemptNext(endpointId: string): Promise<boolean>;
}

/**
 * One attempt: claim the delivery (so no other dispatcher attempts it meanwhile), sign the stored body
 * with the endpoint's active secrets, POST it, and record the attempt with the delivery's next state:
 * SUCCEEDED on 2xx, else a retry time from the retry policy, or DEAD once the horizon is reached, in
 * which case the delivery is also parked in the dead-letter queue, counted, and logged as an alert.
 */
export function createDeliveryAttempter(deps: AttemptDeps): DeliveryAttempter {
  const { db, queue, deliverer, metrics, logger, retry } = deps;
  return {
    async attempt(work) {
      const delivery = await claimDeliveryForAttempt(db, {
        deliveryId: work.deliveryId,
        queueLease: work.lease,
        leaseMs: deps.attemptLeaseMs,
      });
      if (!delivery) return false;
      await attemptClaimed(delivery);
      return true;
    },
    async attemptNext(endpointId) {
      const delivery = await claimNextDueDelivery(db, { endpointId, leaseMs: deps.attemptLeaseMs });
      if (!delivery) return false;
      await attemptClaimed(delivery);
      return true;
    },
  };

  async function attemptClaimed(delivery: ClaimedDelivery): Promise<void> {
    const at = new Date();
    const outcome =
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

    let next: DeliveryNext;
    let deadReason: string | undefined;
    if (outcome.ok) {
      next = { status: 'SUCCEEDED' };
    } else {
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
      if (decision.retry) {
        next = { status: 'PENDING', retryInMs: decision.delayMs };
      } else {
        next = { status: 'DEAD' };
        deadReason = decision.reason;
      }
    }

    const recorded = await recordDeliveryAttempt(db, {
      deliveryId: delivery.id,
      attemptLease: delivery.attemptLease,
      attempt: { at, statusCode: outcome.statusCode, durationMs: outcome.durationMs, error: outcome.error },
      next,
    });
    const context = {
      deliveryId: delivery.id,
      eventId: delivery.eventId,
      endpointId: delivery.endpointId,
      attempt: delivery.attemptCount + 1,
      statusCode: outcome.statusCode,
      durationMs: outcome.durationMs,
    };
    if (recorded !== 'recorded') {
      logger.info({ ...context, recorded }, 'webhook attempt made, but the delivery changed meanwhile');
      return;
    }
    if (next.status === 'DEAD') {
      const letter: DeadLetter = {
        deliveryId: delivery.id,
        eventId: delivery.eventId,
        eventType: delivery.eventType,
        orgId: delivery.orgId,
        endpointId: delivery.endpointId,
        url: delivery.url,
        attempts: delivery.attemptCount + 1,
        lastStatusCode: outcome.statusCode,
        lastError: outcome.error,
        deadAt: new Date().toISOString(),
      };
      metrics.deadLetters.inc();
      logger.error(
        { alert: DEAD_LETTER_ALERT, ...letter, reason: deadReason },
        'webhook delivery is DEAD: retries ran out; parked in the dead-letter queue',
      );
      await queue.deadLetter(letter).catch((error: unknown) => {
        // The delivery is DEAD in the database either way (visible and replayable over GraphQL).
        logger.error(
          { err: error, deliveryId: delivery.id },
          'could not park the dead delivery in the dead-letter queue',
        );
      });
    } else if (next.status === 'PENDING') {
      logger.info(
        { ...context, error: outcome.error, retryInMs: next.retryInMs },
        'webhook attempt failed; retry scheduled',
      );
    } else {
      logger.debug(context, 'webhook delivered');
    }
  }
}
