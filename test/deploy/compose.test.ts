import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { APPS, type AppName } from '../../deploy/build/apps.js';
import { parseEncryptionKeys } from '../../packages/config/src/encryption-keys.js';
import { NGINX_TEMPLATE } from '../support/nginx.js';
import { type Dockerfile, effectiveEnv, REPO_ROOT, readDockerfile } from './dockerfile.js';

// deploy/docker-compose.yml can't be started here (no Docker engine): it is read and held against the
// repository, the Dockerfile, the nginx template and the Prometheus config it mounts.

const COMPOSE_FILE = fileURLToPath(new URL('../../deploy/docker-compose.yml', import.meta.url));
const COMPOSE_DIR = dirname(COMPOSE_FILE);
/** Public images the local cluster may use: official or vendor images, pinned to a version. */
const PUBLIC_IMAGES = ['postgres', 'redis', 'nginx', 'prom/prometheus'];

interface Service {
  image: string;
  build?: { context: string; dockerfile: string; target: string };
  command?: string[];
  entrypoint?: unknown;
  environment?: Record<string, string>;
  volumes?: string[];
  ports?: string[];
  depends_on?: Record<string, { condition: string }>;
  read_only?: boolean;
  tmpfs?: string[];
  healthcheck?: { test: string[] };
}

let services: Record<string, Service>;
let dockerfile: Dockerfile;

beforeAll(async () => {
  // Compose supports YAML merge keys (`<<: *anchor`).
  const compose = parse(await readFile(COMPOSE_FILE, 'utf8'), { merge: true }) as { services: Record<string, Service> };
  services = compose.services;
  dockerfile = await readDockerfile();
});

/** `${VAR:-default}` as Compose substitutes it with VAR unset. */
function withDefaults(value: string): string {
  return value.replace(/\$\{\w+:-([^}]*)\}/g, '$1');
}

function heraldServices(app: AppName): [string, Service][] {
  return Object.entries(services).filter(([, service]) => service.build?.target === app);
}

