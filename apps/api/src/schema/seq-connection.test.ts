import { resolveCursorConnection } from '@pothos/plugin-relay';
import { describe, expect, it } from 'vitest';
import { resolveSeqConnection, type SeqPage } from './seq-connection.js';

/** Seven rows, seq 1..7, read as the posts page query does (newest first; `inverted`: oldest first). */
const ROWS = Array.from({ length: 7 }, (_, k) => ({ seq: String(k + 1), title: `r${k + 1}` }));
async function load(page: SeqPage) {
  const rows = ROWS.filter(
    (row) =>
      (page.afterSeq === null || Number(row.seq) < Number(page.afterSeq)) &&
      (page.beforeSeq === null || Number(row.seq) > Number(page.beforeSeq)),
  ).sort((a, b) => (page.inverted ? 1 : -1) * (Number(a.seq) - Number(b.seq)));
  return rows.slice(0, page.limit);
}

const cursor = (seq: number) => Buffer.from(`row:${seq}`).toString('base64url');

/** The connection as plain data, every cursor read (what a client asking for all fields gets). */
function plain(connection: { edges: Array<{ cursor: string; node: unknown } | null>; pageInfo: object }) {
  const { pageInfo } = connection as { pageInfo: Record<string, unknown> };
  return {
    edges: connection.edges.map((edge) => ({ cursor: edge?.cursor, node: edge?.node })),
    pageInfo: {
      startCursor: pageInfo.startCursor,
      endCursor: pageInfo.endCursor,
      hasPreviousPage: pageInfo.hasPreviousPage,
      hasNextPage: pageInfo.hasNextPage,
    },
  };
}

describe('resolveSeqConnection', () => {
  const cases = [
    {},
    { first: 3 },
    { first: 0 },
    { first: 10 },
    { first: 2, after: cursor(5) },
    { first: 2, after: cursor(1) },
    { last: 2 },
    { last: 3, before: cursor(3) },
    { before: cursor(6) },
    { after: cursor(6), before: cursor(2) },
    { last: 2, after: cursor(7) },
  ];
  it.each(cases)('answers what Pothos resolveCursorConnection answers, cursors read when asked (%j)', async (args) => {
    const ours = await resolveSeqConnection('row', args, load);
    const theirs = await resolveCursorConnection(
      {
        args,
        toCursor: (row) => cursor(Number((row as { seq: string }).seq)),
        defaultSize: 20,
        maxSize: 100,
      },
      ({ after, before, limit, inverted }) =>
        load({
          afterSeq: after ? Buffer.from(after, 'base64url').toString().slice(4) : null,
          beforeSeq: before ? Buffer.from(before, 'base64url').toString().slice(4) : null,
          limit,
          inverted,
        }),
    );
    expect(plain(ours)).toEqual(plain(theirs as never));
  });
});
