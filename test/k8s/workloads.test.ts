/**
 * What docs/operations.md promises about the two Deployments, checked in every rendered target: probes,
 * the shutdown timeline, resources, the restricted security context and spreading across nodes.
 */
import { describe, expect, test } from 'vitest';
import type { K8sObject } from './mini-kustomize.js';
import { API, CONFIG_MAP, configValue, container, DISPATCHER, find, podSpec, quantity, SECRET } from './objects.js';
import { render, renderer, TARGETS } from './render.js';

/** The API exits on its own at the latest this long after SHUTDOWN_DRAIN_DELAY_MS + SHUTDOWN_GRACE_MS (main.ts). */
const API_HARD_EXIT_MARGIN_MS = 5_000;
/** Seconds kept between the worst-case exit and SIGKILL, for a slow node. */
const GRACE_SAFETY_SECONDS = 5;

const WORKLOADS = [
  { deployment: API, container: 'api', port: 4000 },
  { deployment: DISPATCHER, container: 'webhook-dispatcher', port: 4001 },
] as const;

describe.each(TARGETS)(`k8s/%s (${renderer.name})`, (target) => {
  const objects = render(target);

  describe.each(WORKLOADS)('$deployment', ({ deployment, container: name, port }) => {
    const main = () => container(objects, deployment, name);

    test(`listens on ${port} and probes /readiness, /health and a startup probe on it`, () => {
      const c = main();
      expect(c.ports).toContainEqual({ name: 'http', containerPort: port, protocol: 'TCP' });
      expect(c.env).toContainEqual({ name: 'PORT', value: String(port) });
      expect(c.readinessProbe.httpGet).toEqual({ path: '/readiness', port: 'http' });
      expect(c.livenessProbe.httpGet).toEqual({ path: '/health', port: 'http' });
      expect(c.startupProbe.httpGet).toEqual({ path: '/health', port: 'http' });
      // Liveness must be more patient than readiness: a busy pod goes unready long before it is restarted.
      const patience = (probe: any) => probe.periodSeconds * probe.failureThreshold;
      expect(patience(c.livenessProbe)).toBeGreaterThan(patience(c.readinessProbe));
    });

    test('sets CPU and memory requests and limits, requests within limits', () => {
      const { requests, limits } = main().resources;
      for (const resource of ['cpu', 'memory']) {
        expect(requests[resource], `requests.${resource}`).toBeDefined();
        expect(limits[resource], `limits.${resource}`).toBeDefined();
        expect(quantity(requests[resource])).toBeLessThanOrEqual(quantity(limits[resource]));
      }
    });

    test('runs as a non-root uid on a read-only root filesystem, no privilege escalation, no capabilities', () => {
      const pod = podSpec(objects, deployment);
      expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } });
      expect(pod.securityContext.runAsUser).toBeGreaterThan(0);
      expect(pod.automountServiceAccountToken).toBe(false);
      expect(main().securityContext).toEqual({
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        runAsNonRoot: true,
        runAsUser: pod.securityContext.runAsUser,
        runAsGroup: pod.securityContext.runAsGroup,
        capabilities: { drop: ['ALL'] },
        seccompProfile: { type: 'RuntimeDefault' },
      });
      // The only writable path: /tmp on an emptyDir.
      expect(main().volumeMounts).toEqual([{ name: 'tmp', mountPath: '/tmp' }]);
      expect(pod.volumes.find((volume: any) => volume.name === 'tmp')?.emptyDir).toBeDefined();
    });

    test('spreads its pods across nodes and rolls out without losing capacity', () => {
      const d = find(objects, 'Deployment', deployment);
      const spread = d.spec.template.spec.topologySpreadConstraints;
      expect(spread).toContainEqual(
        expect.objectContaining({
          topologyKey: 'kubernetes.io/hostname',
          labelSelector: { matchLabels: d.spec.selector.matchLabels },
        }),
      );
      expect(d.spec.strategy.rollingUpdate.maxUnavailable).toBe(0);
      expect(d.spec.template.metadata.labels).toMatchObject(d.spec.selector.matchLabels);
    });

    test('reads settings from the generated ConfigMap and secrets from herald-secrets only', () => {
      const c = main();
      const configMap = find(objects, 'ConfigMap', CONFIG_MAP);
      expect(c.envFrom).toEqual([{ configMapRef: { name: configMap.metadata.name } }]);
      const secretRefs = c.env.filter((variable: any) => variable.valueFrom?.secretKeyRef);
      for (const variable of secretRefs) expect(variable.valueFrom.secretKeyRef.name).toBe(SECRET);
    });
  });

  test('API: no replicas field, so the HorizontalPodAutoscaler alone owns the pod count', () => {
    expect(find(objects, 'Deployment', API).spec.replicas).toBeUndefined();
  });

  test('API: preStop pause, then a grace period longer than the pause plus the whole shutdown', () => {
    const pod = podSpec(objects, API);
    const preStopSeconds = container(objects, API, 'api').lifecycle.preStop.sleep.seconds;
    const shutdownGraceMs = Number(configValue(objects, 'SHUTDOWN_GRACE_MS') ?? 10_000);
    // The API's default outside embedded mode (apps/api/src/env.ts).
    const drainDelayMs = Number(configValue(objects, 'SHUTDOWN_DRAIN_DELAY_MS') ?? 5_000);
    expect(preStopSeconds).toBeGreaterThanOrEqual(5);
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(
      preStopSeconds + (drainDelayMs + shutdownGraceMs + API_HARD_EXIT_MARGIN_MS) / 1000 + GRACE_SAFETY_SECONDS,
    );
  });

  test('API: at least one pod per node, enforced', () => {
    const spread = podSpec(objects, API).topologySpreadConstraints;
    const perNode = spread.find((constraint: any) => constraint.topologyKey === 'kubernetes.io/hostname');
    expect(perNode).toMatchObject({ maxSkew: 1, whenUnsatisfiable: 'DoNotSchedule' });
  });

  test('dispatcher: a fixed replica count, and a grace period that lets an in-flight attempt finish', () => {
    const d = find(objects, 'Deployment', DISPATCHER);
    expect(d.spec.replicas).toBeGreaterThanOrEqual(1);
    const timeoutMs = Number(configValue(objects, 'WEBHOOK_TIMEOUT_MS') ?? 10_000);
    expect(d.spec.template.spec.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(
      timeoutMs / 1000 + GRACE_SAFETY_SECONDS,
    );
  });

  test('dispatcher: never receives the JWT key', () => {
    const names = container(objects, DISPATCHER, 'webhook-dispatcher').env.map((variable: any) => variable.name);
    expect(names).toEqual(expect.arrayContaining(['DATABASE_URL', 'REDIS_URL']));
    expect(names.filter((name: string) => name.startsWith('JWT_'))).toEqual([]);
  });
});

describe('profiles', () => {
  const images = (objects: K8sObject[]) =>
    WORKLOADS.map(({ deployment, container: name }) => container(objects, deployment, name).image as string);

  test('dev: one dispatcher, small requests', () => {
    const dev = render('overlays/dev');
    expect(find(dev, 'Deployment', DISPATCHER).spec.replicas).toBe(1);
    expect(quantity(container(dev, API, 'api').resources.requests.memory)).toBeLessThanOrEqual(256 * 2 ** 20);
  });

  test('production: images from a registry with a pinned tag or digest, memory requests equal to limits', () => {
    const production = render('overlays/production');
    for (const image of images(production)) {
      expect(image).toMatch(/^[\w.-]+\.[\w.-]+(:\d+)?\/.+(:[\w][\w.-]*|@sha256:[a-f0-9]{64})$/);
      expect(image).not.toMatch(/:latest$/);
    }
    for (const { deployment, container: name } of WORKLOADS) {
      const { requests, limits } = container(production, deployment, name).resources;
      expect(quantity(requests.memory), deployment).toBe(quantity(limits.memory));
    }
    expect(find(production, 'Deployment', DISPATCHER).spec.replicas).toBeGreaterThanOrEqual(2);
  });
});
