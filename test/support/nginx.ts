import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { freePort, waitFor } from '@herald/testing/ports';

/** The reverse-proxy config users deploy; the tests render and run exactly this file. */
export const NGINX_TEMPLATE = fileURLToPath(new URL('../../deploy/nginx/herald.conf.template', import.meta.url));
/** The nginx binary to run: `NGINX_BINARY`, else `nginx` on PATH (read at each start, so a test can point it elsewhere). */
const nginxBinary = () => process.env.NGINX_BINARY ?? 'nginx';

/** Fills the template's placeholders (what envsubst does in the official nginx image). */
export async function renderHeraldNginxConf(listen: number, upstreamPorts: number[]): Promise<string> {
  const template = await readFile(NGINX_TEMPLATE, 'utf8');
  return template.replaceAll(placeholder('HERALD_LISTEN'), `127.0.0.1:${listen}`).replaceAll(
    placeholder('HERALD_UPSTREAM_SERVERS'),
    // As deploy/docker-compose.yml: max_fails=0 (see there), refused connects go to the next pod.
    upstreamPorts.map((port) => `server 127.0.0.1:${port} max_fails=0;`).join('\n    '),
  );
}

/** `${NAME}`, the envsubst placeholder syntax the template uses. */
function placeholder(name: string): string {
  return `\${${name}}`;
}

/** A main nginx.conf that keeps every file nginx writes inside `dir`, so it runs without system paths. */
function mainConf(dir: string): string {
  return `daemon off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  include ${dir}/herald.conf;
}
`;
}

export interface NginxProcess {
  port: number;
  baseUrl: string;
  dir: string;
  /**
   * Points nginx at `upstreamPorts` instead (a pod joins): rewrites the config, checks it, and sends SIGHUP.
   * New connections use the new upstreams; open ones stay on the old worker until they close.
   */
  reload(upstreamPorts: number[]): Promise<void>;
  stop(): Promise<void>;
}

/** Writes a config from the template into a temp dir and checks it with `nginx -t`. */
export async function prepareNginx(upstreamPorts: number[]): Promise<{ dir: string; port: number; confPath: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'herald-nginx-'));
  await mkdir(join(dir, 'logs'));
  const port = await freePort();
  await writeFile(join(dir, 'herald.conf'), await renderHeraldNginxConf(port, upstreamPorts));
  const confPath = join(dir, 'nginx.conf');
  await writeFile(confPath, mainConf(dir));
  try {
    await promisify(execFile)(nginxBinary(), ['-t', '-q', '-p', dir, '-c', confPath]);
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    // A machine without nginx (`pnpm soak` or a test run by hand before .ci/run installed it) gets told
    // what is missing, not "spawn nginx ENOENT".
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new Error(
        `nginx is not installed: no \`${nginxBinary()}\` to run (install it, e.g. \`apt-get install -y nginx\` as .ci/run does, or set NGINX_BINARY to its path)`,
        { cause: error },
      );
    }
    throw error;
  }
  return { dir, port, confPath };
}

/** Starts nginx in front of `upstreamPorts` on a spare port, as the current user. */
export async function startNginx(upstreamPorts: number[]): Promise<NginxProcess> {
  const { dir, port, confPath } = await prepareNginx(upstreamPorts);
  const child: ChildProcess = spawn(nginxBinary(), ['-p', dir, '-c', confPath], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const exited = once(child, 'exit');
  await waitFor(`nginx on port ${port} (${stderr})`, async () => {
    if (child.exitCode !== null) throw new Error(`nginx exited: ${stderr}`);
    try {
      await fetch(`http://127.0.0.1:${port}/health`);
      return true;
    } catch {
      return false;
    }
  });
  return {
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    dir,
    async reload(upstreamPorts) {
      await writeFile(join(dir, 'herald.conf'), await renderHeraldNginxConf(port, upstreamPorts));
      await promisify(execFile)(nginxBinary(), ['-t', '-q', '-p', dir, '-c', confPath]);
      child.kill('SIGHUP');
    },
    async stop() {
      if (child.exitCode === null) child.kill('SIGQUIT');
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}
