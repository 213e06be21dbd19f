import type { Database, InvalidWebhookEventError } from '@herald/db';
import { isTracing, recordBatchSpan } from '@herald/telemetry';
import { signWebhook } from '@herald/webhooks';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import { endAttemptSpan, startAttemptSpan, TRACEPARENT_HEADER } from './attempt-span.js';
import type { Deliverer, DeliveryOutcome } from './deliver.js';
import {
  type AttemptOutcome,
  type ClaimedDelivery,
  claimDeliveries,
  createDurabilityBarrier,
  type DeliveryNext,
  flushCommits,
  growEndpointSlots,
  type HandOver,
  markDeadLettersStreamed,
  type QueuedDelivery,
  type RecordResult,
  recordOutcomes,
} from './lease-protocol.js';
import type { DispatcherMetrics } from './metrics.js';
import type { DeadLetter, WebhookQueue } from './queue/webhook-queue.js';
import { decideRetry, MAX_RETRY_AFTER_MS, parseRetryAfterMs, type RetryPolicy } from './retry-policy.js';
import type { SecretCache } from './secret-cache.js';
import { redactUrl } from './url-policy.js';

/** The `alert` field of the log line written when a delivery goes DEAD; log-based alerting keys on it. */
export const DEAD_LETTER_ALERT = 'HeraldWebhookDeadLetter';
/** The `alert` field of the log line written when an endpoint is disabled. */
export const ENDPOINT_DISABLED_ALERT = 'HeraldWebhookEndpointDisabled';

/**
 * Operational events a record did not write because their body did not match the event catalog: a
 * bug in Herald, logged at error with what is wrong and counted by type. What they described stands.
 */
export function reportInvalidEvents(
  logger: Logger,
  metrics: Pick<DispatcherMetrics, 'eventsInvalid'>,
  refused: readonly InvalidWebhookEventError[],
): void {
  for (const error of refused) {
    logger.error(
      { eventId: error.eventId, eventType: error.type, problems: error.problems },
      'webhook event does not match its schema: not recorded',
    );
    metrics.eventsInvalid.labels(error.type).inc();
  }
}

