import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSchema, createYoga } from 'graphql-yoga';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp, type HeraldApp } from '../app.js';
import { type ConsoleAssets, loadConsoleAssets } from '../console-assets.js';
import { loadApiConfig } from '../env.js';
import { useConsole } from './use-console.js';

const DEV_TOKEN = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkZW1vIn0.c2lnbmF0dXJl';
const SCRIPT = 'console-ABC123.js';
const INDEX = `<!doctype html><html><head><script type="module" src="./${SCRIPT}"></script>\n</head><body></body></html>`;

let dir: string;
let assets: ConsoleAssets;
let server: Server;
let baseUrl: string;

function yogaWith(options: Parameters<typeof useConsole>[0]) {
  return createYoga({
    schema: createSchema({ typeDefs: 'type Query { ok: Boolean }' }),
    plugins: [useConsole(options)],
    logging: false,
  });
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'herald-console-assets-'));
  await writeFile(join(dir, 'index.html'), INDEX);
  await writeFile(join(dir, SCRIPT), 'console.log("herald")');
  await writeFile(join(dir, 'notes.txt'), 'not an asset type');
  assets = loadConsoleAssets(dir);
  server = createServer(yogaWith({ assets, devToken: DEV_TOKEN }));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((resolve) => server?.close(resolve));
  await rm(dir, { recursive: true, force: true });
});

describe('useConsole', () => {
  it('redirects /console to /console/ so the page resolves its relative assets', async () => {
    const response = await fetch(`${baseUrl}/console?x=1`, { redirect: 'manual' });
    expect(response.status).toBe(308);
    expect(response.headers.get('location')).toBe('/console/?x=1');
  });

  it('serves the page with a strict CSP, never cached, and the dev token to a loopback browser', async () => {
    const response = await fetch(`${baseUrl}/console/`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(response.headers.get('cache-control')).toBe('no-store');
    expect(response.headers.get('content-security-policy')).toContain("script-src 'self'");
    expect(response.headers.get('content-security-policy')).toContain("connect-src 'self'");
    const html = await response.text();
    expect(html).toContain(`<meta name="herald-dev-token" content="${DEV_TOKEN}" />`);
    expect(html).toContain(SCRIPT);
  });

  it('does not hand the dev token to a request that did not come over loopback', async () => {
    // yoga.fetch has no socket, like a peer whose address is not loopback.
    const response = await yogaWith({ assets, devToken: DEV_TOKEN }).fetch('http://herald.test/console/');
    expect(response.status).toBe(200);
    expect(await response.text()).not.toContain('herald-dev-token');
  });

  it('serves the page without a token when none is given', async () => {
    const response = await yogaWith({ assets }).fetch('http://herald.test/console/index.html');
    expect(await response.text()).toBe(INDEX);
  });

  it('serves hashed assets with an immutable cache lifetime', async () => {
    const response = await fetch(`${baseUrl}/console/${SCRIPT}`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(response.headers.get('cache-control')).toContain('immutable');
    expect(await response.text()).toBe('console.log("herald")');
  });

  it('answers 404 for anything not in the build: unknown names, other file types, paths that try to leave it', async () => {
    for (const path of ['missing.js', 'notes.txt', '..%2Fpackage.json', '..%2F..%2Fetc%2Fpasswd', 'sub/index.html']) {
      const response = await fetch(`${baseUrl}/console/${path}`);
      expect(response.status, path).toBe(404);
      await response.arrayBuffer();
    }
  });

  it('refuses methods other than GET and HEAD with 405', async () => {
    const response = await fetch(`${baseUrl}/console/`, { method: 'POST', body: '{}' });
    expect(response.status).toBe(405);
    expect(response.headers.get('allow')).toBe('GET, HEAD');
  });

  it('leaves every other path to Yoga', async () => {
    const response = await fetch(`${baseUrl}/graphql?query=%7Bok%7D`, { headers: { 'x-graphql-yoga-csrf': '1' } });
    expect(await response.json()).toEqual({ data: { ok: null } });
    expect((await fetch(`${baseUrl}/consoles`)).status).toBe(404);
  });

  it('answers 503 with how to build the console when no build was found', async () => {
    const response = await yogaWith({ assets: undefined }).fetch('http://herald.test/console/');
    expect(response.status).toBe(503);
    expect(await response.text()).toContain('pnpm --filter @herald/console build');
  });

  it('refuses a configured console folder without index.html, naming it, before the API opens anything', async () => {
    expect(() => loadConsoleAssets(join(dir, 'nowhere'))).toThrow(/no index\.html in .*nowhere/);
    const config = loadApiConfig({
      NODE_ENV: 'test',
      JWT_SECRET: 'console-test-secret-0123456789abcdef',
      HERALD_DATA_DIR: join(dir, 'never-created'),
      HERALD_CONSOLE_DIR: join(dir, 'nowhere'),
    });
    await expect(createApp(config, pino({ level: 'silent' }))).rejects.toThrow(/no index\.html in .*nowhere/);
  });
});

describe('the development token on /console of a whole API', () => {
  /** Embedded mode without JWT_SECRET, so the API generates its development secret itself. */
  async function startEmbedded(nodeEnv: 'development' | 'production'): Promise<{ app: HeraldApp; url: string }> {
    const dataDir = await mkdtemp(join(tmpdir(), `herald-console-${nodeEnv}-`));
    const config = loadApiConfig({
      NODE_ENV: nodeEnv,
      HOST: '127.0.0.1',
      PORT: '0',
      HERALD_DATA_DIR: dataDir,
      HERALD_CONSOLE_DIR: dir,
    });
    const app = await createApp(config, pino({ level: 'silent' }));
    const { port } = await app.listen();
    const stop = app.stop.bind(app);
    app.stop = async () => {
      await stop();
      await rm(dataDir, { recursive: true, force: true });
    };
    return { app, url: `http://127.0.0.1:${port}/console/` };
  }

  it('is pre-filled in development embedded mode, and is a token the API accepts', async () => {
    const { app, url } = await startEmbedded('development');
    try {
      const html = await (await fetch(url)).text();
      const token = /name="herald-dev-token" content="([^"]+)"/.exec(html)?.[1];
      expect(token).toBe(app.devToken);
      const response = await fetch(url.replace('/console/', '/graphql'), {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({ query: '{ me { id orgs } }' }),
      });
      expect(await response.json()).toEqual({ data: { me: { id: 'demo-user', orgs: ['demo'] } } });
    } finally {
      await app.stop();
    }
  });

  it('is never in the page in production, even when the API generated the secret itself', async () => {
    const { app, url } = await startEmbedded('production');
    try {
      expect(app.devSecret).toBeDefined();
      const response = await fetch(url);
      expect(response.status).toBe(200);
      expect(await response.text()).not.toContain('herald-dev-token');
    } finally {
      await app.stop();
    }
  });
});
