import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { signToken } from '@herald/auth';
import type { TestSchema } from '@herald/testing';
import { freePort, waitFor } from '@herald/testing/ports';
import { build } from 'esbuild';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiProcess, startApiProcess } from '../support/api-process.js';
import { launchChromium } from '../support/chromium.js';
import { createPodEnvironment } from '../support/pod-environment.js';
import { createAndPublish } from '../support/subscribers.js';

// @herald/client in a real (headless) Chromium, bundled with esbuild as an application would: it
// connects, takes a fresh token after the server closes with 4403 at expiry, and resumes after the
// server restarts, receiving the posts published meanwhile (through another pod) once, in order.

const WAIT_MS = 30_000;
const CLIENT_ENTRY = fileURLToPath(new URL('../../packages/client/src/index.ts', import.meta.url));
const JWT_SECRET = 'browser-client-secret-0123456789abcdef';
const ORG = `org-${randomUUID()}`;
const QUERY = 'subscription($orgId: ID!, $after: String) { postPublished(orgId: $orgId, after: $after) { title } }';

let schema: TestSchema;
let env: Record<string, string>;
let port: number;
let pod: ApiProcess;
let publisher: ApiProcess;
let writer: string;
let profileDir: string | undefined;
let browser: BrowserContext | undefined;
let page: Page;
let tokenCalls = 0;

beforeAll(async () => {
  ({ schema, env, writer } = await createPodEnvironment({
    redisPrefix: 'herald-browser',
    jwtSecret: JWT_SECRET,
    orgId: ORG,
    shutdownGraceMs: 3_000,
  }));
  port = await freePort();
  [pod, publisher] = await Promise.all([startApiProcess({ ...env, PORT: String(port) }), startApiProcess(env)]);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await Promise.all([pod?.stop(), publisher?.stop()]);
  if (profileDir) await rm(profileDir, { recursive: true, force: true });
  await schema?.drop();
});

const received = (): Promise<string[]> => page.evaluate(() => (window as any).received as string[]);

describe('@herald/client in Chromium', () => {
  it('connects, refreshes its token on 4403, and resumes after the server restarts', async () => {
    const bundle = await build({
      entryPoints: [CLIENT_ENTRY],
      bundle: true,
      format: 'iife',
      globalName: 'HeraldClient',
      platform: 'browser',
      target: 'chrome120',
      write: false,
    });
    ({ context: browser, profileDir } = await launchChromium({ timeoutMs: WAIT_MS }));
    page = browser.pages()[0] ?? (await browser.newPage());
    // The first two tokens expire 2 s after they are handed out; later ones last an hour.
    await page.exposeFunction('heraldToken', () => {
      tokenCalls++;
      const expiresIn = tokenCalls <= 2 ? Math.floor(Date.now() / 1000) + 2 : '1h';
      return signToken(JWT_SECRET, { sub: 'reader', orgs: [ORG] }, { expiresIn });
    });
    await page.setContent('<!doctype html><title>herald client</title>');
    await page.addScriptTag({ content: bundle.outputFiles[0]!.text });
    await page.evaluate(
      ({ url, query, orgId }) => {
        const w = window as any;
        w.received = [];
        w.errors = [];
        const client = w.HeraldClient.createHeraldClient({
          url,
          token: () => w.heraldToken(),
          reconnect: { baseMs: 100, maxMs: 1_000 },
        });
        client.subscribe(
          { query, variables: { orgId } },
          {
            next: (result: any) => w.received.push(result.data.postPublished.title),
            error: (error: unknown) => w.errors.push(String(error)),
            complete: () => {},
          },
        );
      },
      { url: `ws://127.0.0.1:${port}/graphql`, query: QUERY, orgId: ORG },
    );

    await waitFor('the first post in the page', async () => {
      await createAndPublish(publisher.baseUrl, writer, ORG, `hello ${Date.now()}`);
      await new Promise((resolve) => setTimeout(resolve, 300));
      return (await received()).length > 0;
    });
    await waitFor('a fresh token after 4403', () => tokenCalls >= 3, { timeoutMs: WAIT_MS });
    await createAndPublish(publisher.baseUrl, writer, ORG, 'after the token refresh');
    await waitFor('the post after the token refresh', async () =>
      (await received()).includes('after the token refresh'),
    );

    expect(await pod.stop('SIGTERM')).toBe(0);
    for (let i = 1; i <= 3; i++) await createAndPublish(publisher.baseUrl, writer, ORG, `while down ${i}`);
    pod = await startApiProcess({ ...env, PORT: String(port) });
    await waitFor('the posts published while the server was down', async () =>
      (await received()).includes('while down 3'),
    );
    await createAndPublish(publisher.baseUrl, writer, ORG, 'live again');
    await waitFor('the live post', async () => (await received()).includes('live again'));

    const titles = await received();
    const fromRefresh = titles.slice(titles.indexOf('after the token refresh'));
    expect(fromRefresh).toEqual([
      'after the token refresh',
      'while down 1',
      'while down 2',
      'while down 3',
      'live again',
    ]);
    expect(new Set(titles).size).toBe(titles.length);
    expect(await page.evaluate(() => (window as any).errors)).toEqual([]);
  }, 180_000);
});
