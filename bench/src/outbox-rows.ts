import { randomUUID } from 'node:crypto';

/** One `post.published` outbox row as the API writes it, for the dispatcher benches' backlogs. */
export interface BenchOutboxRow {
  id: string;
  org_id: string;
  type: 'post.published';
  body: string;
}

/** Outbox rows `from` ≤ i < `to` of a backlog for `orgId`, each with its own event id and body. */
export function benchOutboxRows(orgId: string, from: number, to: number): BenchOutboxRow[] {
  const rows: BenchOutboxRow[] = [];
  for (let i = from; i < to; i++) {
    const id = `evt_${randomUUID().replaceAll('-', '')}`;
    const created = new Date().toISOString();
    const body = JSON.stringify({
      id,
      type: 'post.published',
      created,
      data: {
        id: randomUUID(),
        orgId,
        title: `A post title of a usual length, number ${i}`,
        tags: ['bench', 'webhooks'],
        status: 'PUBLISHED',
        publishedAt: created,
        author: { id: randomUUID(), name: 'Bench Author' },
      },
    });
    rows.push({ id, org_id: orgId, type: 'post.published', body });
  }
  return rows;
}
