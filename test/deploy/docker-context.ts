import { copyFile, mkdir, readdir, readFile, readlink, symlink } from 'node:fs/promises';
import { dirname, join, posix } from 'node:path';

interface IgnoreRule {
  /** `!pattern`: put back what an earlier rule left out. */
  include: boolean;
  regex: RegExp;
  pattern: string;
}

export interface DockerIgnore {
  /** Whether Docker leaves `path` (relative, `/`-separated) out of the build context. */
  ignores(path: string): boolean;
  /** Whether a `!` rule may put back something inside the folder `path`. */
  mayReinclude(path: string): boolean;
}

/**
 * `.dockerignore` as BuildKit reads it: patterns relative to the context root, `*` and `?` within one
 * path segment, `**` across any number of them, a match on a folder covers everything in it, and the last
 * matching rule wins (so `!` re-includes).
 */
export function parseDockerignore(text: string): DockerIgnore {
  const rules: IgnoreRule[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const include = line.startsWith('!');
    const pattern = posix.normalize(line.slice(include ? 1 : 0).trim()).replace(/^\/+|\/+$/g, '');
    rules.push({ include, pattern, regex: globToRegex(pattern) });
  }
  return {
    ignores(path) {
      const segments = path.split('/');
      const candidates = segments.map((_, index) => segments.slice(0, index + 1).join('/'));
      let ignored = false;
      for (const rule of rules) {
        if (candidates.some((candidate) => rule.regex.test(candidate))) ignored = !rule.include;
      }
      return ignored;
    },
    mayReinclude(path) {
      return rules.some(
        (rule) => rule.include && (rule.pattern.startsWith(`${path}/`) || rule.pattern.startsWith('*')),
      );
    },
  };
}

function globToRegex(pattern: string): RegExp {
  let source = '';
  for (let index = 0; index < pattern.length; index++) {
    const char = pattern[index]!;
    if (char === '*' && pattern[index + 1] === '*') {
      const slash = pattern[index + 2] === '/';
      source += slash ? '(?:.*/)?' : '.*';
      index += slash ? 2 : 1;
    } else if (char === '*') source += '[^/]*';
    else if (char === '?') source += '[^/]';
    else source += char.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${source}$`);
}

/**
 * Copies what `docker build` would send from `root` (the build context) into `destination`, through the
 * root's `.dockerignore`.
 * @returns the copied files, relative and sorted
 */
export async function copyBuildContext(root: string, destination: string): Promise<string[]> {
  const ignore = parseDockerignore(await readFile(join(root, '.dockerignore'), 'utf8'));
  const copied: string[] = [];
  async function walk(relative: string): Promise<void> {
    for (const entry of await readdir(join(root, relative), { withFileTypes: true })) {
      const path = relative === '' ? entry.name : `${relative}/${entry.name}`;
      if (entry.isDirectory()) {
        if (!ignore.ignores(path) || ignore.mayReinclude(path)) await walk(path);
      } else if (!ignore.ignores(path)) {
        await mkdir(dirname(join(destination, path)), { recursive: true });
        if (entry.isSymbolicLink()) await symlink(await readlink(join(root, path)), join(destination, path));
        else await copyFile(join(root, path), join(destination, path));
        copied.push(path);
      }
    }
  }
  await walk('');
  return copied.sort();
}
