/**
 * Every manifest under k8s/, rendered per overlay, validates against the Kubernetes API schemas
 * (kubernetes-models; the Prometheus Operator CRDs via @kubernetes-models/prometheus-operator), and no YAML
 * file under k8s/ escapes rendering.
 *
 * The schemas check types, required fields, enums and formats. Like the API server's OpenAPI they don't
 * forbid unknown fields, so a misspelled optional field passes here: the other k8s tests read each field
 * the operations guide promises at its exact path, which catches the ones that matter.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { PrometheusRule, ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { Ingress } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ConfigMap, Namespace, Secret, Service } from 'kubernetes-models/v1';
import { describe, expect, test } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import type { K8sObject } from './mini-kustomize.js';
import { K8S_ROOT, render, renderer, TARGETS } from './render.js';

interface Model {
  apiVersion: string;
  kind: string;
  new (data: any): { validate(): void };
}

/** The kinds Herald ships. A new kind fails the test until its model is added here. */
const MODELS: readonly Model[] = [
  Namespace,
  ConfigMap,
  Secret,
  Service,
  Deployment,
  HorizontalPodAutoscaler,
  PodDisruptionBudget,
  Ingress,
  PrometheusRule,
  ServiceMonitor,
];

function validate(object: K8sObject): void {
  const model = MODELS.find(
    (candidate) => candidate.apiVersion === object.apiVersion && candidate.kind === object.kind,
  );
  if (!model) throw new Error(`no schema for ${object.apiVersion} ${object.kind}: add its model to MODELS`);
  new model(object).validate();
}

test('renders the base and both overlays', () => {
  expect(TARGETS).toEqual(expect.arrayContaining(['base', 'overlays/dev', 'overlays/production']));
});

describe.each(TARGETS)(`k8s/%s rendered with ${renderer.name}`, (target) => {
  test('every object validates against its Kubernetes API schema', () => {
    const objects = render(target);
    expect(objects.length).toBeGreaterThan(10);
    for (const object of objects) {
      expect(() => validate(object), `${object.kind}/${object.metadata.name}`).not.toThrow();
    }
  });

  test('every namespaced object lands in the herald namespace, and names are unique per kind', () => {
    const objects = render(target);
    for (const object of objects) {
      expect(object.metadata.namespace, `${object.kind}/${object.metadata.name}`).toBe(
        object.kind === 'Namespace' ? undefined : 'herald',
      );
    }
    const ids = objects.map((object) => `${object.kind}/${object.metadata.name}`);
    expect(new Set(ids).size).toBe(ids.length);
  });
});

describe('files under k8s/', () => {
  const files = walk(K8S_ROOT).filter((file) => /\.ya?ml$/.test(file));
  const kustomizations = files.filter((file) => /(^|\/)kustomization\.ya?ml$/.test(file));

  test('every YAML file is a kustomization, a resource or patch one of them lists, or the Secret example', () => {
    const listed = new Set<string>();
    for (const file of kustomizations) {
      const kustomization = parse(readFileSync(join(K8S_ROOT, file), 'utf8'));
      const dir = join(K8S_ROOT, file, '..');
      for (const entry of kustomization.resources ?? []) listed.add(relative(K8S_ROOT, join(dir, entry)));
      for (const patch of kustomization.patches ?? []) listed.add(relative(K8S_ROOT, join(dir, patch.path)));
    }
    const unaccounted = files.filter(
      (file) => !kustomizations.includes(file) && !listed.has(file) && file !== 'base/secret.example.yaml',
    );
    expect(unaccounted).toEqual([]);
  });

  test('the Secret example validates as a Secret', () => {
    const documents = parseAllDocuments(readFileSync(join(K8S_ROOT, 'base/secret.example.yaml'), 'utf8'));
    expect(documents).toHaveLength(1);
    const secret = documents[0]!.toJS() as K8sObject;
    expect(secret.kind).toBe('Secret');
    expect(() => validate(secret)).not.toThrow();
  });
});

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : [relative(K8S_ROOT, path)];
  });
}
