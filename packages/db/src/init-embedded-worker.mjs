// Child process of `createDatabase` (embedded mode): creates a PGlite data directory (initdb) and exits,
// so the WebAssembly memory initdb needs is freed with the process instead of staying in the API process.
// Plain JavaScript on purpose: it runs with plain `node`, without the TypeScript loader of its parent.
// Argument: JSON `{ dataDir, startParams }`.
import { PGlite } from '@electric-sql/pglite';

const { dataDir, startParams } = JSON.parse(process.argv[2] ?? '{}');
const db = await PGlite.create(dataDir, { startParams });
await db.close();
