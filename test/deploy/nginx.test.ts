import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { freePort } from '@herald/testing/ports';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { NGINX_TEMPLATE, prepareNginx, startNginx } from '../support/nginx.js';

// deploy/nginx/herald.conf.template: test/cluster.test.ts runs it in front of three pods; here it must pass
// `nginx -t` as the cluster test renders it and as docker-compose.yml renders it.

const COMPOSE_FILE = fileURLToPath(new URL('../../deploy/docker-compose.yml', import.meta.url));
const NGINX_BINARY = process.env.NGINX_BINARY ?? 'nginx';

describe('deploy/nginx/herald.conf.template', () => {
  it('never passes /metrics to a pod, in any spelling, and still proxies everything else', async () => {
    const seen: string[] = [];
    const upstream = createServer((request, response) => {
      seen.push(request.url ?? '');
      response.writeHead(200, { 'content-type': 'text/plain' }).end('from upstream');
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const nginx = await startNginx([(upstream.address() as { port: number }).port]);
    try {
      for (const path of ['/metrics', '/metrics?name[]=x', '//metrics', '/%6Detrics', '/metrics/', '/metrics/x']) {
        const response = await fetch(`${nginx.baseUrl}${path}`);
        expect({ path, status: response.status }).toEqual({ path, status: 404 });
      }
      expect(seen.filter((url) => /metrics/i.test(decodeURIComponent(url)))).toEqual([]);
      expect((await fetch(`${nginx.baseUrl}/graphql`, { method: 'POST', body: '{}' })).status).toBe(200);
      expect((await fetch(`${nginx.baseUrl}/readiness`)).status).toBe(200);
      expect(seen).toContain('/graphql');
    } finally {
      await nginx.stop();
      await new Promise((resolve) => upstream.close(resolve));
    }
  });

  it('passes nginx -t as the cluster test renders it', async () => {
    // prepareNginx runs `nginx -t` and throws when it fails.
    const { dir, confPath } = await prepareNginx([await freePort(), await freePort(), await freePort()]);
    try {
      expect(await readFile(confPath, 'utf8')).toContain('herald.conf');
      expect(await readFile(join(dir, 'herald.conf'), 'utf8')).toContain('proxy_read_timeout 3600s;');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("passes nginx -t with docker-compose.yml's values (pod names pointed at this machine)", async () => {
    const compose = parse(await readFile(COMPOSE_FILE, 'utf8'), { merge: true });
    const env = compose.services.nginx.environment as Record<string, string>;
    // What envsubst in the nginx image does: only these two variables; nginx's own $variables stay.
    // nginx -t resolves upstream host names, and the compose names exist only on the compose network.
    const rendered = (await readFile(NGINX_TEMPLATE, 'utf8'))
      .replaceAll(`\${HERALD_LISTEN}`, `127.0.0.1:${await freePort()}`)
      .replaceAll(
        `\${HERALD_UPSTREAM_SERVERS}`,
        env.HERALD_UPSTREAM_SERVERS!.replace(/server [\w-]+:/g, 'server 127.0.0.1:'),
      );
    expect(rendered).not.toMatch(/\$\{HERALD_/);
    const dir = await mkdtemp(join(tmpdir(), 'herald-nginx-compose-'));
    try {
      await mkdir(join(dir, 'logs'));
      await writeFile(join(dir, 'herald.conf'), rendered);
      const main = `pid ${dir}/nginx.pid;
error_log ${dir}/error.log;
events {}
http {
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  include ${dir}/herald.conf;
}
`;
      await writeFile(join(dir, 'nginx.conf'), main);
      await promisify(execFile)(NGINX_BINARY, ['-t', '-q', '-p', dir, '-c', join(dir, 'nginx.conf')]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
