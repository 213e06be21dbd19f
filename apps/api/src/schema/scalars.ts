import { BadUserInputError } from '../errors.js';
import { builder } from './builder.js';

/** ISO 8601 UTC timestamps. Accepts Date objects and ISO strings (events arrive as JSON). */
export const DateTime = builder.scalarType('DateTime', {
  description: 'An ISO 8601 timestamp in UTC, e.g. 2026-11-21T07:30:00.000Z',
  serialize: (value) => (value instanceof Date ? value : new Date(value)).toISOString(),
  parseValue: (value) => {
    const date = typeof value === 'string' ? new Date(value) : undefined;
    if (!date || Number.isNaN(date.getTime())) throw new BadUserInputError('DateTime must be an ISO 8601 string');
    return date;
  },
});
