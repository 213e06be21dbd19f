import { notReady, READY, type Readiness } from '@herald/config';
import type { HeraldDatabase } from '@herald/db';
import type { Logger } from './logger.js';
import type { PubSubService } from './realtime/pubsub.js';

// What `/readiness` asks of the database and Redis: used by the lifecycle's parts (app-parts.ts) and by
// a server built without a registry (server.ts).

/** The database answers a ping (bounded by the ping's timeout); a failure is logged and named. */
export async function databaseReadiness(database: HeraldDatabase, logger: Logger): Promise<Readiness> {
  try {
    await database.ping();
    return READY;
  } catch (error) {
    logger.warn({ err: error }, 'readiness: database unreachable');
    return notReady('database unreachable');
  }
}

/** Redis answers (always ready in memory). */
export function pubsubReadiness(pubsub: PubSubService): Readiness {
  return pubsub.readiness();
}
