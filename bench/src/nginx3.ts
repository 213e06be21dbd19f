/**
 * `pnpm bench --scenarios nginx3 --sockets 6000`: load through the load balancer. Three Herald
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

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type NginxProcess, startNginx } from '../../test/support/nginx.js';
import { onCleanup, procSampleAll, round } from './common.js';
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
  // nginx's own CPU (master and worker), from the last time the sockets were counted (set-up done) to the end.
  const nginxPids = (): number[] => {
    try {
      const master = Number(readFileSync(join(nginx.dir, 'nginx.pid'), 'utf8').trim());
      const children = readFileSync(`/proc/${master}/task/${master}/children`, 'utf8').trim().split(/\s+/);
      return [master, ...children.filter(Boolean).map(Number)];
    } catch {
      return [];
    }
  };
  let cpuMark: { cpuUs: number; delivered: number } | undefined;
  let nginxCpuUsPerDelivery: number | undefined;
  const nginxNote = () =>
    `${NGINX3_PODS} pods behind the nginx of deploy/ (herald.conf.template, one worker, round robin, WS_REBALANCE=false); every socket connects to nginx; ${spreadNote()}; nginx's own CPU (not in the server CPU column): ${nginxCpuUsPerDelivery ?? 'not measured'} µs per delivery after set-up`;
  const notes = [...herald.notes, ''];
  const refreshNote = () => {
    notes[notes.length - 1] = nginxNote();
  };
  const delivered = async () => (await herald.serverCounters()).herald_events_delivered_total ?? 0;

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
      cpuMark = { cpuUs: procSampleAll(nginxPids()).cpuUs, delivered: await delivered() };
      refreshNote();
      return total;
    },
    async serverCounters() {
      const counters = await herald.serverCounters();
      const deliveries = (counters.herald_events_delivered_total ?? 0) - (cpuMark?.delivered ?? 0);
      if (cpuMark && deliveries > 0) {
        nginxCpuUsPerDelivery = round((procSampleAll(nginxPids()).cpuUs - cpuMark.cpuUs) / deliveries, 2);
        counters.nginx_cpu_us_per_delivery = nginxCpuUsPerDelivery;
      }
      refreshNote();
      lastSpread?.perPod.forEach((count, index) => {
        counters[`nginx_spread_pod${index + 1}_sockets`] = count;
      });
      return counters;
    },
    spread: () => lastSpread,
    // One array, its last line updated in place: the fan-out run keeps this reference before it reads the
    // counters (which is when nginx's CPU is known).
    notes,
    async stop() {
      unregister();
      await nginx.stop();
      await herald.stop();
    },
  };
}
