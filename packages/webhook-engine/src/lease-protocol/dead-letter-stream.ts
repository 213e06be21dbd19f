import type { Database } from '@herald/db';
import { type Kysely, sql } from 'kysely';

/**
 * Notes that these DEAD deliveries are in the dead-letter stream (`dead_letter_streamed_at`; see
 * dead-letters.ts): they are not written to it again unless replayed and dead again.
 */
export async function markDeadLettersStreamed(db: Kysely<Database>, ids: readonly string[]): Promise<void> {
  if (ids.length === 0) return;
  await sql`update webhook_deliveries set dead_letter_streamed_at = now()
    where id = any(${ids}::text[]) and status = 'DEAD'`.execute(db);
}
