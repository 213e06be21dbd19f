import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BrowserContext, chromium, type Page, type Route } from 'playwright-core';

/** Debian's Chromium (`apt-get install -y chromium`; `.ci/run` installs it). Never downloaded. */
export const CHROMIUM = '/usr/bin/chromium';

/** No phoning home (this machine's network is closed), no sandbox or GPU inside a container. */
export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export interface LaunchedChromium {
  context: BrowserContext;
  /** The fresh profile folder; the caller removes it when done. */
  profileDir: string;
}

/**
 * A headless Chromium with a fresh profile. Call it inside the test rather than a hook, so a missing
 * browser reports the test as failed (not skipped).
 * @param timeoutMs the launch timeout and every page action's default timeout
 * @throws Error naming the install command when Chromium is not at {@link CHROMIUM}
 */
export async function launchChromium(options: {
  timeoutMs: number;
  viewport?: { width: number; height: number };
}): Promise<LaunchedChromium> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `${CHROMIUM} not found: this test drives a real browser; install Debian's chromium (apt-get install -y chromium)`,
    );
  }
  const profileDir = await mkdtemp(join(tmpdir(), 'herald-chromium-'));
  const context = await chromium.launchPersistentContext(profileDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    ...(options.viewport ? { viewport: options.viewport } : {}),
    timeout: options.timeoutMs,
  });
  context.setDefaultTimeout(options.timeoutMs);
  return { context, profileDir };
}

/**
 * A headless Chromium ({@link launchChromium}, 1280×800) on the console of an embedded-mode API on
 * 127.0.0.1:`port`, signed in with the development token the page offers, on the page of the endpoint
 * whose URL is `endpointUrl` (as the organisation's endpoint list links it). Requests anywhere but
 * 127.0.0.1 are refused, as on a machine without network.
 */
export async function openConsoleEndpoint(
  port: number,
  endpointUrl: string,
  timeoutMs: number,
): Promise<LaunchedChromium & { page: Page }> {
  const launched = await launchChromium({ timeoutMs, viewport: { width: 1280, height: 800 } });
  const { context } = launched;
  await context.route(/^https?:\/\/(?!127\.0\.0\.1[:/])/, (route: Route) => route.abort('internetdisconnected'));
  const page = context.pages()[0] ?? (await context.newPage());
  await page.goto(`http://127.0.0.1:${port}/console`, { timeout: timeoutMs });
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: /Webhook endpoints/ }).waitFor({ timeout: timeoutMs });
  await page.getByRole('link', { name: endpointUrl }).click();
  await page.getByRole('heading', { name: endpointUrl }).waitFor({ timeout: timeoutMs });
  return { ...launched, page };
}
