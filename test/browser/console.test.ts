import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor } from '@herald/testing/ports';
import type { BrowserContext, Locator, Page, Route } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildConsole, isConsoleBuildStale } from '../../apps/console/src/build/build-console.js';
import { type ApiProcess, startApiProcess } from '../support/api-process.js';
import { launchChromium } from '../support/chromium.js';
import { graphqlData, publishNewPost } from '../support/graphql-http.js';
import { type NginxProcess, startNginx } from '../support/nginx.js';

// The operators' console (apps/console) in a real headless Chromium, served by an embedded-mode API
// (as `pnpm start` runs it) behind the nginx config of deploy/. An operator signs in with the
// pre-filled development token, adds an endpoint whose receiver answers 500, sees the failed attempts
// and the dead letter, replays it once the receiver answers 200, disables and enables the endpoint and
// sends test events. Every step is checked on the page and on the receiver.

/** Upper bound of every single wait in this file. */
const WAIT_MS = 30_000;
/** `HERALD_UPDATE_SCREENSHOTS=1` writes the screenshots into docs/ (committed, shown in the README). */
const SCREENSHOT_DIR = process.env.HERALD_UPDATE_SCREENSHOTS
  ? fileURLToPath(new URL('../../docs/console', import.meta.url))
  : join(tmpdir(), 'herald-console-screenshots');
const RECEIVER_FAILURE_BODY = 'receiver down: database is read-only';

/** What the receiver got: one entry per request. */
interface Received {
  id: string;
  type: string;
  answeredWith: number;
}

let receiver: Server;
let receiverUrl: string;
/** What the receiver answers right now. */
let receiverStatus = 500;
const received: Received[] = [];

let dataDir: string | undefined;
let profileDir: string | undefined;
let api: ApiProcess | undefined;
let nginx: NginxProcess | undefined;
let token: string;
let browser: BrowserContext | undefined;
const unansweredRequests: string[] = [];
const pageLog: string[] = [];

