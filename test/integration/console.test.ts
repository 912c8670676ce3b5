// The web console: its files and their headers over HTTP (on both databases), and the console
// itself driven in a real Chromium (once, on SQLite: the page only speaks the API) — signing in,
// secrets, service users, webhooks, roles, and text from the API that must never become markup.
// Environments, services and deployments in the console: console-deployments.test.ts.
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { Page } from 'playwright-core';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { clientCredentialsGrant, freePort, startServer, tempDir, testDatabase, type TestServer } from '../support/harness.js';
import { browserSkip as skipBrowserTests, useConsoleInBrowser } from '../support/chromium.js';
import { assertProblem } from '../support/problems.js';

const browserSkip = skipBrowserTests('console.test');

describe('console files', () => {
  let server: TestServer;
  before(async () => { server = await startServer(); });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  it('sends a browser from / and /console to the console page', async () => {
    const root = await fetch(`${server.url}/`, { redirect: 'manual' });
    assert.equal(root.status, 302);
    assert.equal(root.headers.get('location'), '/console/');
    const bare = await fetch(`${server.url}/console`, { redirect: 'manual' });
    assert.equal(bare.status, 301);
    assert.equal(bare.headers.get('location'), '/console/');
  });

  it('serves its page with a policy that runs its own script only, and revalidates it by ETag', async () => {
    const res = await fetch(`${server.url}/console/`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/html/);
    const csp = res.headers.get('content-security-policy') ?? '';
    for (const directive of ["default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"]) assert.ok(csp.includes(directive), csp);
    assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
    assert.equal(res.headers.get('x-frame-options'), 'DENY');
    assert.equal(res.headers.get('cache-control'), 'no-cache');
    const html = await res.text();
    assert.match(html, /<script type="module" src="console.js"><\/script>/);
    // No inline script or style for the policy to allow.
    assert.doesNotMatch(html, /<script>|<script type="module">|style=/);
    const etag = res.headers.get('etag')!;
    const again = await fetch(`${server.url}/console/`, { headers: { 'if-none-match': etag } });
    assert.equal(again.status, 304);
    assert.equal(await again.text(), '');
    for (const [file, type] of [['console.js', /^text\/javascript/], ['console.css', /^text\/css/]] as const) {
      const asset = await fetch(`${server.url}/console/${file}`);
      assert.equal(asset.status, 200, file);
      assert.match(asset.headers.get('content-type') ?? '', type, file);
      assert.ok(asset.headers.get('content-security-policy'), file);
    }
  });

  it('tells the page where tokens come from and for which scope, and nothing else', async () => {
    const res = await fetch(`${server.url}/console/config.json`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { apiBase: '', tokenUrl: server.bootstrap.tokenUrl, scope: server.bootstrap.scope });
  });

  it('answers a file it does not have with a 404 problem', async () => {
    assertProblem(await server.http().get('/console/secrets.json'), 404, 'route_not_found');
    assertProblem(await server.http().get('/console/../bootstrap.json'), 404);
  });
});

describe('console files under a base URL with a path', () => {
  let server: TestServer;
  let baseUrl: string;
  before(async () => {
    const port = await freePort();
    // A path that ends as the API's own begins: only what is under it and /v1/ is the API.
    baseUrl = `http://127.0.0.1:${port}/deploy/v1`;
    server = await startServer({ reuse: { dataDir: tempDir(), database: await testDatabase(), port }, env: { SLIPWAY_BASE_URL: baseUrl } });
  });
  after(async () => { await server.close(); });

  it('is served under that path and calls the API there', async () => {
    const bare = await fetch(`${baseUrl}/console`, { redirect: 'manual' });
    assert.equal(bare.headers.get('location'), '/deploy/v1/console/');
    assert.equal((await fetch(`${baseUrl}/console/`)).status, 200);
    assert.equal((await fetch(`${baseUrl}/docs/`)).status, 200);
    assertProblem(await server.http().get('/v1/orgs/'), 404, 'route_not_found');
    const config = await (await fetch(`${baseUrl}/console/config.json`)).json() as { apiBase: string; tokenUrl: string };
    assert.equal(config.apiBase, '/deploy/v1');
    assert.equal(config.tokenUrl, server.bootstrap.tokenUrl);
  });
});

