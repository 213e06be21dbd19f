import { type Kysely, sql } from 'kysely';

// Typed against Kysely<any> on purpose: a migration describes the schema as it was on the day it
// landed and must never follow later changes to the app's Database type.
//
// A delivery's successful attempt is kept on the delivery row itself (`succeeded_at`,
// `success_status_code`, `success_duration_ms`, `success_response_body`) instead of as a row of
// `webhook_attempts`: the record that sets SUCCEEDED writes it in the same row version, so a first-attempt
// success costs PostgreSQL one row version and two index entries less (the attempt row and its two
// indexes). Failed attempts, and an attempt recorded after its lease was lost, stay in `webhook_attempts`.
// A replay moves the folded success there before it makes the delivery due again.
//
// `webhook_attempt_log` is what every reader of a delivery's attempts uses: both, one list. Its folded
// rows have no `id` (they are always their delivery's last attempt).
//
// Nullable columns without a default: adding them rewrites no row. Existing rows keep their attempts
// where they are.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('webhook_deliveries')
    .addColumn('succeeded_at', 'timestamptz')
    .addColumn('success_status_code', 'integer')
    .addColumn('success_duration_ms', 'integer')
    .addColumn('success_response_body', 'text')
    .execute();
  await sql`create view webhook_attempt_log as
    select attempt.id, attempt.delivery_id, attempt.at, attempt.status_code, attempt.duration_ms, attempt.error,
      attempt.response_body
    from webhook_attempts attempt
    union all
    select null::bigint, delivery.id, delivery.succeeded_at, delivery.success_status_code, delivery.success_duration_ms,
      null::text, delivery.success_response_body
    from webhook_deliveries delivery
    where delivery.succeeded_at is not null`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  // The successes kept on their deliveries go back to being attempt rows.
  await sql`insert into webhook_attempts (delivery_id, at, status_code, duration_ms, error, response_body)
    select id, succeeded_at, success_status_code, coalesce(success_duration_ms, 0), null, success_response_body
    from webhook_deliveries where succeeded_at is not null`.execute(db);
  await sql`drop view webhook_attempt_log`.execute(db);
  await db.schema
    .alterTable('webhook_deliveries')
    .dropColumn('succeeded_at')
    .dropColumn('success_status_code')
    .dropColumn('success_duration_ms')
    .dropColumn('success_response_body')
    .execute();
}