describe('deploy/docker-compose.yml', () => {
  it('runs PostgreSQL, Redis, three API pods, two dispatchers, nginx and Prometheus', () => {
    expect(Object.keys(services).sort()).toEqual(
      [
        'postgres',
        'redis',
        'api-1',
        'api-2',
        'api-3',
        'webhook-dispatcher-1',
        'webhook-dispatcher-2',
        'nginx',
        'prometheus',
      ].sort(),
    );
    expect(heraldServices('api').map(([name]) => name)).toEqual(['api-1', 'api-2', 'api-3']);
    expect(heraldServices('webhook-dispatcher').map(([name]) => name)).toEqual([
      'webhook-dispatcher-1',
      'webhook-dispatcher-2',
    ]);
  });

  it("names only images built from this repository's Dockerfile targets, or pinned public images", () => {
    const stages = new Set(dockerfile.stages.map((stage) => stage.name));
    for (const [name, service] of Object.entries(services)) {
      if (service.build) {
        expect(resolve(COMPOSE_DIR, service.build.context), name).toBe(resolve(REPO_ROOT));
        expect(existsSync(join(REPO_ROOT, service.build.dockerfile)), name).toBe(true);
        expect(stages.has(service.build.target), `${name}: target ${service.build.target}`).toBe(true);
        expect(Object.keys(APPS)).toContain(service.build.target);
        // The names the k8s manifests expect.
        expect(withDefaults(service.image), name).toBe(`herald-${service.build.target}:dev`);
      } else {
        const [repository, tag] = service.image.split(':');
        expect(PUBLIC_IMAGES, name).toContain(repository);
        expect(tag, `${name} pins a version`).toMatch(/^v?\d+(\.\d+)*(-[a-z]+)?$/);
      }
    }
  });

  it('mounts only files that exist in the repository, and Herald services run their image command', () => {
    for (const [name, service] of Object.entries(services)) {
      for (const volume of service.volumes ?? []) {
        const [source = ''] = volume.split(':');
        if (source.startsWith('.') || source.startsWith('/'))
          expect(existsSync(resolve(COMPOSE_DIR, source)), `${name}: ${source}`).toBe(true);
      }
      if (service.build) {
        // What test/deploy/production-build starts is what runs here: the image's ENTRYPOINT and CMD.
        expect(service.command, name).toBeUndefined();
        expect(service.entrypoint, name).toBeUndefined();
      }
    }
  });

  it('runs Herald containers as k8s does: read-only root filesystem, /tmp in memory, production', () => {
    for (const app of Object.keys(APPS) as AppName[]) {
      for (const [name, service] of heraldServices(app)) {
        expect(service.read_only, name).toBe(true);
        expect(service.tmpfs, name).toEqual(['/tmp']);
        expect(service.environment?.NODE_ENV, name).toBe('production');
        expect(service.depends_on, name).toMatchObject({
          postgres: { condition: 'service_healthy' },
          redis: { condition: 'service_healthy' },
        });
      }
    }
  });

  it('points the pods at the compose PostgreSQL and Redis, with a dev-only JWT secret of 32+ characters', () => {
    for (const [name, service] of [...heraldServices('api'), ...heraldServices('webhook-dispatcher')]) {
      const env = service.environment ?? {};
      expect(new URL(withDefaults(env.DATABASE_URL ?? '')).host, name).toBe('postgres:5432');
      expect(new URL(withDefaults(env.REDIS_URL ?? '')).host, name).toBe('redis:6379');
    }
    for (const [name, service] of heraldServices('api')) {
      const secret = service.environment?.JWT_SECRET ?? '';
      expect(secret, name).toMatch(/^\$\{JWT_SECRET:-.+\}$/);
      expect(withDefaults(secret).length).toBeGreaterThanOrEqual(32);
      expect(withDefaults(secret)).toMatch(/dev-only/);
    }
    for (const [name, service] of heraldServices('webhook-dispatcher')) {
      expect(service.environment?.JWT_SECRET, `${name} never sees the JWT key`).toBeUndefined();
    }
  });

  it('gives the pods and the dispatchers one dev-only keyring for the webhook secrets', () => {
    const keyrings = new Set(
      [...heraldServices('api'), ...heraldServices('webhook-dispatcher')].map(
        ([, service]) => service.environment?.HERALD_ENCRYPTION_KEYS,
      ),
    );
    expect(keyrings.size).toBe(1);
    const [keyring] = keyrings;
    expect(keyring).toMatch(/^\$\{HERALD_ENCRYPTION_KEYS:-.+\}$/);
    const parsed = parseEncryptionKeys(withDefaults(keyring ?? ''));
    expect(parsed).not.toHaveProperty('error');
    expect(Buffer.from(withDefaults(keyring ?? '').split(':')[1] ?? '', 'base64').toString()).toMatch(/dev-only/);
  });

  it('runs Redis with AOF persistence (fsync every second) and no eviction, on a volume', () => {
    const redis = services.redis!;
    expect(redis.command?.join(' ')).toContain('--appendonly yes');
    expect(redis.command?.join(' ')).toContain('--appendfsync everysec');
    expect(redis.command?.join(' ')).toContain('--maxmemory-policy noeviction');
    expect(redis.volumes).toContainEqual(expect.stringMatching(/^[\w-]+:\/data$/));
  });

  it('puts nginx, with the template the cluster test runs, in front of exactly the API pods', () => {
    const nginx = services.nginx!;
    const [source, target] = (nginx.volumes ?? [])[0]!.split(':');
    expect(resolve(COMPOSE_DIR, source!)).toBe(NGINX_TEMPLATE);
    // The official image renders /etc/nginx/templates/<name>.template to /etc/nginx/conf.d/<name>.
    expect(target).toBe('/etc/nginx/templates/herald.conf.template');
    const env = nginx.environment ?? {};
    const listen = env.HERALD_LISTEN;
    expect(nginx.ports).toEqual([`\${HERALD_HTTP_PORT:-${listen}}:${listen}`]);
    const upstreams = [...(env.HERALD_UPSTREAM_SERVERS ?? '').matchAll(/server ([\w-]+):(\d+)[^;]*;/g)];
    const apiPort = effectiveEnv(dockerfile, 'api').PORT;
    expect(upstreams.map((match) => `${match[1]}:${match[2]}`)).toEqual(
      heraldServices('api').map(([name]) => `${name}:${apiPort}`),
    );
    expect(Object.keys(nginx.depends_on ?? {})).toEqual(heraldServices('api').map(([name]) => name));
  });

  it('has Prometheus load the alert rules and scrape every Herald container on its port', async () => {
    const prometheus = services.prometheus!;
    const mounts = new Map(
      (prometheus.volumes ?? [])
        .map((volume) => volume.split(':'))
        .filter(([source]) => source!.startsWith('.'))
        .map(([source, target]) => [target!, resolve(COMPOSE_DIR, source!)]),
    );
    const configPath = mounts.get('/etc/prometheus/prometheus.yml');
    expect(configPath).toBe(join(REPO_ROOT, 'deploy/prometheus/prometheus.yml'));
    const config = parse(await readFile(configPath!, 'utf8')) as {
      rule_files: string[];
      scrape_configs: { job_name: string; static_configs: { targets: string[] }[] }[];
    };
    expect(config.rule_files.map((file) => mounts.get(file))).toEqual([
      join(REPO_ROOT, 'deploy/prometheus/alerts.yml'),
    ]);

    const scraped = new Set(
      config.scrape_configs.flatMap((job) => job.static_configs.flatMap((static_) => static_.targets)),
    );
    for (const app of Object.keys(APPS) as AppName[]) {
      const port = effectiveEnv(dockerfile, app).PORT;
      for (const [name] of heraldServices(app)) expect(scraped.has(`${name}:${port}`), `${name}:${port}`).toBe(true);
    }
    const targets = [...scraped].filter((target) => !target.startsWith('localhost:'));
    for (const target of targets) expect(Object.keys(services)).toContain(target.split(':')[0]);
  });

  it('only depends on services it defines', () => {
    for (const [name, service] of Object.entries(services)) {
      for (const dependency of Object.keys(service.depends_on ?? {})) {
        expect(Object.keys(services), `${name} → ${dependency}`).toContain(dependency);
      }
    }
  });
});
