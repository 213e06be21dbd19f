import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext, Page, Route } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiProcess, startApiProcess } from '../support/api-process.js';
import { launchChromium } from '../support/chromium.js';
import { graphqlData } from '../support/graphql-http.js';

// The GraphiQL that Herald serves on GET /graphql, driven in a real (headless) Chromium: a user pastes
// the development token into the Headers tab, runs a `postPublished` subscription, and sees a post that
// is published meanwhile appear in the result pane.

/** Upper bound of every single wait in this file. */
const WAIT_MS = 30_000;
const SCREENSHOT = join(tmpdir(), 'herald-graphiql.png');

/**
 * The closed network must not make Chromium phone home (it would flood refused connections), and the
 * container has no sandbox or GPU.
 */

let dataDir: string | undefined;
let profileDir: string | undefined;
let api: ApiProcess | undefined;
let token: string;
let browser: BrowserContext | undefined;
/** Requests the page tried to make off this machine (must stay empty). */
const unansweredRequests: string[] = [];
/** What the page said on the GraphQL WebSocket and in its console (diagnostics). */
const pageLog: string[] = [];

beforeAll(async () => {
  // Embedded mode (no DATABASE_URL is passed on): PGlite in a fresh directory, and a development token
  // for `demo-user` in org `demo` printed on stderr, as `pnpm start` does for a developer.
  dataDir = await mkdtemp(join(tmpdir(), 'herald-graphiql-'));
  api = await startApiProcess({ HERALD_DATA_DIR: dataDir });
  token = (await api.waitForStderr(/Bearer ([\w-]+\.[\w-]+\.[\w-]+)/))[1]!;
});

afterAll(async () => {
  await browser?.close();
  await api?.stop();
  for (const dir of [profileDir, dataDir]) if (dir) await rm(dir, { recursive: true, force: true });
});

/** A fresh headless Chromium profile whose requests never leave the machine. */
async function launchBrowser(): Promise<BrowserContext> {
  const launched = await launchChromium({ timeoutMs: WAIT_MS, viewport: { width: 1440, height: 900 } });
  profileDir = launched.profileDir;
  const { context } = launched;
  await context.route(/^https?:\/\/(?!127\.0\.0\.1[:/])/, answerOutsideRequest);
  return context;
}

/** Herald's GraphiQL is bundled into the page: any request off this machine is a bug (and would fail offline). */
async function answerOutsideRequest(route: Route): Promise<void> {
  unansweredRequests.push(route.request().url());
  await route.abort('internetdisconnected');
}

/** Plain GraphQL over HTTP from the test process, as the same user. */
const graphql = (query: string) => graphqlData(api!.baseUrl, token, query, {}, WAIT_MS);

async function activeSubscriptions(): Promise<number> {
  const response = await fetch(`${api!.baseUrl}/metrics`, { signal: AbortSignal.timeout(WAIT_MS) });
  const line = (await response.text()).split('\n').find((entry) => entry.startsWith('herald_subscriptions_active '));
  return line ? Number(line.split(' ')[1]) : 0;
}

/** Replaces a Monaco editor's whole content, as a paste would (typing would trigger auto-closing brackets). */
async function replaceEditorContent(page: Page, region: string, text: string): Promise<void> {
  const editor = page.getByRole('region', { name: region, exact: true }).getByRole('textbox');
  // Monaco's input is a textarea under its rendered lines, which take the clicks: focus it directly.
  await editor.focus();
  await page.keyboard.press('ControlOrMeta+A');
  await page.keyboard.insertText(text);
  // Monaco may still close the first bracket itself; drop whatever follows what we inserted.
  await page.keyboard.press('ControlOrMeta+Shift+End');
  await page.keyboard.press('Delete');
  await page.keyboard.press('ControlOrMeta+Home');
}

