import type { Database } from '@herald/db';
import { type Kysely, sql } from 'kysely';
import { markDeadLettersStreamed } from './lease-protocol.js';
import type { DeadLetter, WebhookQueue } from './queue/webhook-queue.js';
import { redactUrl } from './url-policy.js';

/*
 * Dead letters are DEAD deliveries: the database is their one record. Listing reads
 * `webhook_deliveries` (walking the partial index on `seq` where DEAD), so any number of them is
 * listed; replaying them changes their state, so it is the lease protocol's (`replayDeadLetters`,
 * lease-protocol/replay.ts), as is noting that one was streamed. The dead-letter stream is an alerting
 * feed only: each DEAD delivery is written to it once (`dead_letter_streamed_at`), and one that could
 * not be written is written later.
 */

/** Dead letters per listing page. */
export const DEAD_LETTER_PAGE = 500;

export interface DeadLetterView {
  /** The delivery id. */
  id: string;
  status: 'DEAD';
  letter: DeadLetter;
}

/** One page of DEAD deliveries, oldest first, after the `afterSeq` cursor. */
export async function listDeadLetterPage(
  db: Kysely<Database>,
  options: { limit?: number; afterSeq?: string; endpointId?: string; ids?: readonly string[] } = {},
): Promise<{ letters: DeadLetterView[]; nextSeq: string | undefined }> {
  const limit = options.limit ?? DEAD_LETTER_PAGE;
  const { rows } = await sql<{
    id: string;
    seq: string;
    event_id: string;
    event_type: string;
    org_id: string;
    endpoint_id: string;
    url: string;
    attempt_count: number;
    updated_at: Date;
    status_code: number | null;
    error: string | null;
  }>`
    select delivery.id, delivery.seq, delivery.event_id, delivery.event_type, delivery.org_id, delivery.endpoint_id,
      endpoint.url, delivery.attempt_count, delivery.updated_at, last.status_code, last.error
    from webhook_deliveries delivery
    join webhook_endpoints endpoint on endpoint.id = delivery.endpoint_id
    left join lateral (
      select status_code, error from webhook_attempts where delivery_id = delivery.id order by id desc limit 1
    ) last on true
    where delivery.status = 'DEAD' and delivery.seq > ${options.afterSeq ?? '0'}::bigint
      and (${options.endpointId ?? null}::text is null or delivery.endpoint_id = ${options.endpointId ?? null})
      and (${options.ids ? [...options.ids] : null}::text[] is null or delivery.id = any(${options.ids ? [...options.ids] : null}::text[]))
    order by delivery.seq
    limit ${limit}
  `.execute(db);
  return {
    letters: rows.map((row) => ({
      id: row.id,
      status: 'DEAD',
      letter: {
        deliveryId: row.id,
        eventId: row.event_id,
        eventType: row.event_type,
        orgId: row.org_id,
        endpointId: row.endpoint_id,
        url: redactUrl(row.url),
        attempts: row.attempt_count,
        lastStatusCode: row.status_code,
        lastError: row.error,
        deadAt: new Date(row.updated_at).toISOString(),
      },
    })),
    nextSeq: rows.length === limit ? rows.at(-1)?.seq : undefined,
  };
}

/** Every DEAD delivery, oldest first, page by page. */
export async function* listDeadLetters(
  db: Kysely<Database>,
  options: { endpointId?: string } = {},
): AsyncGenerator<DeadLetterView> {
  let afterSeq: string | undefined;
  do {
    const page = await listDeadLetterPage(db, { ...options, afterSeq });
    yield* page.letters;
    afterSeq = page.nextSeq;
  } while (afterSeq);
}

/**
 * Writes DEAD deliveries missing from the dead-letter stream (it could not be written when they died).
 * @returns how many were written
 */
export async function streamMissedDeadLetters(db: Kysely<Database>, queue: WebhookQueue, limit = 100): Promise<number> {
  const { rows } = await sql<{ id: string }>`
    select id from webhook_deliveries
    where status = 'DEAD' and dead_letter_streamed_at is null and updated_at < now() - interval '2 seconds'
    order by seq limit ${limit}
  `.execute(db);
  if (rows.length === 0) return 0;
  const page = await listDeadLetterPage(db, { ids: rows.map((row) => row.id), limit });
  const letters = page.letters.map((view) => view.letter);
  for (const letter of letters) await queue.deadLetter(letter);
  // Those the page left out have no endpoint row (deleted by hand): nothing to alert about, and left
  // unmarked they would fill every later page, so no newer missed dead letter would be streamed.
  await markDeadLettersStreamed(
    db,
    rows.map((row) => row.id),
  );
  return letters.length;
}
