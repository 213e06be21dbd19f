import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { APPS, type AppName } from '../../deploy/build/apps.js';
import { copyBuildContext, parseDockerignore } from './docker-context.js';
import {
  type Dockerfile,
  effective,
  effectiveEnv,
  execForm,
  lineage,
  REPO_ROOT,
  readDockerfile,
} from './dockerfile.js';

// deploy/Dockerfile, read and held against what test/deploy/production-build runs, the k8s manifests
// and the repository. The image itself needs a Docker engine to build; everything else is checked here.

const APP_NAMES = Object.keys(APPS) as AppName[];
/** Ports as the k8s Deployments declare them (containerPort `http`). */
const K8S_DEPLOYMENTS: Record<AppName, string> = {
  api: 'k8s/base/api-deployment.yaml',
  'webhook-dispatcher': 'k8s/base/webhook-dispatcher-deployment.yaml',
};

let dockerfile: Dockerfile;

beforeAll(async () => {
  dockerfile = await readDockerfile();
});

describe('deploy/Dockerfile', () => {
  it('has a target per app that copies in its build stage, which runs `pnpm build:prod <app> /out`', async () => {
    const rootManifest = JSON.parse(await readFile(join(REPO_ROOT, 'package.json'), 'utf8'));
    expect(rootManifest.scripts['build:prod']).toBe('tsx deploy/build/main.ts');
    expect(existsSync(join(REPO_ROOT, 'deploy/build/main.ts'))).toBe(true);
    for (const app of APP_NAMES) {
      const build = dockerfile.stage(`build-${app}`);
      expect(build.from).toBe('deps');
      expect(build.instructions).toEqual([{ keyword: 'RUN', args: `pnpm build:prod ${app} /out` }]);
      const target = dockerfile.stage(app);
      expect(lineage(dockerfile, app).map((stage) => stage.name)).toEqual([app, 'runtime']);
      expect(target.instructions).toContainEqual({ keyword: 'COPY', args: `--from=build-${app} /out /app` });
    }
  });

  it('installs the workspace from the lockfile only: pinned pnpm, fetch, frozen offline install', () => {
    const deps = dockerfile.stage('deps');
    const runs = deps.instructions.filter((instruction) => instruction.keyword === 'RUN').map((i) => i.args);
    expect(runs).toEqual([
      expect.stringMatching(/^npm install --global pnpm@\d+\.\d+\.\d+$/),
      'pnpm fetch',
      'pnpm install --frozen-lockfile --offline',
    ]);
    const copies = deps.instructions.filter((instruction) => instruction.keyword === 'COPY').map((i) => i.args);
    expect(copies).toEqual(['pnpm-lock.yaml pnpm-workspace.yaml .npmrc ./', '. .']);
    for (const file of ['pnpm-lock.yaml', 'pnpm-workspace.yaml', '.npmrc']) {
      expect(existsSync(join(REPO_ROOT, file)), file).toBe(true);
    }
  });

  it('starts every stage from the official slim Node 20 image (20.20 or later, the engines floor)', async () => {
    const engines = JSON.parse(await readFile(join(REPO_ROOT, 'package.json'), 'utf8')).engines.node as string;
    expect(engines).toBe('>=20.20.0');
    const stageNames = new Set(dockerfile.stages.map((stage) => stage.name));
    const images = dockerfile.stages.map((stage) => stage.from).filter((from) => !stageNames.has(from));
    expect(images.length).toBeGreaterThan(0);
    for (const image of images) {
      const match = /^node:20\.(\d+)(?:\.\d+)?-bookworm-slim$/.exec(image);
      expect(match, image).not.toBeNull();
      expect(Number(match![1])).toBeGreaterThanOrEqual(20);
    }
  });

  it.each(APP_NAMES)(
    '%s: runs as the non-root node user (uid 1000, as k8s/ runs it) with NODE_ENV=production',
    async (app) => {
      expect(effective(dockerfile, app, 'USER')).toBe('node');
      expect(effectiveEnv(dockerfile, app).NODE_ENV).toBe('production');
      const deployment = parse(await readFile(join(REPO_ROOT, K8S_DEPLOYMENTS[app]), 'utf8'));
      expect(deployment.spec.template.spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000 });
    },
  );

  it.each(APP_NAMES)('%s: node runs under tini, in exec form, so SIGTERM reaches it', (app) => {
    expect(execForm(effective(dockerfile, app, 'ENTRYPOINT') ?? '')).toEqual(['/usr/bin/tini', '--']);
    const command = execForm(effective(dockerfile, app, 'CMD') ?? '');
    expect(command[0]).toBe('node');
    expect(command.at(-1)).toBe('dist/main.js');
    const runtimeRuns = dockerfile.stage('runtime').instructions.filter((i) => i.keyword === 'RUN');
    expect(runtimeRuns.some((run) => /apt-get install -y --no-install-recommends tini\b/.test(run.args))).toBe(true);
  });

  it("api: fixes V8's young generation at node's large-machine size rather than one derived from the pod's memory limit", async () => {
    // Under a 1 GiB limit node would pick 4 MB semi-spaces (1 MB under 512 MiB): measured, a `publishPost`
    // then costs ~70 % more CPU (docs/operations.md). The production overlay's limit is what makes this matter.
    const command = execForm(effective(dockerfile, 'api', 'CMD') ?? '');
    expect(command).toContain('--max-semi-space-size=16');
    // And at that size from the start, not grown at the first burst (often a fault, mid-incident).
    expect(command).toContain('--min-semi-space-size=16');
    const deployment = parse(await readFile(join(REPO_ROOT, K8S_DEPLOYMENTS.api), 'utf8'));
    expect(deployment.spec.template.spec.containers[0].resources.limits.memory).toMatch(/^\d+(Mi|Gi)$/);
  });

  it.each(APP_NAMES)('%s: listens on and exposes the port its k8s Deployment declares', async (app) => {
    const deployment = parse(await readFile(join(REPO_ROOT, K8S_DEPLOYMENTS[app]), 'utf8'));
    const [container] = deployment.spec.template.spec.containers;
    const port = String(container.ports.find((p: { name: string }) => p.name === 'http').containerPort);
    expect(effectiveEnv(dockerfile, app).PORT).toBe(port);
    expect(effective(dockerfile, app, 'EXPOSE')).toBe(port);
    expect(container.image).toMatch(new RegExp(`^herald-${app}:`));
    expect(container.securityContext.readOnlyRootFilesystem).toBe(true);
  });

  describe('HEALTHCHECK', () => {
    let script: string;
    let server: ReturnType<typeof createServer>;
    let status = 200;

    beforeAll(async () => {
      const args = effective(dockerfile, 'api', 'HEALTHCHECK') ?? '';
      expect(args).toMatch(/--start-period=\d+s/);
      const command = execForm(args.slice(args.indexOf('CMD ') + 4));
      expect(command.slice(0, 2)).toEqual(['node', '-e']);
      script = command[2]!;
      server = createServer((request, response) => {
        response.statusCode = request.url === '/health' ? status : 404;
        response.end();
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    });

    afterAll(() => {
      server?.close();
    });

    async function healthcheck(port: number): Promise<number> {
      try {
        await promisify(execFile)(process.execPath, ['-e', script], { env: { PORT: String(port) }, timeout: 10_000 });
        return 0;
      } catch (error) {
        return (error as { code: number }).code;
      }
    }

    it('is shared by both targets (set on the runtime stage)', () => {
      for (const app of APP_NAMES)
        expect(effective(dockerfile, app, 'HEALTHCHECK')).toBe(effective(dockerfile, 'api', 'HEALTHCHECK'));
    });

    it("exits 0 when the app's /health on $PORT answers 200, 1 when it answers 503 or nothing listens", async () => {
      const { port } = server.address() as AddressInfo;
      status = 200;
      expect(await healthcheck(port)).toBe(0);
      status = 503;
      expect(await healthcheck(port)).toBe(1);
      const closed = createServer();
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
      const closedPort = (closed.address() as AddressInfo).port;
      await new Promise((resolve) => closed.close(resolve));
      expect(await healthcheck(closedPort)).toBe(1);
    });
  });
});

describe('.dockerignore', () => {
  it('follows Docker: folders cover their contents, ** spans folders, the last matching rule wins', () => {
    const ignore = parseDockerignore('**/node_modules\ntest/**\n!test/package.json\ndeploy/**\n!deploy/build/**\n');
    expect(ignore.ignores('node_modules')).toBe(true);
    expect(ignore.ignores('apps/api/node_modules/x/index.js')).toBe(true);
    expect(ignore.ignores('test/cluster.test.ts')).toBe(true);
    expect(ignore.ignores('test/package.json')).toBe(false);
    expect(ignore.ignores('deploy/Dockerfile')).toBe(true);
    expect(ignore.ignores('deploy/build/main.ts')).toBe(false);
    expect(ignore.ignores('apps/api/src/main.ts')).toBe(false);
  });

  it('sends the manifests, lockfile, sources and build script, and no dependencies, git, tests or docs', async () => {
    const temp = await mkdtemp(join(tmpdir(), 'herald-context-'));
    try {
      const files = await copyBuildContext(REPO_ROOT, temp);
      const workspace = parse(await readFile(join(REPO_ROOT, 'pnpm-workspace.yaml'), 'utf8')) as { packages: string[] };
      expect(workspace.packages).toEqual(expect.arrayContaining(['apps/*', 'packages/*', 'test']));
      expect(files).toEqual(
        expect.arrayContaining([
          'package.json',
          'pnpm-lock.yaml',
          'pnpm-workspace.yaml',
          '.npmrc',
          'test/package.json',
          'deploy/build/main.ts',
          'apps/api/src/main.ts',
          'packages/db/src/index.ts',
        ]),
      );
      const unwanted = files.filter((file) =>
        /(^|\/)(node_modules|\.git|\.herald|dist)\/|\.test\.ts$|^(docs|k8s|\.ci)\/|^deploy\/(?!build\/)/.test(file),
      );
      expect(unwanted).toEqual([]);
      expect(files.filter((file) => file.startsWith('test/'))).toEqual(['test/package.json']);
    } finally {
      await rm(temp, { recursive: true, force: true });
    }
  });
});
