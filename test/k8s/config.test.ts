/**
 * Configuration as the pods receive it: the API's own environment parser accepts every rendered ConfigMap
 * together with the example Secret, no real Secret is ever rendered, and the example holds placeholders.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { parse } from 'yaml';
import { loadApiConfig } from '../../apps/api/src/env.js';
import { API, container, DISPATCHER, find, SECRET } from './objects.js';
import { K8S_ROOT, render, renderer, TARGETS } from './render.js';

const exampleSecret = parse(readFileSync(join(K8S_ROOT, 'base/secret.example.yaml'), 'utf8'));

/** The environment a container of Deployment `name` starts with, secrets taken from the example. */
function containerEnv(target: string, name: string, containerName: string): Record<string, string | undefined> {
  const objects = render(target);
  const c = container(objects, name, containerName);
  const env: Record<string, string | undefined> = {};
  for (const source of c.envFrom) Object.assign(env, find(objects, 'ConfigMap', source.configMapRef.name).data);
  for (const variable of c.env) {
    const ref = variable.valueFrom?.secretKeyRef;
    env[variable.name] = ref ? exampleSecret.stringData[ref.key] : variable.value;
  }
  return env;
}

describe.each(TARGETS)(`k8s/%s (${renderer.name})`, (target) => {
  test('the API accepts its rendered environment and runs in cluster mode with production defaults', () => {
    const config = loadApiConfig(containerEnv(target, API, 'api'));
    expect(config.mode).toBe('cluster');
    expect(config.isProduction).toBe(true);
    expect(config.http.port).toBe(4000);
    expect(config.auth.key?.kind).toBe('secret');
  });

  test('renders no Secret: real secrets never live in the repository', () => {
    expect(render(target).filter((object) => object.kind === 'Secret')).toEqual([]);
  });

  test('every required secret key the pods read exists in the example', () => {
    const objects = render(target);
    for (const [name, containerName] of [
      [API, 'api'],
      [DISPATCHER, 'webhook-dispatcher'],
    ] as const) {
      for (const variable of container(objects, name, containerName).env) {
        const ref = variable.valueFrom?.secretKeyRef;
        if (!ref || ref.optional) continue;
        expect(ref.name).toBe(SECRET);
        expect(Object.keys(exampleSecret.stringData)).toContain(ref.key);
      }
    }
  });
});

test('the Secret example holds placeholders only', () => {
  expect(exampleSecret.metadata.name).toBe(SECRET);
  for (const [key, value] of Object.entries(exampleSecret.stringData)) expect(value, key).toContain('CHANGE_ME');
  expect(exampleSecret.data).toBeUndefined();
});

test('only dev allows webhook receivers on private addresses; GraphiQL is off in production', () => {
  const dev = loadApiConfig(containerEnv('overlays/dev', API, 'api'));
  const production = loadApiConfig(containerEnv('overlays/production', API, 'api'));
  expect(dev.webhooks.allowPrivateUrls).toBe(true);
  expect(production.webhooks.allowPrivateUrls).toBe(false);
  expect(production.graphql.graphiql).toBe(false);
  expect(production.graphql.introspection).toBe(false);
});
