import { resolveCursorConnection } from '@pothos/plugin-relay';
import { BadUserInputError } from '../errors.js';

/** Page size when `first` is not given. */
export const DEFAULT_PAGE_SIZE = 20;
/** Largest `first` accepted; more is BAD_USER_INPUT. */
export const MAX_PAGE_SIZE = 100;

/** Which rows one page covers, in the terms of a keyset query on a `seq` column (newest first). */
export interface SeqPage {
  /** Rows older than this `seq` (the `after` cursor). */
  afterSeq: string | null;
  /** Rows newer than this `seq` (the `before` cursor). */
  beforeSeq: string | null;
  limit: number;
  /** Walk from the oldest end (for `last`); the rows come back reversed. */
  inverted: boolean;
}

/**
 * A Relay connection over rows ordered by a `seq` column, newest first, with opaque cursors
 * (`base64url("<kind>:<seq>")`). A garbled or foreign cursor and a `first` outside 0..100 are
 * BAD_USER_INPUT, never a database error.
 */
export function resolveSeqConnection<Row extends { seq: string | number | bigint }>(
  kind: string,
  args: { first?: number | null; after?: string | null; last?: number | null; before?: string | null },
  load: (page: SeqPage) => Promise<Row[]>,
) {
  if (args.first != null && (args.first < 0 || args.first > MAX_PAGE_SIZE)) {
    throw new BadUserInputError(`first must be between 0 and ${MAX_PAGE_SIZE}`, 'first');
  }
  const prefix = `${kind}:`;
  return resolveCursorConnection<Promise<Row[]>>(
    {
      args,
      // A method, not an arrow property: see builder.ts's authScopes (esbuild's `__name` per request).
      toCursor(row: Row) {
        return Buffer.from(`${prefix}${row.seq}`).toString('base64url');
      },
      defaultSize: DEFAULT_PAGE_SIZE,
      maxSize: MAX_PAGE_SIZE,
    },
    ({ after, before, limit, inverted }) =>
      load({
        afterSeq: after == null ? null : decodeSeqCursor(prefix, after, 'after'),
        beforeSeq: before == null ? null : decodeSeqCursor(prefix, before, 'before'),
        limit,
        inverted,
      }),
  );
}

/** The `seq` of a cursor made by `toCursor` above. @throws BadUserInputError for anything else */
function decodeSeqCursor(prefix: string, cursor: string, argument: string): string {
  const decoded = Buffer.from(cursor, 'base64url').toString('utf8');
  const seq = decoded.startsWith(prefix) ? decoded.slice(prefix.length) : '';
  if (!/^\d{1,19}$/.test(seq)) throw new BadUserInputError(`${argument} is not a valid cursor`, argument);
  return seq;
}
