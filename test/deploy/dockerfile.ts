import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

export { REPO_ROOT } from '../../deploy/build/build-app.js';
export const DOCKERFILE = fileURLToPath(new URL('../../deploy/Dockerfile', import.meta.url));

export interface Instruction {
  /** Upper-case keyword: `RUN`, `COPY`, … */
  keyword: string;
  /** Everything after the keyword, continuation lines joined with a space. */
  args: string;
}

export interface Stage {
  /** The `AS` name. */
  name: string | undefined;
  /** The base: an image (build args substituted) or an earlier stage's name. */
  from: string;
  instructions: Instruction[];
}

export interface Dockerfile {
  stages: Stage[];
  stage(name: string): Stage;
}

/**
 * A Dockerfile reader for the checks in test/deploy: comments, line continuations, global `ARG`
 * defaults in `FROM`. Not a general parser (no heredocs, no escape directive).
 */
export function parseDockerfile(text: string): Dockerfile {
  const logical: string[] = [];
  let pending = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('#') || (line === '' && pending === '')) continue;
    if (line.endsWith('\\')) {
      pending += `${line.slice(0, -1).trim()} `;
      continue;
    }
    logical.push((pending + line).trim());
    pending = '';
  }

  const globalArgs = new Map<string, string>();
  const stages: Stage[] = [];
  for (const line of logical) {
    const keyword = line.split(/\s/, 1)[0]!;
    const args = line.slice(keyword.length).trim();
    const upper = keyword.toUpperCase();
    if (upper === 'FROM') {
      const [image = '', as, name] = args.split(/\s+/);
      const from = image.replace(/\$\{(\w+)\}/g, (_, arg: string) => globalArgs.get(arg) ?? '');
      stages.push({ name: as?.toUpperCase() === 'AS' ? name : undefined, from, instructions: [] });
    } else if (stages.length === 0 && upper === 'ARG') {
      const [arg = '', value = ''] = args.split('=');
      globalArgs.set(arg, value);
    } else {
      stages.at(-1)?.instructions.push({ keyword: upper, args });
    }
  }
  return {
    stages,
    stage(name) {
      const found = stages.find((stage) => stage.name === name);
      if (!found) throw new Error(`no stage ${name} in the Dockerfile`);
      return found;
    },
  };
}

export async function readDockerfile(): Promise<Dockerfile> {
  return parseDockerfile(await readFile(DOCKERFILE, 'utf8'));
}

/** The stages `name` builds on, itself first, down to the image it starts from. */
export function lineage(dockerfile: Dockerfile, name: string): Stage[] {
  const chain: Stage[] = [];
  for (let stage = dockerfile.stages.find((s) => s.name === name); stage; ) {
    chain.push(stage);
    const base = stage.from;
    stage = dockerfile.stages.find((s) => s.name === base);
  }
  return chain;
}

/**
 * What a stage (with the stages under it) sets for `keyword`: the last one wins, as in Docker.
 * `ENV` is merged instead: name → value.
 */
export function effective(dockerfile: Dockerfile, name: string, keyword: string): string | undefined {
  for (const stage of lineage(dockerfile, name)) {
    const found = stage.instructions.filter((instruction) => instruction.keyword === keyword).at(-1);
    if (found) return found.args;
  }
  return undefined;
}

export function effectiveEnv(dockerfile: Dockerfile, name: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const stage of lineage(dockerfile, name).reverse()) {
    for (const instruction of stage.instructions.filter((i) => i.keyword === 'ENV')) {
      for (const match of instruction.args.matchAll(/(\w+)=("[^"]*"|\S+)/g)) {
        env[match[1]!] = match[2]!.replace(/^"|"$/g, '');
      }
    }
  }
  return env;
}

/** `["node", "dist/main.js"]` → its words; shell form is refused (it would wrap node in a shell). */
export function execForm(args: string): string[] {
  if (!args.startsWith('[')) throw new Error(`not exec form (JSON array): ${args}`);
  return JSON.parse(args) as string[];
}
