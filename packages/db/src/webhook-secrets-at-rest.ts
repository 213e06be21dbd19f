import { type Kysely, sql } from 'kysely';
import type { Database } from './database.js';
import { openSecret, type SecretKeyring, sealSecret } from './secret-envelope.js';

/**
 * Keeping every stored signing secret sealed under the keyring's first key (docs/operations.md,
 * "Webhook encryption keys"; the table's design is in the `webhook-secrets-sealed` migration):
 * - {@link prepareWebhookSecrets} at every start: seals what still holds plaintext, then checks the
 *   keyring opens what is stored, so a wrong key stops the start instead of failing deliveries;
 * - {@link resealWebhookSecrets} behind `pnpm secrets rotate-key`: moves every row to the first key.
 *
 * Both work in batches of {@link SECRET_BATCH_SIZE} rows, online: each row is rewritten by one
 * conditional update that names the value it read, so a row another process changed meanwhile (a
 * racing start, a second rotation) is left to that process and looked at again, never overwritten.
 * A user's `rotateWebhookSecret` inserts a new row (sealed under the first key of the API's keyring)
 * and only sets `expires_at` on old ones, so it never races these updates.
 */

/** Rows read and rewritten per statement. */
export const SECRET_BATCH_SIZE = 500;
/** Passes over rows a concurrent writer changed under us before giving up (each pass shrinks them). */
const MAX_PASSES = 10;

interface BatchOptions {
  /** @default {@link SECRET_BATCH_SIZE} */
  batchSize?: number;
  /** After each batch: rows rewritten so far. */
  onBatch?(done: number): void;
}

/**
 * Seals rows that still hold plaintext (written before encryption at rest, or by a process of the
 * previous version during an upgrade) under the keyring's first key, and clears their plaintext.
 * @returns rows sealed
 */
export async function sealPlaintextWebhookSecrets(
  db: Kysely<Database>,
  keyring: SecretKeyring,
  options: BatchOptions = {},
): Promise<number> {
  const batchSize = options.batchSize ?? SECRET_BATCH_SIZE;
  let sealed = 0;
  for (let pass = 0; pass < MAX_PASSES; pass++) {
    let after = '0';
    let raced = 0;
    for (;;) {
      const rows = await db
        .selectFrom('webhook_endpoint_secrets')
        .select(['id', 'endpoint_id', 'secret'])
        .where('secret', 'is not', null)
        .where('id', '>', after)
        .orderBy('id')
        .limit(batchSize)
        .execute();
      if (rows.length === 0) break;
      after = (rows.at(-1) as { id: string }).id;
      const { rows: updated } = await sql<{ id: string }>`
        update webhook_endpoint_secrets row set sealed_secret = input.sealed, secret = null
        from unnest(${rows.map((row) => row.id)}::bigint[], ${rows.map((row) => row.secret)}::text[],
          ${rows.map((row) => sealSecret(keyring, row.endpoint_id, row.secret as string))}::text[]) as input(id, plain, sealed)
        where row.id = input.id and row.secret = input.plain
        returning row.id`.execute(db);
      sealed += updated.length;
      raced += rows.length - updated.length;
      options.onBatch?.(sealed);
    }
    if (raced === 0) break;
  }
  return sealed;
}

/**
 * Re-encrypts every sealed row that is not under the keyring's first key. Deliveries keep flowing:
 * a row is rewritten in place, and until then it opens with its old key (still in the keyring).
 * @returns rows re-encrypted, and rows still not under the first key (0 when done)
 * @throws SecretUnreadableError when a row does not open with the keyring (nothing after it is lost:
 *   rows already moved stay moved; fix the keyring and run again)
 */
export async function resealWebhookSecrets(
  db: Kysely<Database>,
  keyring: SecretKeyring,
  options: BatchOptions = {},
): Promise<{ resealed: number; remaining: number }> {
  const batchSize = options.batchSize ?? SECRET_BATCH_SIZE;
  const firstKeyId = keyring[0].id;
  let resealed = await sealPlaintextWebhookSecrets(db, keyring, options);
  for (let pass = 0; pass < MAX_PASSES; pass++) {
    let after = '0';
    for (;;) {
      const rows = await db
        .selectFrom('webhook_endpoint_secrets')
        .select(['id', 'endpoint_id', 'sealed_secret'])
        .where('sealed_secret', 'is not', null)
        .where(sql<boolean>`split_part(sealed_secret, ':', 2) <> ${firstKeyId}`)
        .where('id', '>', after)
        .orderBy('id')
        .limit(batchSize)
        .execute();
      if (rows.length === 0) break;
      after = (rows.at(-1) as { id: string }).id;
      const next = rows.map((row) =>
        sealSecret(keyring, row.endpoint_id, openSecret(keyring, row.endpoint_id, row.sealed_secret as string)),
      );
      const { rows: updated } = await sql<{ id: string }>`
        update webhook_endpoint_secrets row set sealed_secret = input.next
        from unnest(${rows.map((row) => row.id)}::bigint[], ${rows.map((row) => row.sealed_secret)}::text[],
          ${next}::text[]) as input(id, previous, next)
        where row.id = input.id and row.sealed_secret = input.previous
        returning row.id`.execute(db);
      resealed += updated.length;
      options.onBatch?.(resealed);
    }
    if ((await countNotUnderFirstKey(db, keyring)) === 0) break;
  }
  return { resealed, remaining: await countNotUnderFirstKey(db, keyring) };
}

/** Rows holding plaintext or sealed under another key than the keyring's first. */
export async function countNotUnderFirstKey(db: Kysely<Database>, keyring: SecretKeyring): Promise<number> {
  const row = await db
    .selectFrom('webhook_endpoint_secrets')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where((eb) =>
      eb.or([eb('sealed_secret', 'is', null), eb(sql<string>`split_part(sealed_secret, ':', 2)`, '<>', keyring[0].id)]),
    )
    .executeTakeFirstOrThrow();
  return Number(row.count);
}

/**
 * At start: opens one sealed row per key id found, then seals any plaintext row. A keyring that lacks
 * a key in use, or holds a different key under its id, stops the start with one message before
 * anything is sealed, so a wrong keyring never seals plaintext under a key the other processes lack.
 * @throws SecretUnreadableError naming the endpoint and the key id (never secret material)
 */
export async function prepareWebhookSecrets(db: Kysely<Database>, keyring: SecretKeyring): Promise<{ sealed: number }> {
  // One row per key id: a handful of rows however many endpoints (ids are few: one per key ever used).
  const { rows } = await sql<{ endpoint_id: string; sealed_secret: string }>`
    select distinct on (split_part(sealed_secret, ':', 2)) endpoint_id, sealed_secret
    from webhook_endpoint_secrets where sealed_secret is not null
    order by split_part(sealed_secret, ':', 2), id desc`.execute(db);
  for (const row of rows) openSecret(keyring, row.endpoint_id, row.sealed_secret);
  return { sealed: await sealPlaintextWebhookSecrets(db, keyring) };
}
