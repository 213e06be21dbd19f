import { existsSync } from 'node:fs';
import { cp, mkdir, readFile } from 'node:fs/promises';
import { basename, dirname, join, relative } from 'node:path';

interface Manifest {
  name: string;
  version: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}

/**
 * Copies the packages in `roots` and everything they depend on, at run time, from `fromRoot/node_modules`
 * (a hoisted, npm-style tree: `pnpm deploy --node-linker=hoisted`) into `toRoot/node_modules`, keeping
 * each package at the same relative path so Node resolves exactly what it resolved in `fromRoot`.
 *
 * `pnpm deploy --prod` installs every production dependency of the app and of the workspace packages it
 * uses, including ones the bundle no longer needs (`tsx`, the workspace packages' TypeScript source). This
 * keeps only the closure of what the bundle imports.
 *
 * A package's `dependencies` must be present; `optionalDependencies` (other platforms' binaries) and
 * optional peers may be absent; installed peers are kept.
 *
 * @param roots package name → the version the bundle was built against; each must sit at the top level.
 * @returns the copied package folders, relative to the root (`node_modules/pg`, …), sorted
 * @throws when a root is missing or at another version, or a required dependency is not installed
 */
export async function copyProductionClosure(
  fromRoot: string,
  toRoot: string,
  roots: ReadonlyMap<string, string>,
): Promise<string[]> {
  const needed = new Set<string>();
  const queue: string[] = [];
  for (const [name, version] of roots) {
    const dir = join(fromRoot, 'node_modules', name);
    const manifest = await readManifest(dir).catch(() => undefined);
    if (!manifest) throw new Error(`${name} is imported by the bundle but is not a production dependency`);
    if (manifest.version !== version)
      throw new Error(
        `${name}: the bundle was built against ${version}, the production install has ${manifest.version}`,
      );
    queue.push(dir);
  }

  while (queue.length > 0) {
    const dir = queue.pop()!;
    if (needed.has(dir)) continue;
    needed.add(dir);
    const manifest = await readManifest(dir);
    const optional = new Set([
      ...Object.keys(manifest.optionalDependencies ?? {}),
      ...Object.entries(manifest.peerDependenciesMeta ?? {})
        .filter(([, meta]) => meta.optional)
        .map(([name]) => name),
    ]);
    const wanted = new Set([
      ...Object.keys(manifest.dependencies ?? {}),
      ...Object.keys(manifest.optionalDependencies ?? {}),
      ...Object.keys(manifest.peerDependencies ?? {}),
    ]);
    for (const name of wanted) {
      const found = findPackage(name, dir, fromRoot);
      if (found) queue.push(found);
      else if (!optional.has(name))
        throw new Error(`${manifest.name}@${manifest.version} needs ${name}, which is not installed`);
    }
  }

  const copied = [...needed].map((dir) => relative(fromRoot, dir)).sort();
  for (const path of copied) {
    const from = join(fromRoot, path);
    const nested = join(from, 'node_modules');
    await mkdir(dirname(join(toRoot, path)), { recursive: true });
    // A package's own node_modules holds nested versions of its dependencies: copied only if needed.
    await cp(from, join(toRoot, path), { recursive: true, filter: (source) => source !== nested });
  }
  return copied;
}

/** Node's lookup: `<dir>/node_modules/<name>` from `fromDir` up to `root`. */
function findPackage(name: string, fromDir: string, root: string): string | undefined {
  for (let dir = fromDir; ; dir = dirname(dir)) {
    if (basename(dir) !== 'node_modules') {
      const candidate = join(dir, 'node_modules', name);
      if (existsSync(join(candidate, 'package.json'))) return candidate;
    }
    if (dir === root || dirname(dir) === dir) return undefined;
  }
}

async function readManifest(dir: string): Promise<Manifest> {
  return JSON.parse(await readFile(join(dir, 'package.json'), 'utf8')) as Manifest;
}
