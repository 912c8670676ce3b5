// Chromium for the console's browser tests: the distribution's package (`apt-get install chromium`),
// or the one SLIPWAY_TEST_CHROMIUM names. The console only speaks the API: its pages are driven
// once, on SQLite.
import fs from 'node:fs';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { TEST_DB } from './harness.js';

function findChromium(): string | null {
  const candidates = [process.env.SLIPWAY_TEST_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];
  return candidates.find((file): file is string => file !== undefined && file !== '' && fs.existsSync(file)) ?? null;
}

const CHROMIUM = findChromium();
const IN_CI = ['true', '1', 'yes'].includes((process.env.CI ?? '').trim().toLowerCase());

/**
 * Why `file`'s browser tests are skipped here (said on stderr when it is a missing Chromium), or
 * false. In CI, a missing Chromium fails the file instead.
 */
export function browserSkip(file: string): string | false {
  if (CHROMIUM === null && IN_CI) throw new Error(`${file}: CI must run the browser tests; install Chromium (apt-get install chromium) or set SLIPWAY_TEST_CHROMIUM`);
  const skip = TEST_DB !== 'sqlite'
    ? 'the page only speaks the API: driven once, on SQLite'
    : CHROMIUM === null ? 'NO CHROMIUM: install it (apt-get install chromium) or set SLIPWAY_TEST_CHROMIUM to run the console in a browser' : false;
  if (CHROMIUM === null && TEST_DB === 'sqlite') process.stderr.write(`\n${file}: SKIPPING the browser tests: ${skip}\n\n`);
  return skip;
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM!,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
}

/**
 * A page in a context of its own (kept in `contexts`, for the test to close), failing after 15 s
 * of waiting, whose script errors and console errors go into `pageErrors`. `bypassCSP`: for a
 * script a test injects (axe-core).
 */
export async function openPage(browser: Browser, contexts: BrowserContext[], pageErrors: string[], options: { bypassCSP?: boolean } = {}): Promise<Page> {
  const context = await browser.newContext(options);
  contexts.push(context);
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  page.on('pageerror', (error) => pageErrors.push(String(error)));
  page.on('console', (message) => { if (message.type() === 'error') pageErrors.push(message.text()); });
  return page;
}

/** Signs in on the console's sign-in page at `url` with a service user's credentials. */
export async function signIn(page: Page, url: string, creds: { clientId: string; clientSecret: string }): Promise<void> {
  await page.goto(`${url}/`);
  await page.fill('#signin-credentials input[name=clientId]', creds.clientId);
  await page.fill('#signin-credentials input[name=clientSecret]', creds.clientSecret);
  await page.click('#signin-credentials button[type=submit]');
}
