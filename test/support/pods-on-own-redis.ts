import { signToken } from '@herald/auth';
import { createTestSchema, type TestSchema } from '@herald/testing';
import { freePort, waitFor } from '@herald/testing/ports';
import { type ApiProcess, startApiProcess } from './api-process.js';
import { type OwnRedis, ownRedis } from './redis-server.js';
import { readMetric, type Subscriber, subscribePostPublished } from './subscribers.js';

/**
 * Two API pods on a fresh schema and a redis-server of the test's own (which the test may kill and start
 * again), each with live `postPublished` subscribers of one organisation.
 */
export interface PodsOnOwnRedis {
  schema: TestSchema;
  redis: OwnRedis;
  pods: ApiProcess[];
  /** Pod by pod: the first pod's subscribers, then the second's. */
  subscribers: Subscriber[];
  /** A writer of the organisation, signed with the pods' JWT_SECRET. */
  token: string;
  /** Closes the subscribers, stops the pods (SIGTERM), removes Redis and the schema; safe after a partial start. */
  stop(): Promise<void>;
}

export async function startPodsOnOwnRedis(options: {
  databaseUrl: string;
  jwtSecret: string;
  orgId: string;
  subscribersPerPod: number;
}): Promise<PodsOnOwnRedis> {
  const { databaseUrl, jwtSecret, orgId, subscribersPerPod } = options;
  let schema: TestSchema | undefined;
  let redis: OwnRedis | undefined;
  let pods: ApiProcess[] = [];
  let subscribers: Subscriber[] = [];
  const stop = async () => {
    await Promise.all(subscribers.map((subscriber) => subscriber.client.dispose()));
    await Promise.all(pods.map((pod) => pod.stop('SIGTERM')));
    await redis?.cleanup();
    await schema?.drop();
  };
  try {
    schema = await createTestSchema(databaseUrl);
    redis = await ownRedis(await freePort());
    await redis.start();
    const token = await signToken(jwtSecret, { sub: 'writer', orgs: [orgId] });
    const env = { DATABASE_URL: schema.url, REDIS_URL: redis.url, JWT_SECRET: jwtSecret };
    pods = await Promise.all([startApiProcess(env), startApiProcess(env)]);
    subscribers = pods.flatMap((pod) =>
      Array.from({ length: subscribersPerPod }, () =>
        subscribePostPublished(`ws://127.0.0.1:${pod.port}/graphql`, token, orgId),
      ),
    );
    await waitFor(`${subscribersPerPod} subscription(s) on each pod`, async () => {
      const counts = await Promise.all(pods.map((pod) => readMetric(pod.baseUrl, 'herald_subscriptions_active')));
      return counts.every((count) => count === subscribersPerPod);
    });
    return { schema, redis, pods, subscribers, token, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
