import { createServer, type Server } from 'node:http';
import type { LifecycleReadiness, Readiness } from '@herald/config';
import type { Registry } from 'prom-client';

export const HEALTH_PATH = '/health';
export const READINESS_PATH = '/readiness';
export const METRICS_PATH = '/metrics';

export interface OpsServerDeps {
  registry: Registry;
  /** Whether the dispatcher can do its work right now, and if not, why (and in which part). */
  readiness(): Promise<Readiness | LifecycleReadiness>;
}

/**
 * The dispatcher's operations endpoints: `/health` (liveness: the process answers), `/readiness` (200
 * while the dispatcher runs and its database and queue answer, else 503 with the reason, e.g.
 * `{"status":"not ready","reason":"database unreachable","part":"dispatcher"}`) and `/metrics` (Prometheus).
 * Never listens by itself.
 */
export function createOpsServer(deps: OpsServerDeps): Server {
  return createServer(async (req, res) => {
    const path = new URL(req.url ?? '/', 'http://ops').pathname;
    try {
      if (path === HEALTH_PATH) {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
      } else if (path === READINESS_PATH) {
        const { ready, ...why } = await deps.readiness();
        res
          .writeHead(ready ? 200 : 503, { 'content-type': 'application/json' })
          .end(JSON.stringify(ready ? { status: 'ready' } : { status: 'not ready', ...why }));
      } else if (path === METRICS_PATH) {
        const body = await deps.registry.metrics();
        res.writeHead(200, { 'content-type': deps.registry.contentType }).end(body);
      } else {
        res.writeHead(404).end();
      }
    } catch {
      res.writeHead(500).end();
    }
  });
}
