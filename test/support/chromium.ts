// Chromium for the console's browser tests: the distribution's package (`apt-get install chromium`),
// or the one SLIPWAY_TEST_CHROMIUM names. The console only speaks the API: its pages are driven
// once, on SQLite.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before } from 'node:test';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { newRunner, type RunnerClient } from './deployments.js';
import { startServer, TEST_DB, type TestServer } from './harness.js';

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

function launchChromium(): Promise<Browser> {
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
async function openPage(browser: Browser, contexts: BrowserContext[], pageErrors: string[], options: { bypassCSP?: boolean } = {}): Promise<Page> {
  const context = await browser.newContext(options);
  contexts.push(context);
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  page.on('pageerror', (error) => pageErrors.push(String(error)));
  page.on('console', (message) => { if (message.type() === 'error') pageErrors.push(message.text()); });
  return page;
}

type Credentials = { clientId: string; clientSecret: string };

/** A deployment a runner has claimed, in an environment and a service of its own, and how to send its log lines. */
export interface RunningDeployment {
  id: string;
  runner: RunnerClient;
  send(lines: string[]): Promise<void>;
  complete(): Promise<void>;
}

/** The console in a browser, for the tests of one `describe`. */
export interface ConsoleInBrowser {
  /** Its server: there from the first test on. */
  readonly server: TestServer;
  /** Errors the pages reported: a script error, a refused resource, a policy violation. */
  readonly pageErrors: string[];
  /** A page in a context of its own; `bypassCSP` for a script a test injects. */
  newPage(options?: { bypassCSP?: boolean }): Promise<Page>;
  /** Signs in on the console's sign-in page with a service user's credentials. */
  signIn(page: Page, creds: Credentials): Promise<void>;
  /** A new page signed in as `creds`, on its organization's deployments (where one organization lands). */
  signedIn(creds: Credentials, options?: { bypassCSP?: boolean }): Promise<Page>;
  /** A deployment in the default organization, in an environment and a service named `name`, that a new runner (on `host`) has claimed. */
  runningDeployment(name: string, host?: string): Promise<RunningDeployment>;
  /**
   * That what pages reported since `reported` is the requests a test made fail, and nothing else; taken off
   * the list once all `refused` of them are reported (the reports come after the refusals).
   */
  onlyRefusedRequestsSince(reported: number, refused?: number): Promise<void>;
}

/**
 * A server and a Chromium for the console's tests in the `describe` this is called in, started
 * before its tests and closed after them (checking that every answer was a declared status).
 * Webhooks may deliver to a receiver on this machine. A deployment a test holds in progress, sending
 * no heartbeat, stays its runner's for the whole test, however slowly the machine goes.
 */
export function useConsoleInBrowser(): ConsoleInBrowser {
  let server: TestServer | undefined;
  let browser: Browser | undefined;
  const contexts: BrowserContext[] = [];
  const pageErrors: string[] = [];
  before(async () => {
    server = await startServer({ env: { SLIPWAY_WEBHOOK_ALLOW_PRIVATE: 'true', SLIPWAY_RUNNER_LEASE_SECONDS: '600' } });
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    if (server === undefined) return;
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });
  const started = () => {
    assert.ok(server !== undefined && browser !== undefined, 'the console\'s server and browser start before its tests');
    return { server, browser };
  };
  const session: ConsoleInBrowser = {
    get server() { return started().server; },
    pageErrors,
    newPage: (options = {}) => openPage(started().browser, contexts, pageErrors, options),
    async signIn(page, creds) {
      await page.goto(`${started().server.url}/`);
      await page.fill('#signin-credentials input[name=clientId]', creds.clientId);
      await page.fill('#signin-credentials input[name=clientSecret]', creds.clientSecret);
      await page.click('#signin-credentials button[type=submit]');
    },
    async signedIn(creds, options = {}) {
      const page = await session.newPage(options);
      await session.signIn(page, creds);
      await page.waitForSelector('h1:has-text("Deployments")');
      return page;
    },
    async runningDeployment(name, host) {
      const { server } = started();
      assert.equal((await server.owner.http.post('/v1/orgs/default/environments', { name })).status, 201);
      assert.equal((await server.owner.http.post('/v1/orgs/default/services', { name, spec: { command: ['node', 'server.js'] } })).status, 201);
      const made = await server.owner.http.post('/v1/orgs/default/deployments', { service: name, environment: name });
      assert.equal(made.status, 201, made.text);
      const runner = await newRunner(server, server.bootstrap.orgId);
      const claim = await runner.take({ environments: [name], waitSeconds: 0, ...(host === undefined ? {} : { host }) });
      assert.equal(claim.deployment.id, made.body.id);
      return {
        id: claim.deployment.id,
        runner,
        send: async (lines) => {
          const res = await runner.logs(claim.deployment.id, { leaseToken: claim.lease.token, lines: lines.map((line) => ({ line })) });
          assert.equal(res.status, 200, res.text);
        },
        complete: async () => assert.equal((await runner.complete(claim.deployment.id, claim.lease.token)).status, 200),
      };
    },
    async onlyRefusedRequestsSince(reported, refused = 1) {
      for (let tries = 0; pageErrors.length - reported < refused && tries < 150; tries++) await new Promise((r) => setTimeout(r, 100));
      const added = pageErrors.splice(reported);
      assert.ok(added.length >= refused && added.every((e) => /net::ERR_FAILED/.test(e)), added.join('\n'));
    },
  };
  return session;
}