export interface BatchAttempterDeps {
  db: Kysely<Database>;
  queue: WebhookQueue;
  deliverer: Deliverer;
  metrics: DispatcherMetrics;
  logger: Logger;
  retry: RetryPolicy;
  /** Opens the claimed deliveries' sealed secrets (decrypted once, then from memory). */
  secrets: SecretCache;
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

export interface BatchAttempter {
  /**
   * Claims the named deliveries (and with `chainEndpoints`, those endpoints' next due ones) under
   * `lease` (lease protocol step 3, the cap enforced atomically). `settled` resolves once the claim is
   * durable; only then may the entries naming these deliveries be acknowledged. Rejects when the
   * database fails (the entries are then reclaimed and done again).
   */
  claim(
    queued: readonly QueuedDelivery[],
    chainEndpoints: readonly string[],
    lease: string,
    /** The chain endpoints are FIFO (lease protocol, "FIFO endpoints"). @default false */
    fifo?: boolean,
  ): Promise<{ claimed: ClaimedDelivery[]; settled: Promise<void> }>;
  /**
   * Raises a lane's registered slots to `min(cap − others' live slots, want)` under the claim's lock
   * (step 3b): its slots now (null when its registration is no longer live) and the others'.
   */
  growSlots(endpointId: string, lease: string, want: number): Promise<{ slots: number | null; others: number }>;
  /** Signs and POSTs one claimed delivery, and decides what comes next for it. Never rejects. */
  attempt(delivery: ClaimedDelivery): Promise<AttemptOutcome>;
  /**
   * Records finished attempts (step 4, one statement) and, with `handOver`, takes the endpoint's next
   * due deliveries, renews or lets go of held ones. `settled` resolves once what must wait for
   * durability has run (entries acknowledged, dead letters handed to the stream, outbox woken).
   * Rejects when the database fails.
   */
  record(
    done: ReadonlyArray<{ delivery: ClaimedDelivery; outcome: AttemptOutcome }>,
    handOver: HandOver | undefined,
    /** Wait for durability even without outcomes (work entries ride on this record). */
    durable?: boolean,
  ): Promise<{ result: RecordResult; settled: Promise<void> }>;
  /** Resolves once every claim and record so far has settled (for a clean stop). */
  drain(): Promise<void>;
  onStep?(step: 'after-claim' | 'after-post'): void;
}

/**
 * The steps a lane (endpoint-lanes.ts) drives: claim (lease protocol step 3), sign each body with its
 * endpoint's active secrets (`signWebhook`) and POST it, record outcomes (step 4). A 2xx is SUCCEEDED; anything else is
 * retried with the retry policy's delay, or DEAD past the horizon, in which case the delivery is also
 * written to the dead-letter stream (the alerting feed), counted, and logged as an alert.
 */
export function createBatchAttempter(deps: BatchAttempterDeps): BatchAttempter {
  const { db, queue, deliverer, metrics, logger, retry } = deps;
  const barrier = createDurabilityBarrier(() => flushCommits(db));
  const settling = new Set<Promise<void>>();
  // Each outcome's series, looked up once (not a label object hashed per attempt).
  const series = (outcome: 'success' | 'failure') => ({
    attempts: metrics.attempts.labels({ outcome }),
    seconds: metrics.deliverySeconds.labels({ outcome }),
  });
  const succeeded = series('success');
  const failed = series('failure');

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
      eventId: delivery.eventId,
      eventType: delivery.eventType,
      attempt: delivery.attemptCount + 1,
      url: delivery.url,
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

  /** The plaintext secrets, or why there are none (an attempt that fails and is retried like any). */
  function openSecrets(delivery: ClaimedDelivery): string[] | string {
    if (delivery.secrets.length === 0) return 'the endpoint has no active signing secret';
    try {
      return deps.secrets.open(delivery.endpointId, delivery.secrets);
    } catch (error) {
      // A row sealed under a key this process lacks (its keyring differs from the API's): the message
      // names the endpoint and the key id, never secret material.
      logger.error({ err: error, endpointId: delivery.endpointId }, 'webhook signing secret does not open');
      return error instanceof Error ? error.message : 'the signing secret does not open';
    }
  }

  async function attemptOne(delivery: ClaimedDelivery): Promise<AttemptOutcome> {
    const at = new Date();
    const secrets = openSecrets(delivery);
    // Tracing on: the attempt's span, in the publishing trace, and its traceparent on the POST (attempt-span.ts).
    const traced = startAttemptSpan(delivery);
    let outcome: DeliveryOutcome;
    if (typeof secrets === 'string') {
      outcome = { ok: false, statusCode: null, durationMs: 0, error: secrets, retryAfter: null };
    } else {
      const headers = signWebhook({ eventId: delivery.eventId, rawBody: delivery.body, secrets });
      if (traced?.traceparent) headers[TRACEPARENT_HEADER] = traced.traceparent;
      outcome = await deliverer.deliver({
        endpointId: delivery.endpointId,
        url: delivery.url,
        body: delivery.body,
        headers,
      });
    }
    if (traced?.span) endAttemptSpan(traced.span, outcome);
    const series = outcome.ok ? succeeded : failed;
    series.attempts.inc();
    series.seconds.observe(outcome.durationMs / 1_000);
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
      // The usual case, a recorded success, has nothing to log.
      if (outcome.next.status === 'SUCCEEDED' && recorded.has(delivery.id)) return;
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

  const track = (settled: Promise<void>) => {
    const tracked = settled.catch(() => {});
    settling.add(tracked);
    void tracked.then(() => settling.delete(tracked));
  };

  return {
    onStep: deps.onStep,
    async claim(queued, chainEndpoints, lease, fifo) {
      const startedAt = isTracing() ? Date.now() : 0;
      const claimed = await claimDeliveries(db, {
        queued,
        chainEndpoints,
        fifo,
        endpointCap: deps.endpointCap,
        leaseMs: deps.attemptLeaseMs,
        lease,
      });
      // One statement for many events: one span linked to their traces (nothing with tracing off).
      if (startedAt > 0)
        recordBatchSpan(
          'webhook claim',
          startedAt,
          claimed.map((delivery) => delivery.traceparent),
          { 'herald.webhook.deliveries': claimed.length },
        );
      // Nothing to wait for unless work entries are to be acknowledged.
      const settled = queued.length > 0 ? barrier.wait() : Promise.resolve();
      track(settled);
      return { claimed, settled };
    },
    growSlots: (endpointId, lease, want) =>
      growEndpointSlots(db, { endpointId, lease, want, endpointCap: deps.endpointCap }),
    attempt: attemptOne,
    async record(done, handOver, durable) {
      const claimed = done.map((one) => one.delivery);
      const outcomes = done.map((one) => one.outcome);
      const result = await recordOutcomes(db, outcomes, { disableAfterMs: deps.disableAfterMs, handOver });
      reportInvalidEvents(logger, metrics, result.invalidEvents);
      for (const disabled of result.disabled) {
        metrics.disabledEndpoints.inc();
        logger.error(
          { alert: ENDPOINT_DISABLED_ALERT, endpointId: disabled.endpointId, reason: disabled.reason },
          'webhook endpoint disabled',
        );
      }
      // The record committed without waiting for the WAL flush: the endpoint's slots are free now. What
      // must not run before it is durable (work entries acknowledged, dead letters streamed, outbox
      // events relayed) waits for the shared barrier; a record that only moves slots and records
      // successes needs none (a PostgreSQL crash that forgot it means the deliveries are made again).
      const mustWait = durable || result.events > 0 || outcomes.some((outcome) => outcome.next.status === 'DEAD');
      if (outcomes.length === 0 && !mustWait) return { result, settled: Promise.resolve() };
      const settled = (mustWait ? barrier.wait() : Promise.resolve()).then(async () => {
        if (result.events > 0) deps.onOutboxEvents?.();
        await afterRecord(claimed, outcomes, result.recorded);
      });
      track(settled);
      return { result, settled };
    },
    async drain() {
      while (settling.size > 0) await Promise.all([...settling]);
    },
  };
}
