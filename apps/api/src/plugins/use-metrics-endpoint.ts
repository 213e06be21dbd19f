import type { Plugin } from 'graphql-yoga';
import type { Registry } from 'prom-client';

export const METRICS_PATH = '/metrics';

/** Serves the registry's metrics in Prometheus text format on `GET /metrics`. */
export function useMetricsEndpoint(registry: Registry): Plugin {
  return {
    async onRequest({ request, url, fetchAPI, endResponse }) {
      if (url.pathname !== METRICS_PATH || request.method !== 'GET') return;
      endResponse(
        new fetchAPI.Response(await registry.metrics(), {
          status: 200,
          headers: { 'content-type': registry.contentType },
        }),
      );
    },
  };
}
