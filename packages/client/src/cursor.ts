// The cursor format is defined once, in @herald/contracts (cursor.ts), for the API and this library.
export { type CursorPlace, isAfter, readCursor } from '@herald/contracts';
