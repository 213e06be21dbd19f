import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildConsole, isConsoleBuildStale } from '../../apps/console/src/build/build-console.js';
import { type ApiProcess, startApiProcess } from '../support/api-process.js';
import { openConsoleEndpoint } from '../support/chromium.js';
import { graphqlData } from '../support/graphql-http.js';

// The operators' console (apps/console) in a real headless Chromium, served by an embedded-mode API: an
// endpoint's view shows its filter and rate limit, and sets, refuses and removes the limit and switches
// its ordering; each change is read back through the API, and a refused value changes nothing.

/** Upper bound of every single wait in this file. */
const WAIT_MS = 30_000;

let receiver: Server;
let receiverUrl: string;
let dataDir: string | undefined;
let profileDir: string | undefined;
let api: ApiProcess | undefined;
let token: string;
let browser: BrowserContext | undefined;
let endpointId: string;

beforeAll(async () => {
  receiver = createServer((_request, response) => response.writeHead(204).end());
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/settings`;
  if (isConsoleBuildStale()) await buildConsole();
  dataDir = await mkdtemp(join(tmpdir(), 'herald-console-settings-'));
  api = await startApiProcess({ HERALD_DATA_DIR: dataDir });
  token = (await api.waitForStderr(/Bearer ([\w-]+\.[\w-]+\.[\w-]+)/))[1]!;
  const created = await graphql<{ createWebhookEndpoint: { endpoint: { id: string } } }>(
    `mutation($url: String!) {
      createWebhookEndpoint(input: {
        orgId: "demo", url: $url, eventTypes: ["post.published"], filter: "{\\"data\\":{\\"tags\\":[\\"urgent\\"]}}"
      }) { endpoint { id } }
    }`,
    { url: receiverUrl },
  );
  endpointId = created.createWebhookEndpoint.endpoint.id;
});

afterAll(async () => {
  await browser?.close();
  await api?.stop();
  await new Promise((resolve) => receiver?.close(resolve));
  for (const dir of [profileDir, dataDir]) if (dir) await rm(dir, { recursive: true, force: true });
});

function graphql<T>(query: string, variables?: Record<string, unknown>): Promise<T> {
  return graphqlData(`http://127.0.0.1:${api!.port}`, token, query, variables, WAIT_MS) as Promise<T>;
}

/** The endpoint's settings as the API reads them. */
async function settings() {
  const { webhookEndpoint } = await graphql<{
    webhookEndpoint: { rateLimitPerSecond: number | null; ordering: string; filter: string | null };
  }>('query($id: ID!) { webhookEndpoint(id: $id) { rateLimitPerSecond ordering filter } }', { id: endpointId });
  return webhookEndpoint;
}

async function openEndpoint(): Promise<Page> {
  const opened = await openConsoleEndpoint(api!.port, receiverUrl, WAIT_MS);
  profileDir = opened.profileDir;
  browser = opened.context;
  return opened.page;
}

/** Waits until the element of `testId` shows `text`, and returns what it shows. */
async function shows(page: Page, testId: string, text: string | RegExp): Promise<string> {
  const element = page.getByTestId(testId).filter({ hasText: text });
  await element.waitFor({ timeout: WAIT_MS });
  return (await element.textContent()) ?? '';
}

describe("the console's delivery settings of an endpoint", () => {
  it('shows the filter and rate limit, sets, refuses and removes the limit, and switches the ordering', async () => {
    const page = await openEndpoint();
    expect(await shows(page, 'filter', 'urgent')).toBe('{"data":{"tags":["urgent"]}}');
    expect(await shows(page, 'rate-limit', /^None$/)).toBe('None');
    const rate = page.getByLabel('Attempts per second');

    await rate.fill('25');
    await page.getByRole('button', { name: 'Set rate limit' }).click();
    expect(await shows(page, 'rate-limit', '25')).toContain('25 attempts a second');
    expect((await settings()).rateLimitPerSecond).toBe(25);

    // Out of range: the API's refusal shows, coded, and the limit stays as it was.
    await rate.fill('0');
    await page.getByRole('button', { name: 'Set rate limit' }).click();
    const refusal = page.getByRole('alert');
    await refusal.waitFor({ timeout: WAIT_MS });
    expect(await refusal.textContent()).toMatch(
      /rateLimitPerSecond must be an integer from 1 to 10000.*BAD_USER_INPUT/,
    );
    expect((await settings()).rateLimitPerSecond).toBe(25);
    expect(await shows(page, 'rate-limit', '25')).toContain('25 attempts a second');

    await page.getByRole('button', { name: 'Remove rate limit' }).click();
    expect(await shows(page, 'rate-limit', /^None$/)).toBe('None');
    expect((await settings()).rateLimitPerSecond).toBeNull();

    await page.getByRole('button', { name: 'Switch to FIFO' }).click();
    expect(await shows(page, 'ordering', 'FIFO')).toContain('one at a time');
    expect((await settings()).ordering).toBe('FIFO');
    await page.getByRole('button', { name: 'Switch to unordered' }).click();
    expect(await shows(page, 'ordering', 'Unordered')).toBe('Unordered');
    expect(await settings()).toEqual({
      rateLimitPerSecond: null,
      ordering: 'UNORDERED',
      filter: '{"data":{"tags":["urgent"]}}',
    });
  });
});
