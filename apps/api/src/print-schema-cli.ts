import { writeFileSync } from 'node:fs';
import { printHeraldSchema, SCHEMA_FILE } from './schema/print.js';

// `pnpm schema:print`: rewrites the committed schema.graphql from the code.
writeFileSync(SCHEMA_FILE, printHeraldSchema());
process.stdout.write(`wrote ${SCHEMA_FILE}\n`);