/** Context for a failure message: what the pane shows, the socket traffic, and where the screenshot is. */
async function diagnostics(page: Page, resultText: string): Promise<string> {
  await page.screenshot({ path: SCREENSHOT }).catch(() => undefined);
  return [
    `result pane: ${resultText || '(empty)'}`,
    `page log:\n  ${pageLog.join('\n  ') || '(nothing)'}`,
    `requests off this machine: ${unansweredRequests.join(', ') || 'none'}`,
    `screenshot: ${SCREENSHOT}`,
  ].join('\n');
}

/**
 * Waits (bounded) until `done` holds, failing at once if GraphiQL's result pane shows GraphQL errors:
 * a refused subscription ends there, and waiting longer would not change it.
 */
async function waitFor(page: Page, what: string, done: (resultText: string) => Promise<boolean>): Promise<void> {
  const resultWindow = page.getByRole('region', { name: 'Result Window', exact: true });
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    // Monaco renders spaces as no-break spaces; `\s` matches those too.
    const resultText = ((await resultWindow.textContent()) ?? '').replace(/\s+/g, ' ').trim();
    if (resultText.includes('"errors"')) {
      throw new Error(`GraphiQL shows errors while waiting for ${what}\n${await diagnostics(page, resultText)}`);
    }
    if (await done(resultText)) return;
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${WAIT_MS} ms waiting for ${what}\n${await diagnostics(page, resultText)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

describe('GraphiQL served by Herald, in headless Chromium', () => {
  it('runs a postPublished subscription with the token from the Headers tab and shows a post published meanwhile', async () => {
    browser = await launchBrowser();
    const page = browser.pages()[0] ?? (await browser.newPage());
    page.on('console', (message) => pageLog.push(`console.${message.type()}: ${message.text().slice(0, 300)}`));
    page.on('pageerror', (error) => pageLog.push(`page error: ${error.message}`));
    page.on('websocket', (socket) => {
      pageLog.push(`websocket ${socket.url()}`);
      const masked = (payload: string | Buffer) => String(payload).replaceAll(token, '<token>').slice(0, 300);
      socket.on('framesent', (frame) => pageLog.push(`ws sent: ${masked(frame.payload)}`));
      socket.on('framereceived', (frame) => pageLog.push(`ws received: ${masked(frame.payload)}`));
      socket.on('close', () => pageLog.push('ws closed'));
    });

    await page.goto(`${api!.baseUrl}/graphql`, { timeout: WAIT_MS });
    await page.getByRole('region', { name: 'Operation Editor', exact: true }).getByRole('textbox').waitFor();

    await page.getByRole('button', { name: 'Headers', exact: true }).click();
    await replaceEditorContent(page, 'Headers', JSON.stringify({ Authorization: `Bearer ${token}` }));
    // One line: Monaco re-indents inserted line breaks by itself.
    await replaceEditorContent(page, 'Operation Editor', 'subscription { postPublished(orgId: "demo") { id title } }');
    await page.getByRole('button', { name: /^Execute query/ }).click();

    // Publish only once the server streams the subscription, so the event cannot be missed.
    await waitFor(page, 'the subscription to be active on the server', async () => (await activeSubscriptions()) >= 1);

    const title = `Hello GraphiQL ${Date.now().toString(36)}`;
    const { createPost } = await graphql(`mutation { createPost(input: { orgId: "demo", title: "${title}" }) { id } }`);
    await graphql(`mutation { publishPost(id: "${createPost.id}") { id } }`);

    await waitFor(page, `"${title}" in the result pane`, async (resultText) => resultText.includes(title));
    const resultWindow = page.getByRole('region', { name: 'Result Window', exact: true });
    const resultText = ((await resultWindow.textContent()) ?? '').replace(/\s+/g, ' ');
    expect(resultText).toContain(`"id": "${createPost.id}"`);
    expect(resultText).toContain(`"title": "${title}"`);
    expect(unansweredRequests).toEqual([]);
    await page.screenshot({ path: SCREENSHOT });
  }, 90_000);
});
