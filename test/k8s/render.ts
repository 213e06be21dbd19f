/**
 * Renders Herald's kustomizations for the tests. A real kustomize renders when the machine has one recent
 * enough (a standalone `kustomize` or `kubectl kustomize`, v5+); otherwise {@link build} from
 * mini-kustomize does, and `kustomize.test.ts` is where the two are compared wherever both exist.
 *
 * `HERALD_KUSTOMIZE=mini` forces the built-in renderer; `HERALD_KUSTOMIZE=kubectl` or `=kustomize` forces
 * that binary and fails when it is missing or too old.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { build, type K8sObject } from './mini-kustomize.js';

export type { K8sObject } from './mini-kustomize.js';

export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const K8S_ROOT = join(REPO_ROOT, 'k8s');

/** Older kustomize lacks `patches:` with inferred targets or names generated ConfigMaps differently. */
const MIN_KUSTOMIZE_MAJOR = 5;

/** Every kustomization the tests render: the base and each overlay, as paths relative to `k8s/`. */
export const TARGETS: readonly string[] = [
  'base',
  ...readdirSync(join(K8S_ROOT, 'overlays')).map((name) => `overlays/${name}`),
];

export interface KustomizeBinary {
  /** The command line before the directory, e.g. `['kubectl', 'kustomize']`. */
  command: readonly [string, ...string[]];
  version: string;
}

/** The real kustomize to render with, or undefined when the machine has none that is new enough. */
export function findKustomizeBinary(only?: 'kubectl' | 'kustomize'): KustomizeBinary | undefined {
  const candidates: { name: 'kubectl' | 'kustomize'; find: () => KustomizeBinary | undefined }[] = [
    {
      name: 'kustomize',
      find: () => {
        const version = /v\d+\.\d+\.\d+\S*/.exec(run('kustomize', ['version']) ?? '')?.[0];
        return version ? { command: ['kustomize', 'build'], version } : undefined;
      },
    },
    {
      name: 'kubectl',
      find: () => {
        const output = run('kubectl', ['version', '--client', '-o', 'json']);
        const version: string | undefined = output ? JSON.parse(output).kustomizeVersion : undefined;
        return version ? { command: ['kubectl', 'kustomize'], version } : undefined;
      },
    },
  ];
  for (const candidate of candidates) {
    if (only && candidate.name !== only) continue;
    const found = candidate.find();
    if (found && Number(/^v(\d+)/.exec(found.version)?.[1]) >= MIN_KUSTOMIZE_MAJOR) return found;
  }
  return undefined;
}

function run(command: string, args: string[]): string | undefined {
  try {
    return execFileSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 20_000 });
  } catch {
    return undefined; // not installed, or too old for these flags
  }
}

/** Renders `k8s/<target>` with the given binary. */
export function renderWithBinary(binary: KustomizeBinary, target: string): K8sObject[] {
  const [command, ...args] = binary.command;
  const output = execFileSync(command, [...args, join(K8S_ROOT, target)], { encoding: 'utf8', timeout: 60_000 });
  return parseAllDocuments(output)
    .map((document) => document.toJS() as K8sObject | null)
    .filter((object): object is K8sObject => object !== null);
}

/** Renders `k8s/<target>` with mini-kustomize. */
export function renderWithMini(target: string): K8sObject[] {
  return build(join(K8S_ROOT, target));
}

function chooseRenderer(): { name: string; render: (target: string) => K8sObject[] } {
  const setting = process.env.HERALD_KUSTOMIZE || undefined;
  if (setting === 'mini') return { name: 'mini-kustomize', render: renderWithMini };
  if (setting !== undefined && setting !== 'kubectl' && setting !== 'kustomize') {
    throw new Error(`HERALD_KUSTOMIZE: expected mini, kubectl or kustomize, got "${setting}"`);
  }
  const choice = setting;
  const binary = findKustomizeBinary(choice);
  if (!binary && choice) throw new Error(`HERALD_KUSTOMIZE=${choice}: no ${choice} with kustomize v5+ on PATH`);
  if (!binary) return { name: 'mini-kustomize', render: renderWithMini };
  return {
    name: `${binary.command.join(' ')} ${binary.version}`,
    render: (target) => renderWithBinary(binary, target),
  };
}

/** The renderer the tests use (see the file comment), with a name for test titles. */
export const renderer = chooseRenderer();

const cache = new Map<string, K8sObject[]>();

/** The objects of `k8s/<target>`, rendered once per test file. Callers must not mutate them. */
export function render(target: string): K8sObject[] {
  if (!cache.has(target)) cache.set(target, renderer.render(target));
  return cache.get(target)!;
}
