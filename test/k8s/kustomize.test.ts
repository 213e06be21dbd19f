/**
 * mini-kustomize renders the k8s tests where no real kustomize exists, so it must agree with kustomize:
 * wherever the machine has kustomize v5+ (standalone or in kubectl), every target is rendered by both and
 * compared object by object. The unit tests below pin the behaviour the comparison relies on, so they
 * hold on machines without the binary too.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { build, type K8sObject, strategicMerge } from './mini-kustomize.js';
import { findKustomizeBinary, renderWithBinary, renderWithMini, TARGETS } from './render.js';

const binary = findKustomizeBinary();

function byId(objects: K8sObject[]): Record<string, K8sObject> {
  return Object.fromEntries(
    objects.map((object) => [`${object.kind}/${object.metadata.namespace ?? ''}/${object.metadata.name}`, object]),
  );
}

const binaryName = binary ? `${binary.command.join(' ')} ${binary.version}` : 'kustomize v5+ (none on this machine)';

describe.skipIf(!binary)(`mini-kustomize agrees with ${binaryName}`, () => {
  test.each(TARGETS)('k8s/%s renders to the same objects', (target) => {
    expect(byId(renderWithMini(target))).toEqual(byId(renderWithBinary(binary!, target)));
  });
});

describe('mini-kustomize', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  function kustomization(files: Record<string, string>): string {
    const dir = mkdtempSync(join(tmpdir(), 'mini-kustomize-'));
    dirs.push(dir);
    for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
    return dir;
  }

  test('names a generated ConfigMap with kustomize v5 hash suffix and renames references to it', () => {
    const dir = kustomization({
      'kustomization.yaml': 'resources: [pod.yaml]\nconfigMapGenerator:\n  - name: x\n    literals: [A=b]\n',
      'pod.yaml':
        'apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    - name: c\n      image: i\n      envFrom: [{configMapRef: {name: x}}]\n',
    });
    const [pod, configMap] = build(dir) as any[];
    // The suffix `kustomize build` (v5.0 to v5.6) gives this exact ConfigMap.
    expect(configMap.metadata.name).toBe('x-b9t2424hkf');
    expect(pod.spec.containers[0].envFrom[0].configMapRef.name).toBe('x-b9t2424hkf');
  });

  test('strategic merge: containers merge by name, other lists are replaced, null deletes a key', () => {
    const original = {
      spec: {
        containers: [
          { name: 'a', image: 'a:1', resources: { requests: { cpu: '1' }, limits: { cpu: '2' } } },
          { name: 'b', image: 'b:1' },
        ],
        tolerations: [{ key: 'x' }],
        tls: [{ hosts: ['h'] }],
      },
    };
    const patch = {
      spec: {
        containers: [{ name: 'a', resources: { requests: { cpu: '3' } } }],
        tolerations: [{ key: 'y' }],
        tls: null,
      },
    };
    expect(strategicMerge(original, patch)).toEqual({
      spec: {
        containers: [
          { name: 'a', image: 'a:1', resources: { requests: { cpu: '3' }, limits: { cpu: '2' } } },
          { name: 'b', image: 'b:1' },
        ],
        tolerations: [{ key: 'y' }],
      },
    });
  });

  test('refuses kustomization fields and patch directives it does not implement', () => {
    const unsupported = kustomization({ 'kustomization.yaml': 'namePrefix: x-\n' });
    expect(() => build(unsupported)).toThrow('does not support "namePrefix"');
    expect(() => strategicMerge({ a: [] }, { $patch: 'replace' })).toThrow('$patch');
  });
});
