import { fileURLToPath } from 'node:url';
import { printSchema } from 'graphql';
import { schema } from './index.js';

/** The committed SDL; a test fails when it differs from what the code builds. */
export const SCHEMA_FILE = fileURLToPath(new URL('../../schema.graphql', import.meta.url));

export function printHeraldSchema(): string {
  return `${printSchema(schema)}\n`;
}
