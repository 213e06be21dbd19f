import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor } from '@herald/testing/ports';
import type { BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildConsole, isConsoleBuildStale } from '../../apps/console/src/build/build-console.js';
import { type ApiProcess, startApiProcess } from '../support/api-process.js';
import { openConsoleEndpoint } from '../support/chromium.js';
import { graphqlData, publishNewPost } from '../support/graphql-http.js';

// The operators' console (apps/console) in a real headless Chromium, served by an embedded-mode API:
// a FIFO endpoint whose receiver keeps failing shows its ordering, the delivery at the head of its
// line, and how many deliveries that head holds back.

/** Upper bound of every single wait in this file. */
const WAIT_MS = 30_000;
/** `HERALD_UPDATE_SCREENSHOTS=1` writes the screenshot into docs/ (committed beside the others). */
const SCREENSHOT_DIR = process.env.HERALD_UPDATE_SCREENSHOTS
  ? fileURLToPath(new URL('../../docs/console', import.meta.url))
  : join(tmpdir(), 'herald-console-screenshots');

let receiver: Server;
let receiverUrl: string;
const received: string[] = [];
let dataDir: string | undefined;
let profileDir: string | undefined;
let api: ApiProcess | undefined;
let token: string;
let browser: BrowserContext | undefined;

beforeAll(async () => {
  // Every delivery fails: the FIFO endpoint's head stays stuck and holds the rest back.
  receiver = createServer((request, response) => {
    let body = '';
    request.setEncoding('utf8').on('data', (chunk: string) => {
      body += chunk;
    });
    request.on('end', () => {
      received.push((JSON.parse(body) as { id: string }).id);
      response.writeHead(500, { 'content-type': 'text/plain' });
      response.end('receiver down');
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/ledger`;
  if (isConsoleBuildStale()) await buildConsole();
  dataDir = await mkdtemp(join(tmpdir(), 'herald-console-fifo-'));
  // A retry only after a minute: the head stays stuck for the whole test.
  api = await startApiProcess({ HERALD_DATA_DIR: dataDir, WEBHOOK_RETRY_BASE_MS: '60000' });
  token = (await api.waitForStderr(/Bearer ([\w-]+\.[\w-]+\.[\w-]+)/))[1]!;
  await mkdir(SCREENSHOT_DIR, { recursive: true });
});

afterAll(async () => {
  await browser?.close();
  await api?.stop();
  await new Promise((resolve) => receiver?.close(resolve));
  for (const dir of [profileDir, dataDir]) if (dir) await rm(dir, { recursive: true, force: true });
});

const graphql = (query: string, variables?: Record<string, unknown>) =>
  graphqlData(`http://127.0.0.1:${api!.port}`, token, query, variables, WAIT_MS);

const publishPost = (title: string) => publishNewPost(`http://127.0.0.1:${api!.port}`, token, 'demo', title, WAIT_MS);

describe('the console on a FIFO endpoint', () => {
  it('shows the ordering, the stuck head of the line and how many deliveries it holds back, and gives up on the head', async () => {
    await graphql(
      `mutation($url: String!) {
        createWebhookEndpoint(input: { orgId: "demo", url: $url, eventTypes: ["post.published"], ordering: FIFO }) {
          endpoint { id }
        }
      }`,
      { url: receiverUrl },
    );
    for (const title of ['first', 'second', 'third']) await publishPost(`FIFO: ${title}`);
    await waitFor('the head to be attempted', async () => received.length > 0, {
      timeoutMs: WAIT_MS,
      intervalMs: 100,
    });
    const head = received[0]!;

    const opened = await openConsoleEndpoint(api!.port, receiverUrl, WAIT_MS);
    profileDir = opened.profileDir;
    browser = opened.context;
    const { page } = opened;

    expect(await page.getByTestId('ordering').textContent()).toContain('FIFO');
    const line = page.getByTestId('fifo-head');
    await line.waitFor({ timeout: WAIT_MS });
    expect(await line.textContent()).toContain(head);
    expect(await line.textContent()).toContain('holds back 2 deliveries');
    // The two behind it show in the delivery log as waiting in line.
    const waiting = page.locator('tbody.delivery', { hasText: 'in line' });
    await waiting.nth(1).waitFor({ timeout: WAIT_MS });
    expect(await waiting.count()).toBe(2);
    await page.screenshot({ path: join(SCREENSHOT_DIR, 'endpoint-fifo.png') });
    // Only the head was attempted.
    expect(new Set(received)).toEqual(new Set([head]));

    // Giving up on the head (after the browser's confirm) makes it a dead letter; the next in line is
    // attempted (and fails too: it is the head now, holding back the last one).
    page.once('dialog', (dialog) => void dialog.accept());
    await page.getByRole('button', { name: 'Give up on it' }).click();
    await page
      .getByRole('status')
      .filter({ hasText: `Gave up on ${head}` })
      .waitFor({ timeout: WAIT_MS });
    await waitFor('the next in line to be attempted', async () => new Set(received).size === 2, {
      timeoutMs: WAIT_MS,
      intervalMs: 100,
    });
    const next = received.find((id) => id !== head)!;
    await page.reload();
    const nextLine = page.getByTestId('fifo-head').filter({ hasText: next });
    await nextLine.waitFor({ timeout: WAIT_MS });
    expect(await nextLine.textContent()).toContain('holds back 1 delivery');
    const { webhookEndpoints } = (await graphql(
      `query { webhookEndpoints(orgId: "demo") { deliveries(status: DEAD) { edges { node { eventId } } } } }`,
    )) as { webhookEndpoints: Array<{ deliveries: { edges: Array<{ node: { eventId: string } }> } }> };
    expect(webhookEndpoints.flatMap((endpoint) => endpoint.deliveries.edges.map((edge) => edge.node.eventId))).toEqual([
      head,
    ]);
  });
});
