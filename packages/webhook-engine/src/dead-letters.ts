import { type Database, findWebhookDeliveryById, replayWebhookDelivery, type WebhookDeliveryStatus } from '@herald/db';
import type { Kysely } from 'kysely';
import type { ParkedDeadLetter, WebhookQueue } from './queue/webhook-queue.js';

/** How many dead letters one listing or `replay --all` looks at. */
export const DEAD_LETTER_PAGE = 1_000;

export interface DeadLetterDeps {
  db: Kysely<Database>;
  queue: WebhookQueue;
}

export interface DeadLetterView extends ParkedDeadLetter {
  /** The delivery's state now: DEAD unless it was replayed since (or deleted with its endpoint: GONE). */
  status: WebhookDeliveryStatus | 'GONE';
}

/** The parked dead letters, oldest first, each with its delivery's current state. */
export async function listDeadLetters(deps: DeadLetterDeps, count = DEAD_LETTER_PAGE): Promise<DeadLetterView[]> {
  const parked = await deps.queue.listDeadLetters(count);
  return Promise.all(
    parked.map(async (entry) => {
      const delivery = await findWebhookDeliveryById(deps.db, entry.letter.deliveryId);
      return { ...entry, status: delivery?.status ?? 'GONE' };
    }),
  );
}

export interface ReplayResult {
  /** Deliveries made due again (same event id, fresh retry horizon). */
  replayed: string[];
  /** Dead letters whose delivery was no longer DEAD (already replayed, or deleted): only removed. */
  stale: string[];
}

/**
 * Replays dead letters: each named delivery that is still DEAD becomes PENDING and due now (the
 * dispatcher picks it up), and its dead-letter entries are removed.
 * @param ids delivery ids or dead-letter entry ids; undefined replays every parked dead letter
 */
export async function replayDeadLetters(deps: DeadLetterDeps, ids?: readonly string[]): Promise<ReplayResult> {
  const parked = await deps.queue.listDeadLetters(DEAD_LETTER_PAGE);
  const wanted = ids ? new Set(ids) : undefined;
  const chosen = parked.filter((entry) => !wanted || wanted.has(entry.id) || wanted.has(entry.letter.deliveryId));
  const result: ReplayResult = { replayed: [], stale: [] };
  for (const deliveryId of new Set(chosen.map((entry) => entry.letter.deliveryId))) {
    const delivery = await findWebhookDeliveryById(deps.db, deliveryId);
    if (delivery?.status === 'DEAD' && (await replayWebhookDelivery(deps.db, deliveryId))) {
      result.replayed.push(deliveryId);
    } else {
      result.stale.push(deliveryId);
    }
  }
  await deps.queue.removeDeadLetters(chosen.map((entry) => entry.id));
  return result;
}
