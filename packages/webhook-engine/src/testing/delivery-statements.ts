import type { Database } from '@herald/db';
import { type Kysely, sql } from 'kysely';

/** One statement that updated `webhook_deliveries`, as {@link watchDeliveryUpdates} saw it. */
export interface DeliveryUpdateStatement {
  /** Rows the statement updated. */
  rows: number;
  /** Of those, rows that were DEAD and are PENDING now (replayed). */
  replayed: number;
  /** Its transaction. */
  txid: string;
}

export interface DeliveryUpdateWatch {
  /** The statements seen so far, in order. */
  statements(): Promise<DeliveryUpdateStatement[]>;
  /** Forgets the statements seen so far. */
  clear(): Promise<void>;
  /** Removes the trigger and its table. */
  stop(): Promise<void>;
}

/**
 * Records every statement that updates `webhook_deliveries` in this schema (a statement-level trigger
 * with transition tables): how many rows it updated, how many of them it replayed, and in which
 * transaction. For tests that pin how a change is cut into statements; one watch per schema at a time.
 */
export async function watchDeliveryUpdates(db: Kysely<Database>): Promise<DeliveryUpdateWatch> {
  await sql`create table test_delivery_update_statements (n serial primary key, rows int not null, replayed int not null, txid bigint not null)`.execute(
    db,
  );
  await sql`create function test_log_delivery_update() returns trigger language plpgsql as $$
    begin
      insert into test_delivery_update_statements (rows, replayed, txid)
      select count(1), count(1) filter (where changed.status = 'PENDING' and previous.status = 'DEAD'), txid_current()
      from changed left join previous on previous.id = changed.id;
      return null;
    end $$`.execute(db);
  await sql`create trigger test_log_delivery_update after update on webhook_deliveries
    referencing old table as previous new table as changed for each statement execute function test_log_delivery_update()`.execute(
    db,
  );
  return {
    async statements() {
      const { rows } = await sql<DeliveryUpdateStatement>`
        select rows, replayed, txid::text as txid from test_delivery_update_statements order by n`.execute(db);
      return rows;
    },
    async clear() {
      await sql`delete from test_delivery_update_statements`.execute(db);
    },
    async stop() {
      await sql`drop trigger test_log_delivery_update on webhook_deliveries`.execute(db);
      await sql`drop function test_log_delivery_update()`.execute(db);
      await sql`drop table test_delivery_update_statements`.execute(db);
    },
  };
}
