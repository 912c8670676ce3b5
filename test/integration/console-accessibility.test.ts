// The web console with a keyboard only and with a screen reader (WCAG 2.2 AA), in a real Chromium
// (once, on SQLite: the page only speaks the API): axe-core over its pages in their states, at a
// desktop's width and at 320 px; where the focus goes; what status and log regions say.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { before, describe, it } from 'node:test';
import type { Page } from 'playwright-core';
import { browserSkip as skipBrowserTests, useConsoleInBrowser } from '../support/chromium.js';
import type { TestServer } from '../support/harness.js';

/** axe-core's script, from node_modules: injected into the pages it checks. */
const AXE_SCRIPT = createRequire(import.meta.url).resolve('axe-core');

const browserSkip = skipBrowserTests('console-accessibility.test');

describe('console accessibility in a browser', { skip: browserSkip }, () => {
  const web = useConsoleInBrowser();
  const { pageErrors, newPage, signIn, signedIn, runningDeployment } = web;
  let server: TestServer;
  before(() => { server = web.server; });

  /**
   * The accessibility rules of WCAG 2.0 to 2.2, A and AA, that axe-core checks, broken on the page
   * as it is now, at impact serious or critical: `rule: the elements` for each.
   */
  async function accessibilityViolations(page: Page): Promise<string[]> {
    // Injected as a script of the page's own, which its policy would refuse (its context bypasses it).
    if (await page.evaluate<boolean>('typeof axe === "undefined"')) await page.addScriptTag({ path: AXE_SCRIPT });
    return page.evaluate<string[]>(`axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa'] } })
      .then((result) => result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
        .map((v) => v.id + ' (' + v.impact + '): ' + v.nodes.map((n) => n.target.join(' ')).join(', ')))`);
  }

  it('breaks no serious or critical accessibility rule on its pages, in their states, at a desktop\'s width and at 320 px', async () => {
    const name = `axe-${process.pid}`;
    const running = await runningDeployment(name);
    await running.send(Array.from({ length: 40 }, (_, i) => `starting ${i + 1}`));
    assert.equal((await server.owner.http.post('/v1/orgs/default/environments', { name: `${name}-locked`, protected: true })).status, 201);
    assert.equal((await server.owner.http.put(`/v1/orgs/default/environments/${name}-locked/lock`, { reason: 'release freeze' })).status, 200);
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name, values: { ALPHA: 'a', BRAVO: 'b' } }] })).status, 201);
    assert.equal((await server.owner.http.patch(`/v1/orgs/default/secrets/${name}`, { set: { ALPHA: 'a2' } })).status, 200);
    const hook = await server.owner.http.post('/v1/orgs/default/webhooks', { url: 'http://127.0.0.1:9/slipway', events: ['deployment.*'] });
    assert.equal(hook.status, 201, hook.text);
    const viewer = await server.actor(server.bootstrap.orgId, 'viewer', `${name}-viewer`);

    const page = await newPage({ bypassCSP: true });
    const found: string[] = [];
    const check = async (state: string) => {
      for (const violation of await accessibilityViolations(page)) found.push(`${state}: ${violation}`);
    };
    /** Each page once what it loads after its heading is in. */
    const visit = async (hash: string, drawn: string) => {
      await page.goto(`${server.url}/console/#${hash}`);
      await page.waitForSelector(drawn);
      await check(hash);
    };

    await page.goto(`${server.url}/console/`);
    await page.waitForSelector('#signin-credentials');
    await check('sign-in');
    await page.fill('#signin-credentials input[name=clientId]', server.bootstrap.clientId);
    await page.fill('#signin-credentials input[name=clientSecret]', 'sws_wrong');
    await page.click('#signin-credentials button[type=submit]');
    await page.waitForSelector('.problem:has-text("Sign-in refused")');
    await check('sign-in refused');
    await page.fill('#signin-credentials input[name=clientSecret]', server.bootstrap.clientSecret);
    await page.click('#signin-credentials button[type=submit]');
    await page.waitForSelector('h1:has-text("Deployments")');

    for (const width of [1280, 320]) {
      await page.setViewportSize({ width, height: 800 });
      await visit('/o/default/deployments', 'main tbody tr');
      await visit(`/o/default/deployments?service=${name}&state=failed`, 'text=No deployments match');
      await visit(`/o/default/deployments/${running.id}`, '#deployment-log >> text=starting 40');
      await visit('/o/default/services', 'main tbody tr');
      await visit(`/o/default/services/${name}`, 'main tbody tr');
      await visit('/o/default/environments', 'main tbody tr');
      await visit(`/o/default/environments/${name}-locked`, '#environment-lock');
      await visit('/o/default/runners', 'main tbody tr, main p:has-text("No runner has been seen")');
      await visit('/o/default/secrets', 'main tbody tr');
      await visit(`/o/default/secrets/${name}`, 'th:has-text("Made by")');
      await visit('/o/default/service-users', 'main tbody tr');
      await visit('/o/default/webhooks', 'main tbody tr');
      await visit(`/o/default/webhooks/${hook.body.id}`, 'h2:has-text("Deliveries") + div > :is(.table-scroll, p)');
      await visit('/o/default/events', 'main tbody tr');
      await visit('/o/no-such-org/services', '.problem');
    }
    await page.setViewportSize({ width: 1280, height: 800 });
    // A form refused, a secret's values revealed, a client secret shown once, a deleted secret to restore.
    await page.goto(`${server.url}/console/#/o/default/services`);
    await page.click('summary:has-text("New service")');
    await page.fill('#create-service input[name=name]', 'Not A Name');
    await page.click('#create-service button[type=submit]');
    await page.waitForSelector('#main .problem');
    await check('services, a refused form');
    await page.goto(`${server.url}/console/#/o/default/secrets/${name}`);
    await page.locator('th:has-text("Made by")').waitFor();
    await page.click('#reveal');
    await page.waitForSelector('#revealed');
    await check('secret, revealed');
    await page.goto(`${server.url}/console/#/o/default/service-users`);
    await page.fill('#create-service-user input[name=name]', `${name}-made`);
    await page.click('#create-service-user button[type=submit]');
    await page.waitForSelector('#shown-once');
    await check('service users, a secret shown once');
    assert.equal((await server.owner.http.delete(`/v1/orgs/default/secrets/${name}`)).status, 204);
    await visit('/o/default/secrets?deleted=true', `main tr:has-text("${name}")`);
    await running.complete();

    // A viewer refused a page of admins.
    const viewerPage = await signedIn(viewer, { bypassCSP: true });
    await viewerPage.goto(`${server.url}/console/#/o/default/service-users`);
    await viewerPage.waitForSelector('.problem:has-text("admin")');
    for (const violation of await accessibilityViolations(viewerPage)) found.push(`a viewer refused: ${violation}`);

    assert.deepEqual(found, []);
  });

  /** What has the focus: its tag, and its id or name when it has one. */
  const focused = (page: Page) => page.evaluate<string>('(() => { const f = document.activeElement; return [f.tagName, f.id || f.getAttribute("name") || f.getAttribute("aria-label") || ""].join(" "); })()');

  it('takes the keyboard on from where it was: past the header, to a refused form\'s problem, back to the Reveal that showed values', async () => {
    const name = `keyboard-${process.pid}`;
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name, values: { ALPHA: 'a' } }] })).status, 201);
    assert.equal((await server.owner.http.patch(`/v1/orgs/default/secrets/${name}`, { set: { ALPHA: 'a2' } })).status, 200);
    const page = await signedIn(server.bootstrap);
    await page.goto(`${server.url}/console/#/o/default/services`);
    await page.waitForSelector('h1:has-text("Services")');
    // The skip link, first in the page, goes to the page's heading and leaves the address as it was.
    await page.focus('#skip');
    await page.keyboard.press('Enter');
    assert.equal(await focused(page), 'H1 ');
    assert.match(page.url(), /#\/o\/default\/services$/);

    // A form the API refused: the focus on its problem, the field it names marked and described by it.
    await page.click('summary:has-text("New service")');
    await page.fill('#create-service input[name=name]', 'Not A Name');
    await page.focus('#create-service button[type=submit]');
    await page.keyboard.press('Enter');
    const problem = page.locator('#main .problem');
    await problem.waitFor();
    const problemId = await problem.getAttribute('id');
    assert.ok(problemId, 'the problem has an id to be referred to');
    assert.equal(await focused(page), `DIV ${problemId}`);
    const field = page.locator('#create-service input[name=name]');
    assert.equal(await field.getAttribute('aria-invalid'), 'true');
    assert.equal(await field.getAttribute('aria-describedby'), problemId);
    // Accepted next time: no longer marked.
    await page.fill('#create-service input[name=name]', name);
    await page.focus('#create-service button[type=submit]');
    await page.keyboard.press('Enter');
    await page.waitForSelector(`h1:has-text("Service ${name}")`);

    // Values revealed from a version's Reveal, and hidden: the focus goes back to that Reveal.
    await page.goto(`${server.url}/console/#/o/default/secrets/${name}`);
    const reveal = page.getByRole('button', { name: 'Reveal version 1', exact: true });
    await reveal.focus();
    await page.keyboard.press('Enter');
    const revealed = page.getByRole('region', { name: 'Values of version 1' });
    await revealed.waitFor();
    assert.equal(await focused(page), 'DIV revealed');
    await revealed.getByRole('button', { name: 'Hide' }).focus();
    await page.keyboard.press('Enter');
    await page.waitForSelector('#revealed', { state: 'detached' });
    assert.equal(await focused(page), 'BUTTON Reveal version 1');
  });

  it('tells a screen reader what changes by itself and what an action did, and names what it shows without words on screen', async () => {
    const running = await runningDeployment(`announced-${process.pid}`);
    const page = await signedIn(server.bootstrap);
    // Status regions in the page before they have anything to say, so that what they are given is read.
    for (const region of ['#notice', '#announce']) {
      assert.equal(await page.locator(region).getAttribute('role'), 'status', region);
      assert.equal(await page.locator(region).evaluate((el) => (el as unknown as { hidden: boolean }).hidden), false, region);
    }
    await page.goto(`${server.url}/console/#/o/default/deployments/${running.id}`);
    await page.waitForSelector(`h1:has-text("Deployment ${running.id}")`);
    await running.send(['ready']);
    // The log, reached with Tab, is a log region named by its heading once its first lines are in.
    const log = page.getByRole('log', { name: 'Log' });
    await log.locator('text=ready').waitFor();
    assert.equal(await log.getAttribute('tabindex'), '0');
    await running.complete();
    await page.waitForSelector(`#announce:has-text("The deployment of announced-${process.pid} into announced-${process.pid}: now succeeded.")`, { state: 'attached' });

    // A column of buttons has a heading to read; a page that is not there has a level-one heading.
    await page.goto(`${server.url}/console/#/o/default/service-users`);
    await page.waitForSelector('main tbody tr');
    assert.deepEqual(await page.locator('main thead th').allTextContents(), ['Service user', 'Role', 'Client secrets', 'Actions']);
    await page.goto(`${server.url}/console/#/o/default/no-such-section`);
    await page.waitForSelector('h1:has-text("No such page")');
  });

  it('keeps what an action did in sight until it is dismissed, with no time to read it in, and gives the keyboard back to the page', async () => {
    const name = `noticed-${process.pid}`;
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name, values: { K: 'one' } }] })).status, 201);
    assert.equal((await server.owner.http.patch(`/v1/orgs/default/secrets/${name}`, { set: { K: 'two' } })).status, 200);
    const page = await signedIn(server.bootstrap, { bypassCSP: true });
    // The page's clock, moved on by hand: a minute passes without a wait.
    await page.clock.install();
    await page.goto(`${server.url}/console/#/o/default/secrets/${name}`);
    await page.getByRole('button', { name: 'Restore version 1', exact: true }).click();
    await page.waitForSelector('#notice:has-text("Version 1 restored as version 3.")');
    assert.deepEqual(await accessibilityViolations(page), []);
    await page.clock.fastForward(60_000);
    assert.equal(await page.locator('#notice').innerText(), 'Version 1 restored as version 3.');

    const dismiss = page.getByRole('button', { name: 'Dismiss', exact: true });
    await dismiss.focus();
    await page.keyboard.press('Enter');
    assert.equal(await page.locator('#notice').innerText(), '');
    assert.equal(await dismiss.isHidden(), true);
    assert.equal(await focused(page), `H1 `);
    assert.match(await page.locator('h1').innerText(), new RegExp(name));
  });

  it('reported no script error, refused resource or policy violation on any page', () => {
    // API refusals the page shows the user (a role too low, a form refused, a wrong secret) are expected.
    assert.deepEqual(pageErrors.filter((e) => !/status of (400|401|403|404)/.test(e)), []);
  });
});
