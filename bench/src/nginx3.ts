/**
 * `pnpm bench --scenarios nginx3 --sockets 6000` (issue 14): load through the load balancer. Three Herald
 * pods on PostgreSQL + Redis behind the nginx config users deploy (deploy/nginx/herald.conf.template,
 * rendered and run as test/support/nginx.ts does: one worker, round robin). Every load-client socket
 * connects to nginx, which alone decides the pod; the fan-out run then measures deliveries/s, latency and
 * CPU as for the other scenarios (the three pods' CPU and RSS; nginx's own CPU is not counted), and this
 * target reports how evenly nginx spread the sockets: per-pod open sockets once all are subscribed.
 *
 * Socket rebalancing stays off (the bench's load clients never reconnect): the spread is nginx's alone.
 * One nginx worker holds two descriptors per socket, so past ~9,000 sockets (20,000 open files) it runs out:
 * the scenario refuses sizes above {@link NGINX3_MAX_SOCKETS}.
 */
import { type NginxProcess, startNginx } from '../../test/support/nginx.js';
import { onCleanup } from './common.js';
import { type HeraldOptions, type HeraldTarget, startHeraldTarget } from './targets.js';

export const NGINX3_PODS = 3 as const;
/** One nginx worker, two descriptors per proxied socket, 20,000 open files per process here. */
export const NGINX3_MAX_SOCKETS = 8_000;

export interface NginxSpread {
  /** Open WebSockets per pod, in pod order. */
  perPod: number[];
  min: number;
  max: number;
  /** min ÷ max (1 = perfectly even). */
  evenness: number;
}

export interface NginxTarget extends HeraldTarget {
  /** The per-pod socket counts seen the last time every expected socket was subscribed. */
  spread(): NginxSpread | undefined;
}

export async function startNginxTarget(
  options: Omit<HeraldOptions, 'pods' | 'pubsub' | 'database'> & { redisUrl: string | undefined },
): Promise<NginxTarget> {
  const herald = await startHeraldTarget({ ...options, pods: NGINX3_PODS, pubsub: 'redis', database: 'postgres' });
  const podUrls = herald.wsUrls.map((url) => url.replace(/^ws:/, 'http:').replace(/\/graphql$/, ''));
  let nginx: NginxProcess;
  try {
    nginx = await startNginx(podUrls.map((url) => Number(new URL(url).port)));
  } catch (error) {
    await herald.stop();
    throw error;
  }
  const unregister = onCleanup(() => nginx.stop());
  let lastSpread: NginxSpread | undefined;

  const openSockets = () =>
    Promise.all(
      podUrls.map(async (url) => {
        const text = await (await fetch(`${url}/metrics`)).text();
        const line = text.split('\n').find((candidate) => candidate.startsWith('herald_ws_open_sockets '));
        return line ? Number(line.split(' ')[1]) : 0;
      }),
    );
  const spreadNote = () =>
    lastSpread
      ? `nginx spread the sockets ${lastSpread.perPod.join(' / ')} over the pods (min ${lastSpread.min}, max ${lastSpread.max}, min/max ${lastSpread.evenness})`
      : 'nginx spread: not measured';

  return {
    label: options.label,
    // Every socket goes through nginx; it picks the pod.
    wsUrls: [`ws://127.0.0.1:${nginx.port}/graphql`],
    pids: herald.pids,
    inspectors: herald.inspectors,
    token: herald.token,
    orgId: herald.orgId,
    env: herald.env,
    get deaths() {
      return herald.deaths;
    },
    graphql: (query, variables) => herald.graphql(query, variables),
    prepareEvents: (count) => herald.prepareEvents(count),
    publish: (event) => herald.publish(event),
    async subscribed() {
      const [total, perPod] = await Promise.all([herald.subscribed(), openSockets()]);
      const min = Math.min(...perPod);
      const max = Math.max(...perPod);
      lastSpread = { perPod, min, max, evenness: max > 0 ? Math.round((min / max) * 100) / 100 : 1 };
      return total;
    },
    async serverCounters() {
      const counters = await herald.serverCounters();
      lastSpread?.perPod.forEach((count, index) => {
        counters[`nginx_spread_pod${index + 1}_sockets`] = count;
      });
      return counters;
    },
    spread: () => lastSpread,
    get notes() {
      return [
        ...herald.notes,
        `${NGINX3_PODS} pods behind the nginx of deploy/ (herald.conf.template, one worker, round robin, WS_REBALANCE=false); every socket connects to nginx; ${spreadNote()}`,
      ];
    },
    async stop() {
      unregister();
      await nginx.stop();
      await herald.stop();
    },
  };
}