beforeAll(async () => {
  receiver = createServer((request, response) => {
    let body = '';
    request.setEncoding('utf8').on('data', (chunk: string) => {
      body += chunk;
    });
    request.on('end', () => {
      const event = JSON.parse(body) as { id: string; type: string };
      received.push({ id: event.id, type: event.type, answeredWith: receiverStatus });
      response.writeHead(receiverStatus, { 'content-type': 'text/plain' });
      response.end(receiverStatus === 200 ? 'ok' : RECEIVER_FAILURE_BODY);
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks`;

  // What `pnpm start` does first; a no-op when `pnpm install` already built it.
  if (isConsoleBuildStale()) await buildConsole();
  dataDir = await mkdtemp(join(tmpdir(), 'herald-console-'));
  api = await startApiProcess({
    HERALD_DATA_DIR: dataDir,
    // Short retries so a failing delivery is dead within seconds.
    WEBHOOK_RETRY_BASE_MS: '200',
    WEBHOOK_RETRY_HORIZON: '2s',
    WEBHOOK_TIMEOUT_MS: '5000',
  });
  token = (await api.waitForStderr(/Bearer ([\w-]+\.[\w-]+\.[\w-]+)/))[1]!;
  nginx = await startNginx([api.port]);
  await mkdir(SCREENSHOT_DIR, { recursive: true });
});

afterAll(async () => {
  await browser?.close();
  await nginx?.stop();
  await api?.stop();
  await new Promise((resolve) => receiver?.close(resolve));
  for (const dir of [profileDir, dataDir]) if (dir) await rm(dir, { recursive: true, force: true });
});

async function launchBrowser(): Promise<BrowserContext> {
  const launched = await launchChromium({ timeoutMs: WAIT_MS, viewport: { width: 1280, height: 800 } });
  profileDir = launched.profileDir;
  const { context } = launched;
  await context.route(/^https?:\/\/(?!127\.0\.0\.1[:/])/, async (route: Route) => {
    unansweredRequests.push(route.request().url());
    await route.abort('internetdisconnected');
  });
  return context;
}

/** GraphQL from the test process, as the same demo user (through nginx too). */
const graphql = (query: string, variables?: Record<string, unknown>) =>
  graphqlData(nginx!.baseUrl, token, query, variables, WAIT_MS);

const publishPost = (title: string) => publishNewPost(nginx!.baseUrl, token, 'demo', title, WAIT_MS);

/** Waits (bounded) until the receiver got a request matching `match`, and returns it. */
async function receivedMatching(what: string, match: (entry: Received) => boolean): Promise<Received> {
  await waitFor(`the receiver to get ${what}`, async () => received.some(match), {
    timeoutMs: WAIT_MS,
    intervalMs: 100,
  });
  return received.find(match)!;
}

/** The rows of one delivery in the log (the console refreshes every 2 s). */
function deliveryRows(page: Page, eventId: string, status?: string): Locator {
  const selector = status ? `tbody.delivery[data-status="${status}"]` : 'tbody.delivery';
  return page.locator(selector, { hasText: eventId });
}

async function screenshot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(SCREENSHOT_DIR, `${name}.png`) });
}

async function diagnostics(page: Page): Promise<string> {
  await screenshot(page, 'failure').catch(() => undefined);
  return [
    `page log:\n  ${pageLog.slice(-30).join('\n  ') || '(nothing)'}`,
    `receiver got: ${JSON.stringify(received)}`,
    `requests off this machine: ${unansweredRequests.join(', ') || 'none'}`,
    `screenshot: ${join(SCREENSHOT_DIR, 'failure.png')}`,
  ].join('\n');
}

describe('the operators console in headless Chromium, behind nginx', () => {
  it('signs in (a bad token refused), shows a failing endpoint and its dead letter, replays it, disables, enables, sends test events, signs out on a refused token', async () => {
    browser = await launchBrowser();
    const page = browser.pages()[0] ?? (await browser.newPage());
    page.on('console', (message) => pageLog.push(`console.${message.type()}: ${message.text().slice(0, 300)}`));
    page.on('pageerror', (error) => pageLog.push(`page error: ${error.message}`));
    page.on('requestfailed', (request) => pageLog.push(`request failed: ${request.url()}`));
    try {
      // 1. Sign in: embedded development mode pre-fills the development token.
      await page.goto(`${nginx!.baseUrl}/console`, { timeout: WAIT_MS });
      const tokenField = page.getByLabel('Access token (JWT)');
      await tokenField.waitFor();
      expect(await tokenField.inputValue()).toBe(token);
      await screenshot(page, 'sign-in');
      // A bad token is refused with the API's code, and the form stays for another try.
      await tokenField.fill('Bearer not-a-token');
      await page.getByRole('button', { name: 'Sign in' }).click();
      expect(await page.getByRole('alert').textContent()).toContain('UNAUTHENTICATED');
      await tokenField.fill(token);
      await page.getByRole('button', { name: 'Sign in' }).click();
      // One organisation in the token: straight to its endpoints.
      await page.getByRole('heading', { name: /Webhook endpoints/ }).waitFor();
      expect(await page.locator('.topbar .viewer').textContent()).toBe('Demo User');
      expect(page.url()).toContain('#/orgs/demo');

      // 2. Add an endpoint through the form; its secret is shown once.
      await page.getByLabel('Receiver URL').fill(receiverUrl);
      await page.getByRole('button', { name: 'Add endpoint' }).click();
      const firstSecret = (await page.getByTestId('secret').textContent()) ?? '';
      expect(firstSecret).toMatch(/^whsec_/);
      const row = page.locator('table.endpoints tr', { hasText: receiverUrl });
      await row.waitFor();
      expect(await row.locator('.badge').textContent()).toBe('ENABLED');
      const { webhookEndpoints } = await graphql('{ webhookEndpoints(orgId: "demo") { id url status } }');
      expect(webhookEndpoints).toEqual([expect.objectContaining({ url: receiverUrl, status: 'ENABLED' })]);

      // 3. The receiver answers 500: the delivery fails, is retried, and dies (horizon 2 s).
      receiverStatus = 500;
      await publishPost('Console: failing delivery');
      const failed = await receivedMatching('the post.published event', (entry) => entry.type === 'post.published');
      expect(failed.answeredWith).toBe(500);
      await row.getByRole('link', { name: receiverUrl }).click();
      await page.getByRole('heading', { name: receiverUrl }).waitFor();
      const dead = deliveryRows(page, failed.id, 'DEAD');
      await dead.waitFor();
      // Dead letters open with their attempts: each one 500, with the error and the receiver's answer.
      const attempts = dead.locator('tr.attempt');
      expect(await attempts.count()).toBe(received.filter((entry) => entry.id === failed.id).length);
      // Usually two or three by the horizon; a machine under load may get only one in before it.
      expect(await attempts.count()).toBeGreaterThanOrEqual(1);
      for (const code of await dead.locator('.status-code').allTextContents()) expect(code).toBe('500');
      expect(await dead.locator('.attempt-error').first().textContent()).toMatch(/500/);
      expect(await dead.locator('.response-body').first().textContent()).toBe(RECEIVER_FAILURE_BODY);
      await screenshot(page, 'endpoint-failing');
      await page.getByRole('link', { name: 'Dead letters' }).click();
      await page.waitForURL(/status=DEAD/);
      await deliveryRows(page, failed.id, 'DEAD').waitFor();
      await screenshot(page, 'dead-letters');

      // 4. The receiver recovers; "Replay dead letters" sends it again, and it succeeds, once.
      receiverStatus = 200;
      const attemptsBefore = received.filter((entry) => entry.id === failed.id).length;
      await page.getByRole('button', { name: 'Replay dead letters' }).click();
      await page.getByRole('status').filter({ hasText: 'Replaying 1 dead letters.' }).waitFor();
      await receivedMatching('the replayed event', (entry) => entry.id === failed.id && entry.answeredWith === 200);
      await page.getByRole('link', { name: 'All deliveries' }).click();
      const succeeded = deliveryRows(page, failed.id, 'SUCCEEDED');
      await succeeded.waitFor();
      await succeeded.getByRole('button', { name: 'Attempts' }).click();
      const codes = await succeeded.locator('.status-code').allTextContents();
      expect(codes.at(-1)).toBe('200');
      expect(codes.filter((code) => code === '500')).toHaveLength(attemptsBefore);
      expect(received.filter((entry) => entry.id === failed.id && entry.answeredWith === 200)).toHaveLength(1);
      await screenshot(page, 'endpoint-replayed');

      // 5. Disable: the page says DISABLED with the reason, and a test event sent meanwhile is SKIPPED,
      //    never reaching the receiver.
      await page.getByLabel('Reason for disabling').fill('receiver maintenance');
      await page.getByRole('button', { name: 'Disable', exact: true }).click();
      await page.locator('.endpoint-title .badge', { hasText: 'DISABLED' }).waitFor();
      expect(await page.getByTestId('health').textContent()).toBe('receiver maintenance');
      const disabled = await graphql('{ webhookEndpoints(orgId: "demo") { status disabledReason } }');
      expect(disabled.webhookEndpoints).toEqual([{ status: 'DISABLED', disabledReason: 'receiver maintenance' }]);
      await page.getByRole('button', { name: 'Send test event' }).click();
      const skippedId = /Test event (evt_\w+) sent/.exec(
        (await page.getByRole('status').filter({ hasText: 'Test event' }).textContent()) ?? '',
      )?.[1];
      expect(skippedId).toBeDefined();
      await deliveryRows(page, skippedId!, 'SKIPPED').waitFor();
      expect(received.filter((entry) => entry.id === skippedId)).toEqual([]);

      // 6. Enable, and send a test event: it reaches the receiver and shows SUCCEEDED with HTTP 200.
      await page.getByRole('button', { name: 'Enable', exact: true }).click();
      await page.locator('.endpoint-title .badge', { hasText: 'ENABLED' }).waitFor();
      await page.getByRole('button', { name: 'Send test event' }).click();
      const testId = /Test event (evt_\w+) sent/.exec(
        (await page
          .getByRole('status')
          .filter({ hasText: /Test event evt_\w+ sent/ })
          .textContent()) ?? '',
      )?.[1];
      expect(testId).toBeDefined();
      expect(testId).not.toBe(skippedId);
      const test = await receivedMatching('the webhook.test event', (entry) => entry.id === testId);
      expect(test).toEqual({ id: testId, type: 'webhook.test', answeredWith: 200 });
      await deliveryRows(page, testId!, 'SUCCEEDED').waitFor();
      expect(received.filter((entry) => entry.id === skippedId)).toEqual([]);

      // 7. Rotate the secret: a new one, shown once.
      await page.getByRole('button', { name: 'Rotate secret' }).click();
      const rotated = (await page.getByTestId('secret').textContent()) ?? '';
      expect(rotated).toMatch(/^whsec_/);
      expect(rotated).not.toBe(firstSecret);
      await page.getByRole('link', { name: /Endpoints of demo/ }).click();
      await page.locator('table.endpoints tr', { hasText: receiverUrl }).waitFor();
      await screenshot(page, 'endpoints');

      // 8. The API vanishes (every /graphql request fails): the page says so and keeps what it showed;
      //    when the API answers again the next refresh clears the error by itself.
      const refuse = (route: Route) => route.abort('connectionrefused');
      await page.route('**/graphql', refuse);
      // (Each panel of the page, the endpoints and the usage, says so over what it showed.)
      await page.getByRole('alert').filter({ hasText: 'Herald did not answer' }).first().waitFor();
      expect(await page.locator('table.endpoints tr', { hasText: receiverUrl }).isVisible()).toBe(true);
      await page.unroute('**/graphql', refuse);
      await page.getByRole('alert').first().waitFor({ state: 'detached' });
      expect(await page.locator('table.endpoints tr', { hasText: receiverUrl }).isVisible()).toBe(true);

      // 9. A stored token the API no longer accepts signs the operator out, saying why.
      await page.evaluate(() => sessionStorage.setItem('herald-console-token', 'expired.or.revoked'));
      await page.reload();
      await page.getByText(/^Signed out: /).waitFor();
      await tokenField.waitFor();

      expect(unansweredRequests).toEqual([]);
      expect(pageLog.filter((line) => line.startsWith('page error'))).toEqual([]);
    } catch (error) {
      throw new Error(`${(error as Error).message}\n${await diagnostics(page)}`, { cause: error });
    }
  }, 180_000);

  it("shows the organisation's usage against its quotas", async () => {
    browser ??= await launchBrowser();
    const page = await browser.newPage();
    page.on('pageerror', (error) => pageLog.push(`page error: ${error.message}`));
    try {
      await page.goto(`${nginx!.baseUrl}/console`, { timeout: WAIT_MS });
      await page.getByLabel('Access token (JWT)').fill(token);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: 'Usage and quotas' }).waitFor();
      const row = (quota: string) => page.locator(`table.usage tr[data-quota="${quota}"]`);
      // The embedded server's default quotas, as organizationUsage reports them.
      expect(await row('operationsPerSecond').locator('td.limit').textContent()).toBe('1000');
      expect(await row('publishesPerSecond').locator('td.limit').textContent()).toBe('100');
      expect(await row('webhookAttemptsInFlight').locator('td.limit').textContent()).toBe('100');
      const usage = await graphql(
        'query { organizationUsage(orgId: "demo") { subscriptions throttled { operationsPerSecond } } }',
      );
      expect(await row('subscriptions').locator('td.used').textContent()).toBe(
        String(usage.organizationUsage.subscriptions),
      );
      expect(await row('operationsPerSecond').locator('td.refused').textContent()).toBe(
        String(usage.organizationUsage.throttled.operationsPerSecond),
      );
      await screenshot(page, 'usage');
    } catch (error) {
      throw new Error(`${(error as Error).message}\n${await diagnostics(page)}`);
    } finally {
      await page.close();
    }
  });

  it('shows the event catalog, refuses a malformed filter, and adds an endpoint whose filter the deliveries follow', async () => {
    browser ??= await launchBrowser();
    const page = await browser.newPage();
    page.on('pageerror', (error) => pageLog.push(`page error: ${error.message}`));
    try {
      await page.goto(`${nginx!.baseUrl}/console`, { timeout: WAIT_MS });
      await page.getByLabel('Access token (JWT)').fill(token);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: /Webhook endpoints/ }).waitFor();

      // The catalog: every type, with its description and example body.
      await page.getByText('Event types and example bodies').click();
      const published = page.locator('.event-catalog section[data-event-type="post.published"]');
      await published.waitFor();
      expect(await page.locator('.event-catalog section').count()).toBe(4);
      expect(await published.locator('pre').textContent()).toContain('"tags": [');

      // A malformed filter is refused with the API's reason, and nothing is added.
      const filteredUrl = `${receiverUrl}/filtered`;
      await page.getByLabel('Receiver URL').fill(filteredUrl);
      const filterField = page.getByLabel(/^Filter/);
      await filterField.fill('{"data":{"tags":"urgent"}}');
      await page.getByRole('button', { name: 'Add endpoint' }).click();
      const refusal = await page.getByRole('alert').filter({ hasText: 'BAD_USER_INPUT' }).textContent();
      expect(refusal).toContain('data.tags is a list');
      await filterField.fill('{"data":{"tags":["urgent"]}}');
      await page.getByRole('button', { name: 'Add endpoint' }).click();
      const row = page.locator('table.endpoints tr', { hasText: filteredUrl });
      await row.waitFor();
      expect(await row.locator('code.filter').textContent()).toBe('{"data":{"tags":["urgent"]}}');

      // Deliveries follow the filter: of two publications, the filtered endpoint gets the urgent one.
      await graphql(
        'mutation($url: String!) { createWebhookEndpoint(input: { orgId: "demo", url: $url, eventTypes: ["post.published"] }) { secret } }',
        { url: `${receiverUrl}/all` },
      );
      for (const tags of [['urgent'], ['routine']]) {
        const { createPost } = await graphql(
          'mutation($tags: [String!]) { createPost(input: { orgId: "demo", title: "Filtered", tags: $tags }) { id } }',
          { tags },
        );
        await graphql('mutation($id: ID!) { publishPost(id: $id) { id } }', { id: createPost.id });
      }
      const eventsOf = async (url: string): Promise<string[]> => {
        const { webhookEndpoints } = await graphql(
          '{ webhookEndpoints(orgId: "demo") { url deliveries(first: 10, eventType: "post.published") { edges { node { eventId } } } } }',
        );
        const endpoint = webhookEndpoints.find((candidate: { url: string }) => candidate.url === url);
        return endpoint.deliveries.edges.map((edge: { node: { eventId: string } }) => edge.node.eventId);
      };
      await waitFor(
        'both publications to be fanned out',
        async () => (await eventsOf(`${receiverUrl}/all`)).length === 2,
        {
          timeoutMs: WAIT_MS,
          intervalMs: 100,
        },
      );
      // Newest first: the urgent post was published first.
      const [, urgent] = await eventsOf(`${receiverUrl}/all`);
      expect(await eventsOf(filteredUrl)).toEqual([urgent]);
      await screenshot(page, 'event-catalog');
      expect(pageLog.filter((line) => line.startsWith('page error'))).toEqual([]);
    } catch (error) {
      throw new Error(`${(error as Error).message}\n${await diagnostics(page)}`, { cause: error });
    }
  }, 120_000);
});
