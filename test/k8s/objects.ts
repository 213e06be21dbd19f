/** Lookups into rendered objects shared by the k8s tests. */
import type { K8sObject } from './mini-kustomize.js';

export const API = 'herald-api';
export const DISPATCHER = 'herald-webhook-dispatcher';
export const CONFIG_MAP = 'herald-config';
export const SECRET = 'herald-secrets';

/** The one object of `kind` named `name` (for a generated ConfigMap, the name before its hash suffix). */
export function find<T = any>(objects: readonly K8sObject[], kind: string, name: string): T {
  const matches = objects.filter(
    (object) =>
      object.kind === kind &&
      (object.metadata.name === name ||
        (kind === 'ConfigMap' && new RegExp(`^${name}-[a-z0-9]{10}$`).test(object.metadata.name))),
  );
  if (matches.length !== 1) throw new Error(`expected one ${kind} ${name}, found ${matches.length}`);
  return matches[0] as T;
}

/** The pod spec of Deployment `name`. */
export function podSpec(objects: readonly K8sObject[], name: string): any {
  return find(objects, 'Deployment', name).spec.template.spec;
}

/** The container `containerName` of Deployment `name`. */
export function container(objects: readonly K8sObject[], name: string, containerName: string): any {
  const found = podSpec(objects, name).containers.find((candidate: any) => candidate.name === containerName);
  if (!found) throw new Error(`Deployment ${name} has no container ${containerName}`);
  return found;
}

/** A setting from the rendered herald-config ConfigMap. */
export function configValue(objects: readonly K8sObject[], key: string): string | undefined {
  return find(objects, 'ConfigMap', CONFIG_MAP).data?.[key];
}

/** Kubernetes quantity → number (CPU in cores, memory in bytes), for comparing requests with limits. */
export function quantity(value: string | number): number {
  const match = /^(\d+(?:\.\d+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$/.exec(String(value));
  if (!match) throw new Error(`not a quantity: ${value}`);
  const factor: Record<string, number> = {
    m: 1e-3,
    k: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
    Ki: 2 ** 10,
    Mi: 2 ** 20,
    Gi: 2 ** 30,
    Ti: 2 ** 40,
  };
  return Number(match[1]) * (match[2] ? factor[match[2]]! : 1);
}
