/**
 * How traffic reaches the API and how the pod count moves: Service, Ingress (ingress-nginx with WebSocket
 * timeouts), HorizontalPodAutoscaler and the PodDisruptionBudgets, in every rendered target.
 */
import { describe, expect, test } from 'vitest';
import { API, configValue, container, DISPATCHER, find } from './objects.js';
import { render, renderer, TARGETS } from './render.js';

/** ingress-nginx's default proxy timeouts (60 s) would cut quiet WebSockets; the guide promises an hour. */
const WEBSOCKET_PROXY_TIMEOUT_SECONDS = 3600;
const MAX_REQUEST_BODY_BYTES_DEFAULT = 1024 * 1024;

describe.each(TARGETS)(`k8s/%s (${renderer.name})`, (target) => {
  const objects = render(target);
  const podLabels = (name: string) => find(objects, 'Deployment', name).spec.template.metadata.labels;

  test('the API Service selects the API pods and targets their http port', () => {
    const service = find(objects, 'Service', API);
    expect(podLabels(API)).toMatchObject(service.spec.selector);
    expect(service.spec.ports).toEqual([{ name: 'http', port: 80, targetPort: 'http', protocol: 'TCP' }]);
  });

  test('the Ingress is for ingress-nginx with the WebSocket proxy timeouts', () => {
    const ingress = find(objects, 'Ingress', API);
    expect(ingress.spec.ingressClassName).toBe('nginx');
    expect(ingress.metadata.annotations).toMatchObject({
      'nginx.ingress.kubernetes.io/proxy-read-timeout': String(WEBSOCKET_PROXY_TIMEOUT_SECONDS),
      'nginx.ingress.kubernetes.io/proxy-send-timeout': String(WEBSOCKET_PROXY_TIMEOUT_SECONDS),
    });
    // Server pings (WS_KEEPALIVE_MS) must come well inside the proxy's idle timeout.
    const keepAliveMs = Number(configValue(objects, 'WS_KEEPALIVE_MS') ?? 12_000);
    expect(keepAliveMs).toBeLessThan((WEBSOCKET_PROXY_TIMEOUT_SECONDS * 1000) / 2);
  });

  test("the Ingress lets bodies up to the API's own limit through, so the API answers oversized ones", () => {
    const ingress = find(objects, 'Ingress', API);
    const bodySize = ingress.metadata.annotations['nginx.ingress.kubernetes.io/proxy-body-size'];
    const bytes = Number(/^(\d+)m$/.exec(bodySize)?.[1]) * 1024 * 1024;
    const limit = Number(configValue(objects, 'MAX_REQUEST_BODY_BYTES') ?? MAX_REQUEST_BODY_BYTES_DEFAULT);
    expect(bytes).toBeGreaterThan(limit);
  });

  test('the Ingress exposes only /graphql, on the API Service', () => {
    const ingress = find(objects, 'Ingress', API);
    const paths = ingress.spec.rules.flatMap((rule: any) => rule.http.paths);
    expect(paths).toEqual([
      { path: '/graphql', pathType: 'Exact', backend: { service: { name: API, port: { name: 'http' } } } },
    ]);
  });

  test('the HPA (autoscaling/v2) scales the API Deployment on CPU, adding fast and removing slowly', () => {
    const hpa = find(objects, 'HorizontalPodAutoscaler', API);
    expect(hpa.apiVersion).toBe('autoscaling/v2');
    expect(hpa.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: API });
    expect(hpa.spec.maxReplicas).toBeGreaterThan(hpa.spec.minReplicas);
    expect(hpa.spec.metrics).toContainEqual(
      expect.objectContaining({ type: 'Resource', resource: expect.objectContaining({ name: 'cpu' }) }),
    );
    // Each pod removed makes all its clients reconnect at once: at most one pod per two minutes.
    expect(hpa.spec.behavior.scaleDown.stabilizationWindowSeconds).toBeGreaterThanOrEqual(300);
    for (const policy of hpa.spec.behavior.scaleDown.policies) {
      expect(policy).toMatchObject({ type: 'Pods', value: 1 });
      expect(policy.periodSeconds).toBeGreaterThanOrEqual(120);
    }
    // A CPU target needs a CPU request to be a percentage of.
    expect(container(objects, API, 'api').resources.requests.cpu).toBeDefined();
  });

  test.each([API, DISPATCHER])('the PodDisruptionBudget of %s lets drains take one pod at a time', (name) => {
    const pdb = find(objects, 'PodDisruptionBudget', name);
    expect(pdb.spec.maxUnavailable).toBe(1);
    expect(pdb.spec.minAvailable).toBeUndefined();
    expect(podLabels(name)).toMatchObject(pdb.spec.selector.matchLabels);
  });
});

describe('profiles', () => {
  const minReplicas = (target: string) => find(render(target), 'HorizontalPodAutoscaler', API).spec.minReplicas;

  test('base and production keep at least two API pods; production at least three', () => {
    expect(minReplicas('base')).toBeGreaterThanOrEqual(2);
    expect(minReplicas('overlays/production')).toBeGreaterThanOrEqual(3);
  });

  test('dev runs a single API pod that may grow', () => {
    expect(minReplicas('overlays/dev')).toBe(1);
    expect(find(render('overlays/dev'), 'HorizontalPodAutoscaler', API).spec.maxReplicas).toBeGreaterThan(1);
  });

  test('production serves TLS', () => {
    const ingress = find(render('overlays/production'), 'Ingress', API);
    const hosts = ingress.spec.rules.map((rule: any) => rule.host);
    expect(ingress.spec.tls.flatMap((tls: any) => tls.hosts)).toEqual(hosts);
  });
});