describe('console in a browser', { skip: browserSkip }, () => {
  const web = useConsoleInBrowser();
  const { pageErrors, newPage, signIn, signedIn, onlyRefusedRequestsSince } = web;
  let server: TestServer;
  before(() => { server = web.server; });
  const SENTINEL = `console-sentinel-${process.pid}-${Date.now()}`;

  /** Everything the page keeps between loads. */
  const stored = (page: Page) => page.evaluate<string>('JSON.stringify([{ ...sessionStorage }, { ...localStorage }, document.cookie])');

  it('shows the API reference under its own policy: its scripts run, no one may frame it', async () => {
    const page = await newPage();
    const answer = await page.goto(`${server.url}/docs/`);
    const headers = answer!.headers();
    assert.match(headers['content-security-policy'] ?? '', /frame-ancestors 'none'/);
    assert.doesNotMatch(headers['content-security-policy'] ?? '', /upgrade-insecure-requests|validator\.swagger\.io/);
    assert.deepEqual([headers['x-frame-options'], headers['x-content-type-options'], headers['referrer-policy']], ['DENY', 'nosniff', 'no-referrer']);
    // Swagger UI ran and drew the operations (a policy that refused its scripts draws nothing). The
    // first page of a new browser, and a heavy one (a megabyte of script, the whole API described):
    // on a machine busy with both suites and another browser, longer than a page's usual 15 s.
    await page.waitForSelector('.opblock-summary-path:has-text("/v1/orgs/{orgId}/secrets")', { timeout: 60_000 });
  });

  it('refuses a wrong secret with the token endpoint\'s reason, then signs in and keeps only a token', async () => {
    const page = await newPage();
    await signIn(page, { clientId: server.bootstrap.clientId, clientSecret: 'sws_wrong' });
    await page.waitForSelector('.problem:has-text("Sign-in refused")');
    await signIn(page, server.bootstrap);
    // One organization: straight to its deployments.
    await page.waitForSelector('h1:has-text("Deployments")');
    assert.match(page.url(), /#\/o\/default\/deployments$/);
    const kept = await stored(page);
    assert.ok(!kept.includes(server.bootstrap.clientSecret), 'the client secret is not kept');
    assert.ok(kept.includes('accessToken'));
    const token = (JSON.parse(kept)[0] as Record<string, string>)['slipway.console.token'];
    const tabToken = (JSON.parse(token!) as { accessToken: string }).accessToken;
    assert.equal((await server.http(tabToken).get('/v1/orgs')).status, 200);
    await page.click('text=Sign out');
    await page.waitForSelector('#signin-credentials');
    assert.ok(!(await stored(page)).includes('accessToken'));
    // Signing out revoked the token: a copy of it is refused, not only forgotten by the tab.
    const after = await server.http(tabToken).get('/v1/orgs');
    assertProblem(after, 401, 'invalid_token');
    assert.match(String(after.body.detail), /revoked/);
  });

  it('signs out even when the token cannot be revoked: the network fails, or the token is refused already', async () => {
    const tokenIn = async (page: Page) => {
      const kept = JSON.parse(await stored(page))[0] as Record<string, string>;
      return (JSON.parse(kept['slipway.console.token']!) as { accessToken: string }).accessToken;
    };
    const signedOut = async (page: Page) => {
      await page.click('text=Sign out');
      await page.waitForSelector('.problem:has-text("Signed out.")');
      assert.ok(!(await stored(page)).includes('accessToken'));
    };
    const offline = await signedIn(server.bootstrap);
    const unrevoked = await tokenIn(offline);
    await offline.route((url) => url.pathname.endsWith('/v1/token'), (route) => route.abort());
    const reported = pageErrors.length;
    await signedOut(offline);
    // The browser reports the request it could not send, and nothing else.
    const added = pageErrors.splice(reported);
    assert.ok(added.every((e) => /net::ERR_FAILED/.test(e)), added.join('\n'));
    // Never revoked: the token works until it expires.
    assert.equal((await server.http(unrevoked).get('/v1/orgs')).status, 200);
    assert.equal((await server.http(unrevoked).delete('/v1/token')).status, 204);

    // Revoked elsewhere meanwhile: the console's revocation gets 401, and the tab signs out all the same.
    const refused = await signedIn(server.bootstrap);
    assert.equal((await server.http(await tokenIn(refused)).delete('/v1/token')).status, 204);
    await signedOut(refused);
  });

  it('creates a secret from .env lines, shows values only when revealed, and keeps them nowhere', async () => {
    const page = await signedIn(server.bootstrap);
    await page.click('header nav >> text=Secrets');
    await page.waitForSelector('h1:has-text("Secrets")');
    await page.fill('#save-secret input[name=name]', 'payments');
    await page.fill('#save-secret textarea[name=values]', `# from .env\nAPI_KEY="${SENTINEL}"\nexport REGION=eu-west-1\n`);
    await page.click('#save-secret button[type=submit]');
    await page.waitForSelector('h1:has-text("Secret payments")');
    assert.ok(!(await page.content()).includes(SENTINEL), 'no value on the page before a reveal');
    assert.deepEqual((await server.owner.http.get('/v1/orgs/default/secrets/payments')).body.keys, ['API_KEY', 'REGION']);
    await page.waitForSelector('p:has-text("Nothing uses it.")');
    // What uses it, with the keys it takes.
    assert.equal((await server.owner.http.post('/v1/orgs/default/services', { name: 'billing', spec: { command: ['x'], secrets: [{ secret: 'payments', key: 'API_KEY' }] } })).status, 201);
    await page.reload();
    await page.waitForSelector('tr:has-text("service"):has(a:has-text("billing")):has-text("API_KEY")');

    await page.click('#reveal');
    await page.waitForSelector(`#revealed >> text=${SENTINEL}`);
    await page.click('#revealed >> text=Hide');
    await page.waitForSelector('#revealed', { state: 'detached' });
    assert.ok(!(await stored(page)).includes(SENTINEL));

    // A key set through the form makes version 2; the If-Match the page sends guards it.
    await page.fill('#set-key input[name=key]', 'REGION');
    await page.fill('#set-key input[name=value]', 'us-east-1');
    await page.click('#set-key button[type=submit]');
    await page.waitForSelector('text=Version 2 ·');
    const revealed = await server.owner.http.post('/v1/orgs/default/secrets/payments/reveal', {});
    assert.deepEqual(revealed.body.values, { API_KEY: SENTINEL, REGION: 'us-east-1' });

    // A change made elsewhere meanwhile: the page's next change is refused, not lost over it.
    await server.owner.http.patch('/v1/orgs/default/secrets/payments', { set: { REGION: 'ap-south-1' } });
    await page.fill('#set-key input[name=key]', 'REGION');
    await page.fill('#set-key input[name=value]', 'sa-east-1');
    await page.click('#set-key button[type=submit]');
    await page.waitForSelector('.problem:has-text("Precondition failed")');
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets/payments/reveal', {})).body.values.REGION, 'ap-south-1');
  });

  it('creates a service user whose secret, shown once, gets a token; a developer is told what it may not do', async () => {
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/service-users`);
    await page.fill('#create-service-user input[name=name]', 'console-dev');
    await page.selectOption('#create-service-user select[name=role]', 'developer');
    await page.click('#create-service-user button[type=submit]');
    await page.waitForSelector('#shown-once');
    const shown = await page.locator('#shown-once dd').allTextContents();
    const [clientId, clientSecret] = shown;
    const grant = await clientCredentialsGrant(server.bootstrap.tokenUrl, { clientId: clientId!, clientSecret: clientSecret! }, server.bootstrap.scope);
    assert.equal(grant.status, 200, 'the secret shown once is the real one');

    // The console offers a developer what a developer may do: it may set a key, not reveal; the
    // pages of admins are not in its menu, and one reached all the same is the API's refusal.
    const dev = await signedIn({ clientId: clientId!, clientSecret: clientSecret! });
    await dev.waitForSelector('#caller:has-text("console-dev (developer)")');
    assert.deepEqual(await dev.locator('#org-nav a').allTextContents(), ['Deployments', 'Services', 'Environments', 'Runners', 'Secrets']);
    await dev.goto(`${server.url}/console/#/o/default/secrets/payments`);
    await dev.waitForSelector('#set-key');
    // The versions, where an admin has a Reveal for each, come after the page: waited for.
    await dev.locator('th:has-text("Made by")').waitFor();
    assert.equal(await dev.locator('#reveal, button:has-text("Reveal")').count(), 0);
    assert.ok(!(await dev.content()).includes(SENTINEL));
    await dev.goto(`${server.url}/console/#/o/default/environments`);
    await dev.waitForSelector('h1:has-text("Environments")');
    assert.equal(await dev.locator('#create-environment').count(), 0);
    await dev.goto(`${server.url}/console/#/o/default/service-users`);
    await dev.waitForSelector('.problem:has-text("admin")');
    assert.equal(await dev.locator('#org-nav a[aria-current=page]').textContent(), 'Service users');

    // Disabled from the owner's page: the developer's next call signs it out with the reason.
    page.once('dialog', (dialog) => void dialog.accept());
    await page.click('tr:has-text("console-dev") >> button:has-text("Disable")');
    await page.waitForSelector('tr:has-text("console-dev") >> .badge.disabled');
    await dev.goto(`${server.url}/console/#/o/default/environments`);
    await dev.waitForSelector('#signin-credentials');
    await dev.waitForSelector('.problem[role=alert]');
  });

  it('reads .env lines by dotenv\'s rules and refuses what it cannot read; a refused role change shows the role kept', async () => {
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/secrets`);
    await page.fill('#save-secret input[name=name]', 'dotenv');
    await page.fill('#save-secret textarea[name=values]', 'A=1\nA=2\nB="open\n');
    await page.click('#save-secret button[type=submit]');
    await page.waitForSelector('.problem:has-text("line 2: sets A again (first on line 1)")');
    await page.waitForSelector('.problem:has-text("line 3: has a quote that is not closed")');
    assertProblem(await server.owner.http.get('/v1/orgs/default/secrets/dotenv'), 404);
    // Comments alone: said so, before anything is sent.
    await page.fill('#save-secret textarea[name=values]', '# nothing here yet\n\n');
    await page.click('#save-secret button[type=submit]');
    await page.waitForSelector('.problem:has-text("no KEY=value line")');
    await page.fill('#save-secret textarea[name=values]', 'export URL=postgres://u:p@h/db # primary\nQUOTED="a b"  # note\nMULTI="one\\ntwo"\nRAW=\'x #y\'\nNOTE= # to fill in\n');
    await page.click('#save-secret button[type=submit]');
    await page.waitForSelector('h1:has-text("Secret dotenv")');
    assert.deepEqual((await server.owner.http.post('/v1/orgs/default/secrets/dotenv/reveal', {})).body.values,
      { URL: 'postgres://u:p@h/db', QUOTED: 'a b', MULTI: 'one\ntwo', RAW: 'x #y', NOTE: '' });

    // The last owner cannot be made a viewer: the select shows the role it kept.
    await page.goto(`${server.url}/console/#/o/default/service-users`);
    const select = page.locator('tr:has-text("bootstrap-owner") select');
    await select.selectOption('viewer');
    await page.click('button:has-text("Change")');
    await page.waitForSelector('.problem');
    assert.equal(await select.inputValue(), 'owner');
  });

  it('creates a webhook whose secret, shown once, verifies its deliveries; shows them, turns it off and deletes it', async () => {
    const received: Array<{ headers: http.IncomingHttpHeaders; body: string }> = [];
    const receiver = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => { body += c.toString('utf8'); });
      req.on('end', () => { received.push({ headers: req.headers, body }); res.end(); });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/in`;
      const page = await signedIn(server.bootstrap);
      await page.goto(`${server.url}/console/#/o/default/webhooks`);
      await page.fill('#create-webhook input[name=url]', url);
      await page.fill('#create-webhook input[name=events]', 'webhook.*, environment.created');
      await page.click('#create-webhook button[type=submit]');
      await page.waitForSelector('#shown-once');
      const [, secret] = await page.locator('#shown-once dd').allTextContents();
      await page.waitForSelector(`tr:has-text("${url}") >> code:has-text("environment.created")`);
      // The receiver has the delivery a moment before the server records it, and the webhook's page
      // shows the deliveries recorded when it is drawn: waited for until the API lists it.
      const webhookId = ((await server.owner.http.get('/v1/orgs/default/webhooks')).body.webhooks as Array<{ id: string; url: string }>).find((w) => w.url === url)!.id;
      const recorded = async () => ((await server.owner.http.get(`/v1/orgs/default/webhooks/${webhookId}/deliveries`)).body.deliveries as Array<{ eventType: string }>)
        .some((d) => d.eventType === 'webhook.created');
      for (let i = 0; i < 300 && !(await recorded()); i++) await new Promise((r) => setTimeout(r, 100));
      const [first] = received;
      assert.equal(JSON.parse(first!.body).type, 'webhook.created');
      new StandardWebhook(secret!).verify(first!.body, {
        'webhook-id': String(first!.headers['webhook-id']), 'webhook-timestamp': String(first!.headers['webhook-timestamp']), 'webhook-signature': String(first!.headers['webhook-signature']),
      });

      await page.click(`a:has-text("${url}")`);
      // Not just "Webhook": the list's heading, Webhooks, says that too.
      await page.waitForSelector(`h1:has-text("Webhook ${url}")`);
      await page.waitForSelector('table >> code:has-text("webhook.created")');
      await page.click('#toggle-webhook');
      await page.waitForSelector('#toggle-webhook:has-text("Turn on")');
      await page.waitForSelector('.badge.cancelled:has-text("disabled")');
      // A test delivery goes out, turned off as it is, and says how it was answered.
      const before = received.length;
      await page.click('#test-webhook');
      await page.waitForSelector('#notice:has-text("Test delivery evt_")');
      assert.match(await page.locator('#notice').innerText(), /taken: 200 in \d+ ms/);
      assert.equal(received.length, before + 1);
      assert.equal(JSON.parse(received.at(-1)!.body).type, 'webhook.test');
      page.once('dialog', (dialog) => void dialog.accept());
      await page.click('button:has-text("Delete webhook")');
      await page.waitForSelector('h1:has-text("Webhooks")');
      await page.waitForSelector('text=No webhooks.');
    } finally {
      receiver.closeAllConnections();
      await new Promise<void>((resolve) => receiver.close(() => resolve()));
    }
  });

  it('draws nothing with an answer that came after the user moved on', async () => {
    const page = await signedIn(server.bootstrap);
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'slow-one', values: { K: 'v' } }] })).status, 201);
    // Its answer is held until the page the user moved on to is drawn.
    let held!: () => void;
    const holding = new Promise<void>((resolve) => { held = resolve; });
    let release!: () => void;
    const released = new Promise<void>((resolve) => { release = resolve; });
    await page.route((url) => url.pathname.endsWith('/secrets/slow-one'), async (route) => { held(); await released; await route.continue(); });
    const asked: string[] = [];
    page.on('request', (request) => asked.push(new URL(request.url()).pathname));
    await page.goto(`${server.url}/console/#/o/default/secrets/slow-one`);
    await holding;
    await page.goto(`${server.url}/console/#/o/default/secrets/payments`);
    await page.waitForSelector('h1:has-text("Secret payments")');
    const answered = page.waitForEvent('requestfinished', (request) => new URL(request.url()).pathname.endsWith('/secrets/slow-one'));
    release();
    await answered;
    // A request of the page's own after that answer came: by its end the page has had the answer, and
    // a page that drew with it would have asked for that secret's usage next.
    await page.evaluate('fetch("config.json", { cache: "no-store" }).then((res) => res.text())');
    assert.ok(!asked.some((path) => path.endsWith('/secrets/slow-one/usage')), asked.join('\n'));
    assert.equal(await page.locator('h1').textContent(), 'Secret payments');
    // A page the console does not have says so.
    await page.goto(`${server.url}/console/#/o/default/__proto__`);
    await page.waitForSelector('.problem:has-text("No such page")');
  });

  it('keeps every section and Sign out on screen, and a wide table inside the page, at a desktop\'s width and at a phone\'s', async () => {
    /** What of the header's links and buttons is not on screen: clipped, covered or past the viewport's edge. */
    const offScreen = (page: Page) => page.evaluate<string[]>(`[...document.querySelectorAll('header a, header button')].filter((el) => {
      const r = el.getBoundingClientRect();
      const at = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
      return r.width === 0 || r.left < 0 || r.right > innerWidth || !(at && el.contains(at));
    }).map((el) => el.textContent)`);
    const page = await signedIn(server.bootstrap);
    const inside = () => page.evaluate<boolean>('document.documentElement.scrollWidth <= document.documentElement.clientWidth');
    for (const width of [1280, 390]) {
      await page.setViewportSize({ width, height: 800 });
      await page.goto(`${server.url}/console/#/o/default/service-users`);
      await page.waitForSelector('tr:has-text("bootstrap-owner")');
      assert.deepEqual(await offScreen(page), [], `at ${width} px`);
      // The table scrolls within its own box; the page itself does not scroll sideways.
      assert.equal(await inside(), true, `at ${width} px`);
    }
    // A deployment's page, headed by its long id, fits too.
    assert.equal((await server.owner.http.post('/v1/orgs/default/environments', { name: 'narrow' })).status, 201);
    assert.equal((await server.owner.http.post('/v1/orgs/default/services', { name: 'narrow', spec: { command: ['node', 'server.js'] } })).status, 201);
    const queued = await server.owner.http.post('/v1/orgs/default/deployments', { service: 'narrow', environment: 'narrow' });
    assert.equal(queued.status, 201, queued.text);
    await page.goto(`${server.url}/console/#/o/default/deployments/${queued.body.id}`);
    await page.waitForSelector('.badge.queued');
    assert.equal(await inside(), true, 'a deployment at 390 px');
  });

  it('names each row\'s buttons by their row: a secret\'s key or version, a service user', async () => {
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'named', values: { ALPHA: 'a-value', BRAVO: 'b-value' } }] })).status, 201);
    assert.equal((await server.owner.http.patch('/v1/orgs/default/secrets/named', { set: { ALPHA: 'a-second' } })).status, 200);
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/secrets/named`);
    await page.waitForSelector('text=Version 2 ·');
    // The versions come after the page: waited for.
    await page.locator('th:has-text("Made by")').waitFor();
    for (const name of ['Remove ALPHA', 'Remove BRAVO', 'Reveal version 2', 'Reveal version 1', 'Restore version 1']) {
      assert.equal(await page.getByRole('button', { name, exact: true }).count(), 1, name);
    }
    // And a service user's, by its name.
    await page.goto(`${server.url}/console/#/o/default/service-users`);
    await page.waitForSelector('tr:has-text("bootstrap-owner")');
    for (const name of ['New secret for bootstrap-owner', 'Disable bootstrap-owner']) {
      assert.equal(await page.getByRole('button', { name, exact: true }).count(), 1, name);
    }
  });

  it('shows revealed values as written, line breaks included, where the Reveal that asked for them can see them', async () => {
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'multiline', values: { CERT: 'line one\nline two', PAD: '0' } }] })).status, 201);
    for (const pad of ['1', '2', '3']) assert.equal((await server.owner.http.patch('/v1/orgs/default/secrets/multiline', { set: { PAD: pad } })).status, 200);
    const page = await signedIn(server.bootstrap);
    await page.setViewportSize({ width: 1000, height: 500 });
    await page.goto(`${server.url}/console/#/o/default/secrets/multiline`);
    await page.waitForSelector('text=Version 4 ·');
    // The oldest version's Reveal, at the bottom of the page.
    const first = page.locator('tbody tr:has(td:text-is("1")) >> button:has-text("Reveal")');
    await first.scrollIntoViewIfNeeded();
    await first.click();
    await page.waitForSelector('#revealed >> text=Values of version 1');
    const box = await page.locator('#revealed').boundingBox();
    assert.ok(box !== null && box.y >= 0 && box.y < 500, `the values are out of sight: ${JSON.stringify(box)}`);
    const values = await page.locator('#revealed dd').allInnerTexts();
    assert.ok(values.includes('line one\nline two'), JSON.stringify(values));
  });

  it('shows a refused change to a secret beside what was refused, and offers the secret as it is now', async () => {
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'guarded', values: { ALPHA: 'a-value', BRAVO: 'b-value' } }] })).status, 201);
    const page = await signedIn(server.bootstrap);
    await page.setViewportSize({ width: 1000, height: 600 });
    await page.goto(`${server.url}/console/#/o/default/secrets/guarded`);
    await page.waitForSelector('text=Version 1 ·');
    // Changed elsewhere meanwhile: the page's removal is refused, and says so where the user looks.
    assert.equal((await server.owner.http.patch('/v1/orgs/default/secrets/guarded', { set: { CHARLIE: 'c-value' } })).status, 200);
    page.once('dialog', (dialog) => void dialog.accept());
    await page.click('#main .card >> tr:has(code:text-is("ALPHA")) >> button:has-text("Remove")');
    const refused = page.locator('#main .card .problem:has-text("Precondition failed")');
    await refused.waitFor();
    const box = await refused.boundingBox();
    assert.ok(box !== null && box.y >= 0 && box.y < 600, `the refusal is out of sight: ${JSON.stringify(box)}`);
    await refused.getByRole('button', { name: 'Reload' }).click();
    await page.waitForSelector('text=Version 2 ·');
    await page.waitForSelector('#main .card >> code:text-is("CHARLIE")');
    assert.deepEqual((await server.owner.http.get('/v1/orgs/default/secrets/guarded')).body.keys, ['ALPHA', 'BRAVO', 'CHARLIE']);
  });

  it('goes on from the first row it loaded when Load more is pressed from the keyboard', async () => {
    // More events than a page holds: one a secret.
    const made = await server.owner.http.post('/v1/orgs/default/secrets', { secrets: Array.from({ length: 60 }, (_, i) => ({ name: `paged-${process.pid}-${i}`, values: { K: 'v' } })) });
    assert.equal(made.status, 201, made.text);
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/events`);
    const rows = page.locator('main tbody tr');
    await page.locator('button:has-text("Load more")').focus();
    const before = await rows.count();
    await page.keyboard.press('Enter');
    await rows.nth(before).waitFor();
    // The focus is on the first row loaded, not on the document or past the new rows.
    assert.equal(await page.evaluate<boolean>(`document.activeElement === document.querySelectorAll('main tbody tr')[${before}]`), true);
  });

  it('acts on a service user in place: the pages loaded stay, and the focus stays on the row', async () => {
    const made: string[] = [];
    try {
      for (let i = 0; i < 55; i++) {
        const user = await server.owner.http.post('/v1/orgs/default/service-users', { name: `listed-${process.pid}-${String(i).padStart(2, '0')}`, role: 'viewer' });
        assert.equal(user.status, 201, user.text);
        made.push(user.body.id);
      }
      const page = await signedIn(server.bootstrap);
      await page.goto(`${server.url}/console/#/o/default/service-users`);
      await page.click('button:has-text("Load more")');
      const last = `listed-${process.pid}-54`;
      const rows = page.locator('main tbody tr');
      await page.locator(`button[aria-label="New secret for ${last}"]`).waitFor();
      const shown = await rows.count();
      await page.click(`button[aria-label="New secret for ${last}"]`);
      await page.waitForSelector(`#shown-once:has-text("New client secret for ${last}")`);
      // The secret is shown before the row is read again: waited for until the row says what it has
      // now, two secrets, each removable (the row before had one, and no Remove).
      const removable = page.locator(`button[aria-label^="Remove the secret"][aria-label$="of ${last}"]`);
      await removable.nth(1).waitFor();
      assert.equal(await removable.count(), 2);
      assert.equal(await rows.count(), shown, 'the pages loaded are still there');
      assert.equal(await page.evaluate<string | null>('document.activeElement?.getAttribute("aria-label") ?? null'), `New secret for ${last}`);
    } finally {
      // The other tests find their service users on the list's first page.
      for (const id of made) await server.owner.http.delete(`/v1/orgs/default/service-users/${id}`);
    }
  });

  it('answers a page of an organization that is not there with its 404, not a page of empty lists', async () => {
    const page = await signedIn(server.bootstrap);
    const reported = pageErrors.length;
    await page.goto(`${server.url}/console/#/o/no-such-org/services`);
    await page.waitForSelector('.problem:has-text("no-such-org")');
    // The browser reports the 404 it was answered, and nothing else.
    const added = pageErrors.splice(reported);
    assert.ok(added.length === 1 && added.every((e) => /status of 404/.test(e)), added.join('\n'));
    assert.equal(await page.locator('#create-service').count(), 0);
    assert.equal(await page.locator('#org-nav a').count(), 0);
    await page.click('text=Back to your organizations');
    await page.waitForSelector('h1:has-text("Organizations")');
  });

  it('says that the server could not be reached, rather than that something went wrong', async () => {
    const page = await signedIn(server.bootstrap);
    await page.route((url) => url.pathname === '/v1/orgs/default/environments', (route) => route.abort());
    const reported = pageErrors.length;
    await page.goto(`${server.url}/console/#/o/default/environments`);
    await page.waitForSelector('.problem[role=alert]:has-text("could not be reached")');
    await onlyRefusedRequestsSince(reported);
  });

  it('changes a service user\'s role when asked to, not at each role passed while the list is browsed with the keyboard', async () => {
    const made = await server.owner.http.post('/v1/orgs/default/service-users', { name: 'keyboard-user', role: 'developer' });
    assert.equal(made.status, 201, made.text);
    const page = await signedIn(server.bootstrap);
    const patches: string[] = [];
    page.on('request', (request) => { if (request.method() === 'PATCH' && request.url().includes('/service-users/')) patches.push(request.postData() ?? ''); });
    await page.goto(`${server.url}/console/#/o/default/service-users`);
    const select = page.locator('tr:has-text("keyboard-user") select');
    await select.focus();
    // developer → admin → owner, one key at a time.
    await page.keyboard.press('ArrowDown');
    await page.keyboard.press('ArrowDown');
    assert.equal(await select.inputValue(), 'owner');
    await page.getByRole('button', { name: 'Change the role of keyboard-user', exact: true }).click();
    await page.waitForSelector('#notice:has-text("keyboard-user is now owner.")');
    assert.deepEqual(patches, [JSON.stringify({ role: 'owner' })]);
    assert.equal((await server.owner.http.get(`/v1/orgs/default/service-users/${made.body.id}`)).body.role, 'owner');
  });

  it('says what an action did in sight of the user, however far down the page it was taken', async () => {
    // Keys enough for the page to be taller than the window even before its versions are drawn again.
    const keys = Object.fromEntries(Array.from({ length: 12 }, (_, i) => [`KEY_${i}`, `value-${i}`]));
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'noticed', values: { ...keys, K: 'one' } }] })).status, 201);
    for (const value of ['two', 'three', 'four']) assert.equal((await server.owner.http.patch('/v1/orgs/default/secrets/noticed', { set: { K: value } })).status, 200);
    const page = await signedIn(server.bootstrap);
    await page.setViewportSize({ width: 1000, height: 500 });
    await page.goto(`${server.url}/console/#/o/default/secrets/noticed`);
    const restore = page.getByRole('button', { name: 'Restore version 1', exact: true });
    await restore.scrollIntoViewIfNeeded();
    await restore.click();
    await page.waitForSelector('#notice:has-text("Version 1 restored as version 5.")');
    const box = await page.locator('#notice').boundingBox();
    assert.ok(box !== null && box.y >= 0 && box.y < 500, `the notice is out of sight: ${JSON.stringify(box)}`);
  });

  it('titles the browser tab after the page shown', async () => {
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'titled', values: { K: 'v' } }] })).status, 201);
    const page = await signedIn(server.bootstrap);
    assert.equal(await page.title(), 'Deployments · default · Slipway');
    await page.goto(`${server.url}/console/#/o/default/secrets/titled`);
    await page.waitForSelector('h1:has-text("Secret titled")');
    assert.equal(await page.title(), 'Secret titled · default · Slipway');
    await page.click('text=Sign out');
    await page.waitForSelector('#signin-credentials');
    assert.equal(await page.title(), 'Sign in · Slipway');
  });

  it('asks before .env lines make a version of a secret without some of its keys, and keeps the lines when told no', async () => {
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'merged', values: { ALPHA: '1', BRAVO: '2' } }] })).status, 201);
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/secrets`);
    await page.fill('#save-secret input[name=name]', 'merged');
    await page.fill('#save-secret textarea[name=values]', 'ALPHA=1\nCHARLIE=3\n');
    const asked: string[] = [];
    page.once('dialog', (dialog) => { asked.push(dialog.message()); void dialog.dismiss(); });
    await page.click('#save-secret button[type=submit]');
    for (let tries = 0; asked.length === 0 && tries < 150; tries++) await new Promise((r) => setTimeout(r, 100));
    assert.match(asked[0] ?? '', /BRAVO/);
    assert.doesNotMatch(asked[0] ?? '', /ALPHA/);
    assert.equal(await page.inputValue('#save-secret textarea[name=values]'), 'ALPHA=1\nCHARLIE=3\n');
    assert.deepEqual((await server.owner.http.get('/v1/orgs/default/secrets/merged')).body.keys, ['ALPHA', 'BRAVO']);
    // Told yes: the new version holds the keys given, as it says.
    page.once('dialog', (dialog) => void dialog.accept());
    await page.click('#save-secret button[type=submit]');
    await page.waitForSelector('h1:has-text("Secret merged")');
    assert.deepEqual((await server.owner.http.get('/v1/orgs/default/secrets/merged')).body.keys, ['ALPHA', 'CHARLIE']);
  });

  it('marks the current section, and moves the focus to the new page\'s heading when the old one took it away', async () => {
    const page = await signedIn(server.bootstrap);
    await page.focus('header nav >> text=Secrets');
    await page.keyboard.press('Enter');
    await page.waitForSelector('h1:has-text("Secrets")');
    assert.deepEqual(await page.locator('header nav a[aria-current=page]').allTextContents(), ['Secrets']);
    // Not left on the page's body, where the next Tab starts from the top again.
    assert.equal(await page.evaluate<string>('`${document.activeElement.tagName} ${document.activeElement.textContent}`'), 'H1 Secrets');
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate<string>('document.activeElement.getAttribute("name")'), 'prefix');
  });

  it('offers a viewer no change to make, and an admin no role above its own to give', async () => {
    const viewer = await server.actor(server.bootstrap.orgId, 'viewer', 'console-viewer');
    assert.equal((await server.owner.http.post('/v1/orgs/default/services', { name: 'looked-at', spec: { command: ['x'] } })).status, 201);
    const page = await signedIn(viewer);
    await page.waitForSelector('#caller:has-text("console-viewer (viewer)")');
    for (const [section, heading] of [['services', 'Services'], ['services/looked-at', 'Service looked-at'], ['environments', 'Environments'], ['secrets', 'Secrets']]) {
      await page.goto(`${server.url}/console/#/o/default/${section}`);
      await page.waitForSelector(`h1:has-text("${heading}")`);
      assert.equal(await page.locator('main form:not(#secret-filter), main button:not(:has-text("Show")):not(:has-text("Load more"))').count(), 0, section);
    }
    const admin = await server.actor(server.bootstrap.orgId, 'admin', 'console-admin');
    const adminPage = await signedIn(admin);
    await adminPage.goto(`${server.url}/console/#/o/default/service-users`);
    await adminPage.waitForSelector('#create-service-user');
    assert.deepEqual(await adminPage.locator('#create-service-user select[name=role] option').allTextContents(), ['viewer', 'developer', 'admin', 'runner']);
    // An owner (and an instance administrator) is not this admin's to change: its row offers nothing.
    await adminPage.waitForSelector('tr:has-text("bootstrap-owner")');
    assert.equal(await adminPage.locator('tr:has-text("bootstrap-owner") select, tr:has-text("bootstrap-owner") button').count(), 0);
    assert.ok(await adminPage.locator('tr:has-text("console-viewer") button:has-text("New secret")').count() > 0);
  });

  it('offers a developer no protected environment to deploy into, and follows a role lowered meanwhile at its first refusal', async () => {
    assert.equal((await server.owner.http.post('/v1/orgs/default/environments', { name: 'guarded', protected: true })).status, 201);
    assert.equal((await server.owner.http.post('/v1/orgs/default/environments', { name: 'open-env' })).status, 201);
    assert.equal((await server.owner.http.post('/v1/orgs/default/services', { name: 'lowered', spec: { command: ['x'] } })).status, 201);
    const dev = await server.actor(server.bootstrap.orgId, 'developer', 'console-lowered');
    const page = await signedIn(dev);
    await page.goto(`${server.url}/console/#/o/default/services/lowered`);
    await page.waitForSelector('#deploy');
    const offeredEnvironments = await page.locator('#deploy select[name=environment] option').allTextContents();
    assert.ok(offeredEnvironments.includes('open-env') && !offeredEnvironments.some((o) => o.startsWith('guarded')), offeredEnvironments.join(', '));
    // Lowered to viewer while the page is open: the deploy is refused, and the page follows the new role.
    assert.equal((await server.owner.http.patch(`/v1/orgs/default/service-users/${dev.id}`, { role: 'viewer' })).status, 200);
    await page.selectOption('#deploy select[name=environment]', 'open-env');
    await page.click('#deploy button[type=submit]');
    await page.waitForSelector('#caller:has-text("(viewer)")');
    // The header says the new role as the page starts being drawn again; the old page stays until then.
    await page.waitForSelector('#deploy', { state: 'detached' });
    await page.waitForSelector('h1:has-text("Service lowered")');
    assert.equal(await page.locator('#deploy, #edit-service').count(), 0);
  });

  it('keeps what was typed, the focus and the caret when a role changed meanwhile draws the page again', async () => {
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'typed-kept', values: { K: 'v' } }] })).status, 201);
    const admin = await server.actor(server.bootstrap.orgId, 'admin', 'console-typed');
    const page = await signedIn(admin);
    await page.goto(`${server.url}/console/#/o/default/secrets/typed-kept`);
    await page.waitForSelector('#reveal');
    // Lowered to developer, who may still set a key but not reveal: the refused Reveal reads the
    // role again, and that answer is held until the user has typed.
    assert.equal((await server.owner.http.patch(`/v1/orgs/default/service-users/${admin.id}`, { role: 'developer' })).status, 200);
    let release!: () => void;
    const held = new Promise<void>((resolve) => { release = resolve; });
    await page.route('**/v1/token', async (route) => {
      if (route.request().method() === 'GET') await held;
      await route.continue();
    });
    const asked = page.waitForRequest((request) => request.url().endsWith('/v1/token') && request.method() === 'GET');
    await page.click('#reveal');
    await asked;
    await page.fill('#set-key input[name=value]', 'typed value');
    await page.fill('#set-key input[name=key]', 'HALF_TYPED');
    for (let i = 0; i < 3; i++) await page.press('#set-key input[name=key]', 'ArrowLeft');
    release();
    await page.waitForSelector('#caller:has-text("(developer)")');
    await page.waitForSelector('#reveal', { state: 'detached' });
    await page.unroute('**/v1/token');
    assert.equal(await page.inputValue('#set-key input[name=key]'), 'HALF_TYPED');
    assert.equal(await page.inputValue('#set-key input[name=value]'), 'typed value');
    const focused = 'const f = document.activeElement; [f?.form?.id, f?.name, f?.selectionStart, f?.selectionEnd]';
    assert.deepEqual(await page.evaluate<unknown[]>(focused), ['set-key', 'key', 7, 7]);
    // A page visited again starts afresh.
    await page.goto(`${server.url}/console/#/o/default/secrets`);
    await page.waitForSelector('h1:has-text("Secrets")');
    await page.goto(`${server.url}/console/#/o/default/secrets/typed-kept`);
    await page.waitForSelector('#set-key');
    assert.equal(await page.inputValue('#set-key input[name=key]'), '');
  });

  it('reported no script error, refused resource or policy violation on any page', () => {
    // API refusals the page shows the user (a role too low, a conflict, a stale version, a reference to nothing) are expected.
    assert.deepEqual(pageErrors.filter((e) => !/status of (401|403|409|412|422)/.test(e)), []);
  });
});
