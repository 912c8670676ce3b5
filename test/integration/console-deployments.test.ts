// Environments, services and deployments in the web console, driven in a real Chromium (once, on
// SQLite: the page only speaks the API): making and deleting them, deploying, cancelling and
// promoting, following states and logs as runners report them, locks and configurations. The rest
// of the console: console.test.ts.
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { sql } from 'kysely';
import type { Dialog, Page } from 'playwright-core';
import { browserSkip as skipBrowserTests, useConsoleInBrowser } from '../support/chromium.js';
import { newRunner } from '../support/deployments.js';
import type { TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';

const browserSkip = skipBrowserTests('console-deployments.test');

describe('environments, services and deployments in the console, in a browser', { skip: browserSkip }, () => {
  const web = useConsoleInBrowser();
  const { pageErrors, signedIn, runningDeployment, onlyRefusedRequestsSince } = web;
  let server: TestServer;
  before(() => { server = web.server; });

  /**
   * Moves the page's clock (installed) on by `ms` at a time until `selector` shows: what the page looks
   * at again after a while, it looks at without a wait.
   */
  async function lookAgainUntil(page: Page, selector: string, ms: number): Promise<void> {
    for (let tries = 0; (await page.locator(selector).count()) === 0; tries++) {
      assert.ok(tries < 40, `${selector} did not show`);
      await page.clock.fastForward(ms);
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  it('deploys a service into an environment and cancels it, and shows text from the API as text', async () => {
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'payments', values: { API_KEY: 'a-key' } }] })).status, 201);
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/environments`);
    await page.fill('#create-environment input[name=name]', 'staging');
    await page.check('#create-environment input[name=protected]');
    await page.click('#create-environment button[type=submit]');
    await page.waitForSelector('td >> text=staging');
    assert.equal((await server.owner.http.get('/v1/orgs/default/environments/staging')).body.protected, true);
    await page.fill('#create-environment input[name=name]', 'scratch');
    await page.click('#create-environment button[type=submit]');
    await page.click('a:has-text("scratch")');
    await page.waitForSelector('h1:has-text("Environment scratch")');
    page.once('dialog', (dialog) => void dialog.accept());
    await page.click('button:has-text("Delete environment")');
    await page.waitForSelector('h1:has-text("Environments")');
    assertProblem(await server.owner.http.get('/v1/orgs/default/environments/scratch'), 404);

    await page.goto(`${server.url}/console/#/o/default/services`);
    await page.click('text=New service');
    await page.fill('#create-service input[name=name]', 'web');
    const markup = '<img src=x id=injected onerror="document.title=\'owned\'">';
    await page.fill('#create-service input[name=description]', markup);
    await page.fill('#create-service textarea[name=spec]', JSON.stringify({ command: ['node', 'server.js'], port: 3000, secrets: [{ secret: 'payments', key: 'API_KEY' }] }));
    await page.click('#create-service button[type=submit]');
    await page.waitForSelector('h1:has-text("Service web")');
    assert.equal(await page.locator('#injected').count(), 0, 'a description is text, not markup');
    await page.waitForSelector(`text=${markup}`);

    // An edit of the spec shown, after someone else changed the service: refused, not overwritten.
    assert.equal((await server.owner.http.patch('/v1/orgs/default/services/web', { description: 'changed elsewhere' })).status, 200);
    await page.click('summary:has-text("Edit")');
    await page.fill('#edit-service input[name=description]', 'from the console');
    await page.click('#edit-service button[type=submit]');
    await page.waitForSelector('.problem:has-text("Precondition failed")');
    assert.equal((await server.owner.http.get('/v1/orgs/default/services/web')).body.description, 'changed elsewhere');

    await page.fill('#deploy input[name=revision]', 'v1.2.3');
    await page.click('#deploy button[type=submit]');
    await page.waitForSelector('h1:has-text("Deployment dep_")');
    await page.waitForSelector('.badge.queued');
    const id = page.url().split('/').pop()!;
    const made = (await server.owner.http.get(`/v1/orgs/default/deployments/${id}`)).body;
    assert.deepEqual([made.state, made.revision, made.environment.name, made.service.name], ['queued', 'v1.2.3', 'staging', 'web']);
    // Cancelling asks first: a dismissed question cancels nothing.
    page.once('dialog', (dialog) => void dialog.dismiss());
    await page.click('button:has-text("Cancel")');
    assert.equal((await server.owner.http.get(`/v1/orgs/default/deployments/${id}`)).body.state, 'queued');
    page.once('dialog', (dialog) => { assert.match(dialog.message(), /^Cancel the deployment of web into staging\?/); void dialog.accept(); });
    await page.click('button:has-text("Cancel")');
    await page.waitForSelector('.badge.cancelled');
    assert.equal((await server.owner.http.get(`/v1/orgs/default/deployments/${id}`)).body.state, 'cancelled');

    // A runner takes the next one: the page follows its state and its log as they come.
    await page.goto(`${server.url}/console/#/o/default/services/web`);
    await page.click('#deploy button[type=submit]');
    await page.waitForSelector('.badge.queued');
    assert.equal((await server.owner.http.post('/v1/orgs/default/environments', { name: 'production', variables: { STAGE: 'production' } })).status, 201);
    const runner = await newRunner(server, server.bootstrap.orgId);
    const claim = await runner.take({ environments: ['staging'], waitSeconds: 0 });
    assert.equal(claim.deployment.id, page.url().split('/').pop());
    await page.waitForSelector('.badge.in_progress');
    const logged = await runner.logs(claim.deployment.id, { leaseToken: claim.lease.token, lines: [{ line: 'listening on 3000' }, { stream: 'stderr', line: '<b>warning</b>' }] });
    assert.equal(logged.status, 200, logged.text);
    await page.waitForSelector('#deployment-log >> text=listening on 3000');
    await page.waitForSelector('#deployment-log .stderr >> text=<b>warning</b>');
    assert.equal((await runner.complete(claim.deployment.id, claim.lease.token)).status, 200);
    await page.waitForSelector('.badge.succeeded');
    // What serves now is no rollback target.
    assert.equal(await page.locator('button:has-text("Roll back to this")').count(), 0);

    // What succeeded goes on to another environment, with that environment's configuration: offered
    // on the page that watched it succeed.
    // What it changes: the first of web in staging to succeed, so everything it has is new.
    await page.waitForSelector('#deployment-changes >> text=everything is new');
    await page.waitForSelector('#deployment-changes tr:has(code:has-text("command")):has-text("added")');
    await page.click('summary:has-text("Promote to another environment")');
    await page.selectOption('#promote select[name=environment]', { label: 'production' });
    await page.click('#promote button[type=submit]');
    await page.waitForSelector(`p:has-text("Promoted from ${claim.deployment.id}")`);
    const promoted = (await server.owner.http.get(`/v1/orgs/default/deployments/${page.url().split('/').pop()}`)).body;
    assert.deepEqual([promoted.promotedFrom, promoted.environment.name, promoted.spec.variables.STAGE], [claim.deployment.id, 'production', 'production']);

    await page.goto(`${server.url}/console/#/o/default/deployments?state=cancelled`);
    await page.waitForSelector(`a:has-text("${id}")`);
    // A log removed past its retention says so where the log would be.
    await sql`update deployments set logs_removed_at = ${'2026-01-02T03:04:05.000Z'} where id = ${id}`.execute(server.core.db);
    await page.goto(`${server.url}/console/#/o/default/deployments/${id}`);
    await page.waitForSelector('#deployment-log >> text=Its log was removed at 2026-01-02T03:04:05.000Z');
    await page.goto(`${server.url}/console/#/o/default/events?type=deployment.state_changed`);
    await page.waitForSelector('td >> text=deployment.state_changed');
    // Newest first: the success just reported heads the log; oldest first, it does not.
    const firstRow = async () => (await page.locator('#main tbody tr').first().textContent()) ?? '';
    const succeeded = (row: string) => row.includes(claim.deployment.id) && row.includes('"to":"succeeded"');
    assert.ok(succeeded(await firstRow()), await firstRow());
    await page.selectOption('#event-filter select[name=order]', 'oldest');
    await page.click('#event-filter button[type=submit]');
    await page.waitForURL(/events\?type=deployment.state_changed&order=oldest$/);
    // Polled from here: a predicate evaluated in the page would be a script its policy refuses.
    for (let tries = 0; ; tries++) {
      const row = await page.locator('#main tbody tr').first().textContent({ timeout: 15_000 }).catch(() => null);
      if (typeof row === 'string' && !succeeded(row)) break;
      assert.ok(tries < 150, `oldest first, the list still starts with the success: ${row}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(await page.inputValue('#event-filter select[name=order]'), 'oldest');
    assert.equal(await page.title(), 'Events · default · Slipway');
  });

  it('follows a running deployment\'s log at its end, unless the reader scrolled up', async () => {
    const running = await runningDeployment('tail');
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/deployments/${running.id}`);
    // The deployments list shown before lists it running too: its own page is waited for.
    await page.waitForSelector(`h1:has-text("Deployment ${running.id}")`);
    await page.waitForSelector('.badge.in_progress');
    const atEnd = () => page.evaluate<boolean>(`(() => { const log = document.getElementById('deployment-log'); return log.scrollTop + log.clientHeight >= log.scrollHeight - 2; })()`);

    await running.send(Array.from({ length: 200 }, (_, i) => `warming up ${i + 1}`));
    await page.waitForSelector('#deployment-log >> text=warming up 200');
    assert.equal(await atEnd(), true, 'the newest line is in sight');
    await running.send(['listening']);
    await page.waitForSelector('#deployment-log >> text=listening');
    assert.equal(await atEnd(), true, 'the newest line is in sight');

    // Scrolled up to read: new lines do not take the reader away.
    await page.evaluate(`document.getElementById('deployment-log').scrollTop = 0`);
    await running.send(['one more']);
    await page.waitForSelector('#deployment-log >> text=one more');
    assert.equal(await page.evaluate<number>(`document.getElementById('deployment-log').scrollTop`), 0);
    await running.complete();
    await page.waitForSelector('.badge.succeeded');
  });

  it('starts a long log from its last 1,000 lines, saying how many earlier ones it leaves out', async () => {
    const running = await runningDeployment('long-log');
    for (let batch = 0; batch < 3; batch++) await running.send(Array.from({ length: 500 }, (_, i) => `line ${batch * 500 + i + 1}`));
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/deployments/${running.id}`);
    await page.waitForSelector('#deployment-log >> text=line 1500');
    await page.waitForSelector(`#deployment-log >> text=500 earlier lines are not shown here (slipway deployment logs ${running.id} prints them all)`);
    assert.equal(await page.locator('#deployment-log span:text-is("line 500")').count(), 0);
    assert.equal(await page.locator('#deployment-log span:text-is("line 501")').count(), 1);
    // It follows on from there, showing lines as a terminal would: no escape sequences, a progress bar's last state.
    await running.send(['line 1501', '\u001b[31mred\u001b[0m alert', 'progress 10%\rprogress 100%\r']);
    await page.waitForSelector('#deployment-log >> text=line 1501');
    assert.deepEqual(await page.locator('#deployment-log span').evaluateAll((spans) => spans.slice(-2).map((s) => s.textContent)), ['red alert\n', 'progress 100%\n']);
    await running.complete();
    await page.waitForSelector('.badge.succeeded');
  });

  it('shows the runners, online and carrying out, on their page and on their environment\'s', async () => {
    const host = `rh_console_${process.pid}`;
    const running = await runningDeployment('ran-by', host);
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/runners`);
    const row = page.locator('tr', { hasText: host });
    await row.waitFor();
    assert.equal(await row.locator('.badge').textContent(), 'online');
    assert.ok((await row.textContent())!.includes('ran-by'));
    await row.locator(`a:has-text("${running.id}")`).click();
    await page.waitForSelector(`h1:has-text("${running.id}")`);

    await page.goto(`${server.url}/console/#/o/default/environments/ran-by`);
    await page.locator('tr', { hasText: host }).waitFor();
    assert.equal(await page.locator('h2:has-text("Runners")').count(), 1);
    // An environment no runner takes says how to start one.
    assert.equal((await server.owner.http.post('/v1/orgs/default/environments', { name: 'unserved' })).status, 201);
    await page.goto(`${server.url}/console/#/o/default/environments/unserved`);
    await page.waitForSelector('text=No runner takes unserved\'s deployments yet');

    // A runner kept to environments says which on the service users page.
    const kept = await server.owner.http.post('/v1/orgs/default/service-users', { name: 'kept-runner', role: 'runner', environments: ['ran-by', 'unserved'] });
    assert.equal(kept.status, 201, kept.text);
    await page.goto(`${server.url}/console/#/o/default/service-users`);
    const user = page.locator('tr', { hasText: 'kept-runner' });
    await user.waitFor();
    assert.equal(await user.locator('.runner-environments').textContent(), 'Takes the deployments of ran-by, unserved');
    await running.complete();
  });

  it('follows a running deployment\'s log on after a poll that failed, and says meanwhile that the server could not be reached', async () => {
    const running = await runningDeployment('gap');
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/deployments/${running.id}`);
    // The deployments list shown before lists it running too: its own page is waited for.
    await page.waitForSelector(`h1:has-text("Deployment ${running.id}")`);
    await page.waitForSelector('.badge.in_progress');
    await running.send(['before the gap']);
    await page.waitForSelector('#deployment-log >> text=before the gap');

    // A poll that fails (the server restarting, the network) is shown, and the log is followed on.
    let refused = 0;
    const failing = (url: URL) => url.pathname.endsWith(`/deployments/${running.id}/logs`);
    const reported = pageErrors.length;
    await page.route(failing, (route) => { refused += 1; return route.abort(); });
    await page.waitForSelector('#main .problem:has-text("could not be reached")');
    await page.unroute(failing);
    assert.ok(refused > 0);
    // A poll tried again before the route was gone is refused too: each is reported, some after the first.
    await onlyRefusedRequestsSince(reported, refused);
    await running.send(['after the gap']);
    await page.waitForSelector('#deployment-log >> text=after the gap');
    await page.waitForSelector('#main .problem', { state: 'detached' });
    await running.complete();
    await page.waitForSelector('.badge.succeeded');
  });

  it('shows how a serving deployment\'s process is doing and where it answers, as its runner reports it', async () => {
    const host = 'rh_console-test-0001';
    const running = await runningDeployment('served', host);
    await running.complete();
    const report = (process: Record<string, unknown>) => running.runner.actor.http.post(`/v1/orgs/${server.bootstrap.orgId}/runner/serving`,
      { deployments: [running.id], host, processes: [{ deployment: running.id, ...process }] });
    assert.equal((await report({ state: 'running', exits: 0, address: { hostname: 'build-01', port: 40021 } })).status, 200);
    const page = await signedIn(server.bootstrap);
    await page.clock.install();
    await page.goto(`${server.url}/console/#/o/default/deployments/${running.id}`);
    await page.waitForSelector('#deployment-process:has-text("running on build-01:40021")');
    // A crash loop, as the next report says: the page that serves it shows it when it next looks.
    const crashed = { code: 1, signal: null, at: new Date().toISOString() };
    assert.equal((await report({ state: 'restarting', exits: 3, lastExit: crashed, address: { hostname: 'build-01', port: 40021 } })).status, 200);
    await lookAgainUntil(page, '#deployment-process:has-text("restarting on build-01:40021 · exited on its own 3 times, last with code 1")', 10_000);
  });

  it('shows an environment\'s configuration and saves a new one; a refused one keeps what was typed', async () => {
    const api = server.owner.http;
    assert.equal((await api.post('/v1/orgs/default/environments', { name: 'configured' })).status, 201);
    assert.equal((await api.post('/v1/orgs/default/secrets', { secrets: [{ name: 'cfg-db', values: { URL: 'postgres://configured' } }] })).status, 201);
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/environments/configured`);
    await page.waitForSelector('p:has-text("None: deployments here get their service")');
    await page.click('summary:has-text("Edit")');
    const wrong = JSON.stringify({ variables: { LOG_LEVEL: 'debug' }, secrets: [{ secret: 'no-such-secret' }] });
    await page.fill('#environment-configuration textarea', wrong);
    await page.click('#environment-configuration button[type=submit]');
    await page.waitForSelector('.problem:has-text("no-such-secret")');
    assert.equal(await page.inputValue('#environment-configuration textarea'), wrong, 'what was typed is kept');
    await page.fill('#environment-configuration textarea', JSON.stringify({ variables: { LOG_LEVEL: 'debug' }, secrets: [{ secret: 'cfg-db', key: 'URL', as: 'DATABASE_URL' }] }));
    await page.click('#environment-configuration button[type=submit]');
    await page.waitForSelector('pre:has-text("DATABASE_URL")');
    const env = (await api.get('/v1/orgs/default/environments/configured')).body;
    assert.deepEqual([env.variables, env.secrets], [{ LOG_LEVEL: 'debug' }, [{ secret: 'cfg-db', key: 'URL', as: 'DATABASE_URL' }]]);
    assert.equal((await page.content()).includes('postgres://configured'), false, 'a secret\'s value is never on the page');

    // Changed elsewhere after the page was drawn: the page's save is refused, not written over it.
    assert.equal((await api.patch('/v1/orgs/default/environments/configured', { variables: { LOG_LEVEL: 'warn' } })).status, 200);
    await page.click('summary:has-text("Edit")');
    await page.fill('#environment-configuration textarea', JSON.stringify({ variables: { LOG_LEVEL: 'trace' } }));
    await page.click('#environment-configuration button[type=submit]');
    await page.waitForSelector('.problem:has-text("Precondition failed")');
    assert.deepEqual((await api.get('/v1/orgs/default/environments/configured')).body.variables, { LOG_LEVEL: 'warn' });
  });

  it('locks an environment with a reason, shows it locked, and unlocks it', async () => {
    const api = server.owner.http;
    assert.equal((await api.post('/v1/orgs/default/environments', { name: 'frozen' })).status, 201);
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/environments/frozen`);
    await page.click('summary:has-text("Lock (a deploy freeze)")');
    await page.fill('#lock-environment input[name=reason]', 'release <b>freeze</b>');
    await page.click('#lock-environment button[type=submit]');
    await page.waitForSelector('#environment-lock >> text=release <b>freeze</b>');
    assert.equal((await api.get('/v1/orgs/default/environments/frozen')).body.lock.reason, 'release <b>freeze</b>');
    await page.goto(`${server.url}/console/#/o/default/environments`);
    await page.waitForSelector('tr:has-text("frozen") .badge.failed:has-text("locked")');
    await page.goto(`${server.url}/console/#/o/default/environments/frozen`);
    await page.click('#environment-lock button:has-text("Unlock")');
    await page.waitForSelector('summary:has-text("Lock (a deploy freeze)")');
    assert.equal((await api.get('/v1/orgs/default/environments/frozen')).body.lock, null);
  });

  it('names what stops, service and environment, when asked a second time to delete an environment in which something serves', async () => {
    const running = await runningDeployment('doomed');
    await running.complete();
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/environments/doomed`);
    await page.waitForSelector('h1:has-text("Environment doomed")');
    const asked: string[] = [];
    const answer = (dialog: Dialog) => { asked.push(dialog.message()); void (asked.length === 1 ? dialog.accept() : dialog.dismiss()); };
    page.on('dialog', answer);
    await page.click('button:has-text("Delete environment")');
    for (let tries = 0; asked.length < 2 && tries < 150; tries++) await new Promise((r) => setTimeout(r, 100));
    page.off('dialog', answer);
    assert.equal(asked.length, 2, asked.join('\n'));
    assert.match(asked[1]!, new RegExp(`the service doomed \\(${running.id}\\)`), asked[1]);
    // Not deleted: the second question was answered no.
    assert.equal((await server.owner.http.get('/v1/orgs/default/environments/doomed')).status, 200);
  });

  it('keeps the states in a list of deployments current while some are queued or running', async () => {
    assert.equal((await server.owner.http.post('/v1/orgs/default/environments', { name: 'listed' })).status, 201);
    assert.equal((await server.owner.http.post('/v1/orgs/default/services', { name: 'listed', spec: { command: ['node', 'server.js'] } })).status, 201);
    const made = await server.owner.http.post('/v1/orgs/default/deployments', { service: 'listed', environment: 'listed' });
    assert.equal(made.status, 201, made.text);
    const page = await signedIn(server.bootstrap);
    await page.clock.install();
    // The list shown on signing in, Deployments too, has the deployment queued as well: the filtered
    // one is looked at once that one has been drawn over.
    const unfiltered = await page.$('#main h1');
    await page.goto(`${server.url}/console/#/o/default/deployments?service=listed`);
    await unfiltered!.waitForElementState('hidden');
    const row = page.locator(`tr:has-text("${made.body.id}")`);
    await row.locator('.badge.queued').waitFor();
    const runner = await newRunner(server, server.bootstrap.orgId);
    const claim = await runner.take({ environments: ['listed'], waitSeconds: 0 });
    assert.equal(claim.deployment.id, made.body.id);
    await lookAgainUntil(page, `tr:has-text("${made.body.id}") .badge.in_progress`, 5_000);
    // The service's recent deployments too.
    await page.goto(`${server.url}/console/#/o/default/services/listed`);
    // Not the list just left, which shows it in progress too.
    await page.waitForSelector('h1:has-text("Service listed")');
    await row.locator('.badge.in_progress').waitFor();
    assert.equal((await runner.complete(claim.deployment.id, claim.lease.token)).status, 200);
    await lookAgainUntil(page, `tr:has-text("${made.body.id}") .badge.succeeded`, 5_000);
  });

  it('reported no script error, refused resource or policy violation on any page', () => {
    // API refusals the page shows the user (a conflict, a stale version, a reference to nothing) are expected.
    assert.deepEqual(pageErrors.filter((e) => !/status of (409|412|422)/.test(e)), []);
  });
});
