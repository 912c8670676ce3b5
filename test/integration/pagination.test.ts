// A cursor pages on only the listing it came from: the same list, organization, parent resource
// and filters. Under any other it is a 400 `invalid_cursor` (not read as a position there, which
// answers a wrong, short or empty page); the same filters, spelt otherwise, keep paging.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Actor } from '../support/harness.js';
import { createEnvironment, createService, deploy, eventsSettled, ship, startDeployFixture, unique, type DeployFixture } from '../support/deployments.js';
import { assertProblem } from '../support/problems.js';

describe('cursors bound to their listing', () => {
  let f: DeployFixture;
  let orgId: string;
  let owner: Actor;
  before(async () => {
    f = await startDeployFixture();
    orgId = f.orgId;
    owner = f.server.owner;
  });
  after(() => f.close());

  /** One item of `path`'s listing, from `cursor` or from the start. */
  const page = (path: string, cursor?: string) => owner.http.get(`${path}${path.includes('?') ? '&' : '?'}limit=1${cursor === undefined ? '' : `&cursor=${cursor}`}`);
  /** The cursor after the first item of `path`'s listing, which must have more. */
  async function cursorOf(path: string): Promise<string> {
    const res = await page(path);
    assert.equal(res.status, 200, res.text);
    assert.equal(typeof res.body.nextCursor, 'string', `${path} has a second page`);
    return res.body.nextCursor;
  }
  async function accepted(path: string, cursor: string): Promise<any> {
    const res = await page(path, cursor);
    assert.equal(res.status, 200, `${path}: ${res.text}`);
    return res.body;
  }
  async function refused(path: string, cursor: string): Promise<void> {
    const body = assertProblem(await page(path, cursor), 400, 'invalid_cursor', path);
    assert.match(String(body.detail), /with the filters and order the cursor was made with, or start again without it/);
  }
  const createSecrets = async (names: string[]) => {
    const res = await owner.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: names.map((name) => ({ name, values: { K: name } })) });
    assert.equal(res.status, 201, res.text);
  };

  it('secrets: a cursor keeps the prefix and the deleted flag it was made with', async () => {
    const base = `/v1/orgs/${orgId}/secrets`;
    await createSecrets(['cur-a-1', 'cur-a-2', 'cur-a-3', 'cur-b-1', 'cur-b-2', 'cur-d-1', 'cur-d-2']);
    for (const name of ['cur-d-1', 'cur-d-2']) assert.equal((await owner.http.delete(`${base}/${name}`)).status, 204);

    const live = await cursorOf(`${base}?prefix=cur-a-`);
    assert.deepEqual((await accepted(`${base}?prefix=cur-a-`, live)).secrets.map((s: any) => s.name), ['cur-a-2']);
    await accepted(`${base}?prefix=cur-a-&deleted=false`, live);
    await refused(`${base}?prefix=cur-b-`, live);
    await refused(base, live);
    await refused(`${base}?prefix=cur-a-&deleted=true`, live);

    const deleted = await cursorOf(`${base}?prefix=cur-d-&deleted=true`);
    assert.deepEqual((await accepted(`${base}?deleted=true&prefix=cur-d-`, deleted)).secrets.map((s: any) => s.name), ['cur-d-2']);
    await refused(`${base}?prefix=cur-d-`, deleted);
    await refused(`${base}?deleted=true`, deleted);
  });

  it('secret versions: a cursor belongs to one secret, not to its name', async () => {
    const base = `/v1/orgs/${orgId}/secrets`;
    await createSecrets(['ver-x', 'ver-y']);
    for (const name of ['ver-x', 'ver-y', 'ver-x', 'ver-y']) {
      assert.equal((await owner.http.patch(`${base}/${name}`, { set: { K: unique('v') } })).status, 200);
    }
    const cursor = await cursorOf(`${base}/ver-x/versions`);
    assert.deepEqual((await accepted(`${base}/ver-x/versions`, cursor)).versions.map((v: any) => v.version), [2]);
    await refused(`${base}/ver-y/versions`, cursor);
    // A cursor made by hand, with a version number no request may carry: refused, never a 500 (PostgreSQL).
    for (const k of ['99999999999', '0', '1.5']) {
      const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')), k })).toString('base64url');
      assertProblem(await page(`${base}/ver-x/versions`, forged), 400, 'invalid_cursor', k);
    }

    // Deleted for good and created again: the same name, another secret.
    assert.equal((await owner.http.delete(`${base}/ver-x?permanent=true`)).status, 204);
    await createSecrets(['ver-x']);
    for (let i = 0; i < 2; i++) assert.equal((await owner.http.patch(`${base}/ver-x`, { set: { K: unique('v') } })).status, 200);
    await refused(`${base}/ver-x/versions`, cursor);
  });

  it('events: a cursor keeps the type and subject it was made with', async () => {
    const base = `/v1/orgs/${orgId}/events`;
    const svc = await createService(f.developer.http, orgId);
    assert.equal((await f.developer.http.patch(`/v1/orgs/${orgId}/services/${svc.id}`, { description: 'changed' })).status, 200);
    await eventsSettled(f.server);

    const byType = await cursorOf(`${base}?type=secret.*`);
    await accepted(`${base}?type=secret.*`, byType);
    await refused(`${base}?type=service.*`, byType);
    await refused(base, byType);
    await refused(`${base}?type=secret.*&subject=${svc.id}`, byType);

    const bySubject = await cursorOf(`${base}?subject=${svc.id}`);
    assert.deepEqual((await accepted(`${base}?subject=${svc.id}`, bySubject)).events.map((e: any) => e.type), ['service.updated']);
    await refused(`${base}?subject=${f.developer.id}`, bySubject);
  });

  it('deployments: a cursor keeps its service, environment and states, named by id or by name', async () => {
    const base = `/v1/orgs/${orgId}/deployments`;
    const [env, otherEnv] = [await createEnvironment(f.admin.http, orgId), await createEnvironment(f.admin.http, orgId)];
    const [svc, otherSvc] = [await createService(f.developer.http, orgId), await createService(f.developer.http, orgId)];
    for (const s of [svc, svc, otherSvc, otherSvc]) await deploy(f.developer.http, orgId, { service: s.id, environment: env.id });

    const byService = await cursorOf(`${base}?service=${svc.name}`);
    await accepted(`${base}?service=${svc.id}`, byService);
    await refused(`${base}?service=${otherSvc.id}`, byService);
    await refused(base, byService);
    await refused(`${base}?service=${svc.id}&environment=${otherEnv.id}`, byService);

    const byStates = await cursorOf(`${base}?environment=${env.id}&state=queued&state=cancelled`);
    await accepted(`${base}?state=cancelled&state=queued&state=queued&environment=${env.name}`, byStates);
    await refused(`${base}?environment=${env.id}&state=queued`, byStates);
  });

  it('active deployments: a cursor belongs to one environment and keeps its service filter', async () => {
    const [env, otherEnv] = [await createEnvironment(f.admin.http, orgId), await createEnvironment(f.admin.http, orgId)];
    const [svc, otherSvc] = [await createService(f.developer.http, orgId), await createService(f.developer.http, orgId)];
    for (const e of [env, otherEnv]) {
      for (const s of [svc, otherSvc]) await ship(f.developer.http, f.runner, orgId, { service: s.id, environment: e.id });
    }
    const active = (e: { id: string }) => `/v1/orgs/${orgId}/environments/${e.id}/active`;
    const cursor = await cursorOf(active(env));
    assert.equal((await accepted(`/v1/orgs/${orgId}/environments/${env.name}/active`, cursor)).deployments.length, 1);
    await refused(active(otherEnv), cursor);
    await refused(`${active(env)}?service=${svc.id}`, cursor);
  });

  it('another organization\'s cursor is refused on every list of an organization', async () => {
    const other = (await f.server.createOrg()).id;
    await createSecrets(['org-1', 'org-2']);
    for (const org of [orgId, other]) {
      for (let i = 0; i < 2; i++) await createEnvironment(owner.http, org);
      for (let i = 0; i < 2; i++) await createService(owner.http, org);
      await f.server.actor(org, 'viewer');
      await f.server.actor(org, 'viewer');
    }
    const svc = await createService(owner.http, orgId);
    const env = await createEnvironment(owner.http, orgId);
    for (let i = 0; i < 2; i++) await deploy(owner.http, orgId, { service: svc.id, environment: env.id });

    for (const list of ['secrets', 'events', 'environments', 'services', 'service-users', 'deployments']) {
      const cursor = await cursorOf(`/v1/orgs/${orgId}/${list}`);
      await accepted(`/v1/orgs/${orgId}/${list}`, cursor);
      await refused(`/v1/orgs/${other}/${list}`, cursor);
    }
  });
});
