// Worker thread of `createDatabase` (embedded mode): creates a PGlite data directory (initdb) and exits,
// so the WebAssembly memory initdb needs is freed with the thread instead of staying in the API process.
// Plain JavaScript on purpose: a worker thread does not inherit the TypeScript loader of its parent.
import { workerData } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';

const db = await PGlite.create(workerData.dataDir, { startParams: workerData.startParams });
await db.close();
