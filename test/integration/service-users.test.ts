// Service users through the API: credentials shown once,
// rotation without downtime, roles and who may hand them out, disable, delete.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { rawDatabaseBytes, startSecondNode, type Actor, type HttpResult, type TestServer } from '../support/harness.js';
import { startWithOrg, type OrgFixture } from '../support/org-fixture.js';
import { requestToken } from '../support/tokens.js';
import { cliContext } from '../../src/platform/context.js';
import type { AppError } from '../../src/platform/errors.js';

function assertInvalidClient(res: HttpResult): void {
  assert.equal(res.status, 401, res.text);
  assert.equal(res.body.error, 'invalid_client');
  assert.match(res.headers.get('www-authenticate') ?? '', /^Basic /);
}

describe('service users', () => {
  let fixture: OrgFixture;
  let server: TestServer;
  let orgId: string;
  let slug: string;
  let admin: Actor;
  let owner: Actor;
  const base = () => `/v1/orgs/${slug}/service-users`;

  before(async () => {
    fixture = await startWithOrg();
    ({ server, orgId, slug, admin, owner } = fixture);
  });
  after(() => fixture.close());

  it('creates a service user whose credentials are shown once and work at the token endpoint', async () => {
    const res = await admin.http.post(base(), { name: 'ci-deployer', description: 'GitHub Actions', role: 'developer' });
    assert.equal(res.status, 201, res.text);
    assert.equal(res.headers.get('cache-control'), 'no-store');
    const created = res.body;
    assert.match(created.clientId, /^su_/);
    assert.equal(created.id, created.clientId);
    assert.match(created.clientSecret, /^sws_[A-Za-z0-9_-]{43}$/);
    assert.equal(created.tokenUrl, server.bootstrap.tokenUrl);
    assert.equal(created.scope, server.bootstrap.scope);
    assert.equal(created.orgId, orgId);
    assert.equal(created.role, 'developer');
    assert.equal(created.instanceAdmin, false);
    assert.equal(created.disabled, false);
    assert.equal(created.secrets.length, 1);
    assert.ok(created.clientSecret.startsWith(created.secrets[0].hint));

    for (const ref of [created.id, 'ci-deployer']) {
      const got = await admin.http.get(`${base()}/${encodeURIComponent(ref)}`);
      assert.equal(got.status, 200, got.text);
      assert.equal(got.body.id, created.id);
      assert.ok(!got.text.includes(created.clientSecret));
      assert.deepEqual(Object.keys(got.body).sort(), [
        'clientId', 'createdAt', 'description', 'disabled', 'disabledAt', 'environments', 'id', 'instanceAdmin', 'name', 'orgId', 'role', 'secrets', 'updatedAt',
      ]);
      assert.deepEqual(Object.keys(got.body.secrets[0]).sort(), ['createdAt', 'hint', 'id', 'lastUsedAt']);
    }

    // A token request refused after the secret was accepted (an unknown scope) did not use it.
    assert.equal((await requestToken(server, created, 'openid no-such-scope')).status, 400);
    assert.equal((await admin.http.get(`${base()}/${created.id}`)).body.secrets[0].lastUsedAt, null);
    const token = await server.token(created);
    const me = await server.http(token).get('/v1/orgs');
    assert.equal(me.status, 200);
    assert.deepEqual(me.body.orgs.map((o: { id: string }) => o.id), [orgId]);
    const used = await admin.http.get(`${base()}/${created.id}`);
    assert.match(used.body.secrets[0].lastUsedAt, /^\d{4}-/);

    // Only a keyed hash is stored, and no log line carries the secret.
    const secretBytes = Buffer.from(created.clientSecret, 'utf8');
    for (const file of await rawDatabaseBytes(server)) assert.equal(file.indexOf(secretBytes), -1);
    assert.ok(!server.logs.some((line) => line.includes(created.clientSecret)));
  });

  it('lists service users page by page without secrets', async () => {
    for (let i = 0; i < 3; i++) assert.equal((await admin.http.post(base(), { name: `lister-${i}`, role: 'viewer' })).status, 201);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res: HttpResult = await admin.http.get(`${base()}?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      assert.equal(res.status, 200, res.text);
      assert.ok(res.body.serviceUsers.length <= 2);
      assert.ok(!/clientSecret|hash/.test(res.text));
      seen.push(...res.body.serviceUsers.map((u: { id: string }) => u.id));
      cursor = res.body.nextCursor;
      pages++;
    } while (cursor !== null);
    const all = await server.core.serviceUsers.list(orgId, { limit: 200 });
    assert.deepEqual(seen, all.items.map((u) => u.id));
    assert.ok(pages >= 3);
    assert.equal(new Set(seen).size, seen.length);
  });

  it('rotates client secrets without downtime and refuses a third or removing the last', async () => {
    const created = (await admin.http.post(base(), { name: 'rotating', role: 'developer' })).body;
    const first = { clientId: created.clientId, clientSecret: created.clientSecret };
    const firstSecretId = created.secrets[0].id;

    const added = await admin.http.post(`${base()}/rotating/secrets`);
    assert.equal(added.status, 201, added.text);
    assert.equal(added.headers.get('cache-control'), 'no-store');
    assert.match(added.body.id, /^cs_/);
    assert.notEqual(added.body.clientSecret, first.clientSecret);
    const second = { clientId: created.clientId, clientSecret: added.body.clientSecret };
    assert.equal((await requestToken(server, second)).status, 200);
    assert.equal((await requestToken(server, first)).status, 200);

    const listed = await admin.http.get(`${base()}/${created.id}`);
    assert.deepEqual(listed.body.secrets.map((s: { id: string }) => s.id), [firstSecretId, added.body.id]);
    assert.ok(!listed.text.includes(second.clientSecret));

    const third = await admin.http.post(`${base()}/${created.id}/secrets`);
    assert.equal(third.status, 409);
    assert.equal(third.body.code, 'too_many_client_secrets');
    assert.deepEqual(third.body.conflicts.map((c: { id: string }) => c.id), [firstSecretId, added.body.id]);

    assert.equal((await admin.http.delete(`${base()}/${created.id}/secrets/${firstSecretId}`)).status, 204);
    assertInvalidClient(await requestToken(server, first));
    assert.equal((await requestToken(server, second)).status, 200);

    const last = await admin.http.delete(`${base()}/${created.id}/secrets/${added.body.id}`);
    assert.equal(last.status, 409);
    assert.equal(last.body.code, 'last_client_secret');
    assert.equal((await requestToken(server, second)).status, 200);
    const gone = await admin.http.delete(`${base()}/${created.id}/secrets/${firstSecretId}`);
    assert.equal(gone.status, 404);
    assert.equal(gone.body.code, 'client_secret_not_found');
  });

  it('lets an admin manage roles up to admin and only owners touch owners', async () => {
    const refused = await admin.http.post(base(), { name: 'would-be-owner', role: 'owner' });
    assert.equal(refused.status, 403);
    assert.match(refused.body.detail, /owner/);

    const dev = (await admin.http.post(base(), { name: 'promoted', role: 'developer' })).body;
    const toAdmin = await admin.http.patch(`${base()}/${dev.id}`, { role: 'admin' });
    assert.equal(toAdmin.status, 200, toAdmin.text);
    assert.equal(toAdmin.body.role, 'admin');
    assert.equal((await admin.http.patch(`${base()}/${dev.id}`, { role: 'owner' })).status, 403);
    assert.equal((await admin.http.patch(`${base()}/${admin.id}`, { role: 'owner' })).status, 403);
    assert.equal((await admin.http.post(base(), { name: 'runner-1', role: 'runner' })).status, 201);

    // Anything about an owner, even its description or its secrets, takes an owner.
    for (const [method, path, body] of [
      ['PATCH', `${base()}/${owner.id}`, { description: 'changed by an admin' }],
      ['PATCH', `${base()}/${owner.id}`, { disabled: true }],
      ['POST', `${base()}/${owner.id}/secrets`, undefined],
      ['DELETE', `${base()}/${owner.id}/secrets/${owner.secrets[0]!.id}`, undefined],
      ['DELETE', `${base()}/${owner.id}`, undefined],
    ] as const) {
      const res = await admin.http.request(method, path, body === undefined ? {} : { body });
      assert.equal(res.status, 403, `${method} ${path}: ${res.text}`);
    }
    const untouched = await owner.http.get(`${base()}/${owner.id}`);
    assert.equal(untouched.body.description, '');
    assert.equal(untouched.body.secrets.length, 1);

    const made = await owner.http.patch(`${base()}/${dev.id}`, { role: 'owner' });
    assert.equal(made.status, 200);
    assert.equal(made.body.role, 'owner');
    assert.equal((await owner.http.patch(`${base()}/${dev.id}`, { role: 'developer' })).body.role, 'developer');
  });

  it('replays a client secret under its Idempotency-Key only to a caller who may still manage its service user', async () => {
    const org = await server.createOrg();
    const [first, second] = [await server.actor(org.id, 'owner'), await server.actor(org.id, 'owner')];
    const users = `/v1/orgs/${org.id}/service-users`;
    const keyed = (key: string) => ({ headers: { 'idempotency-key': key } });
    const created = await first.http.post(users, { name: 'deputy', role: 'owner' }, keyed('create-deputy'));
    assert.equal(created.status, 201, created.text);
    const added = await first.http.post(`${users}/deputy/secrets`, undefined, keyed('rotate-deputy'));
    assert.equal(added.status, 201, added.text);
    // While it may, a retry gets the first answer again, byte for byte.
    const again = await first.http.post(users, { name: 'deputy', role: 'owner' }, keyed('create-deputy'));
    assert.deepEqual({ status: again.status, replayed: again.headers.get('idempotent-replayed'), body: again.text }, { status: 201, replayed: 'true', body: created.text });
    // Renamed since, it is still the service user whose secret was added.
    assert.equal((await second.http.patch(`${users}/deputy`, { name: 'deputy-renamed' })).status, 200);
    assert.equal((await first.http.post(`${users}/deputy/secrets`, undefined, keyed('rotate-deputy'))).text, added.text);
    assert.equal((await second.http.patch(`${users}/deputy-renamed`, { name: 'deputy' })).status, 200);

    // Demoted to admin, it may no longer manage an owner: its retries get what the routes say now.
    assert.equal((await second.http.patch(`${users}/${first.id}`, { role: 'admin' })).status, 200);
    for (const [path, body, key, secret] of [
      [users, { name: 'deputy', role: 'owner' }, 'create-deputy', created.body.clientSecret],
      [`${users}/deputy/secrets`, undefined, 'rotate-deputy', added.body.clientSecret],
    ] as const) {
      const retry = await first.http.post(path, body, keyed(key));
      assert.equal(retry.status, 403, retry.text);
      assert.ok(!retry.text.includes(secret));
    }
    // Once its service user is gone, a replay has nothing to hand out.
    assert.equal((await second.http.patch(`${users}/${first.id}`, { role: 'owner' })).status, 200);
    assert.equal((await second.http.delete(`${users}/deputy`)).status, 204);
    const gone = await first.http.post(`${users}/deputy/secrets`, undefined, keyed('rotate-deputy'));
    assert.equal(gone.status, 404, gone.text);
    assert.ok(!gone.text.includes(added.body.clientSecret));
  });

  it('keeps one enabled owner in every organization', async () => {
    const org = await server.createOrg();
    const solo = await server.actor(org.id, 'owner', 'solo');
    const path = `/v1/orgs/${org.id}/service-users/${solo.id}`;
    for (const [method, body] of [['PATCH', { role: 'admin' }], ['PATCH', { disabled: true }], ['DELETE', undefined]] as const) {
      const res = await solo.http.request(method, path, body === undefined ? {} : { body });
      assert.equal(res.status, 409, `${method} ${JSON.stringify(body)}: ${res.text}`);
      assert.equal(res.body.code, 'last_owner');
      assert.match(res.body.detail, /another owner/);
    }
    // A disabled owner does not count.
    const dormant = (await solo.http.post(`/v1/orgs/${org.id}/service-users`, { name: 'dormant', role: 'owner' })).body;
    assert.equal((await solo.http.patch(`/v1/orgs/${org.id}/service-users/${dormant.id}`, { disabled: true })).status, 200);
    assert.equal((await solo.http.patch(path, { role: 'admin' })).body.code, 'last_owner');

    assert.equal((await solo.http.patch(`/v1/orgs/${org.id}/service-users/${dormant.id}`, { disabled: false })).status, 200);
    const demoted = await solo.http.patch(path, { role: 'admin' });
    assert.equal(demoted.status, 200, demoted.text);
    assert.equal(demoted.body.role, 'admin');
  });

  it('keeps one enabled owner when two owners are demoted at the same time', async () => {
    const org = await server.createOrg();
    const a = await server.actor(org.id, 'owner');
    const b = await server.actor(org.id, 'owner');
    const results = await Promise.all([
      server.owner.http.patch(`/v1/orgs/${org.id}/service-users/${a.id}`, { role: 'admin' }),
      server.owner.http.patch(`/v1/orgs/${org.id}/service-users/${b.id}`, { disabled: true }),
      server.owner.http.delete(`/v1/orgs/${org.id}/service-users/${b.id}`),
    ]);
    assert.equal(results.filter((r) => r.status === 409 && r.body.code === 'last_owner').length >= 1, true, results.map((r) => r.text).join('\n'));
    const users = await server.core.serviceUsers.list(org.id, { limit: 200 });
    assert.equal(users.items.filter((u) => u.role === 'owner' && !u.disabled).length, 1);
  });

  it('lets no owner demoted or disabled meanwhile change or make another, on a node that still remembers its token as an owner\'s', async () => {
    const other = await startSecondNode(server);
    try {
      const org = await server.createOrg();
      const path = (id: string) => `/v1/orgs/${org.id}/service-users/${id}`;
      const [a, b, c, d] = [await server.actor(org.id, 'owner'), await server.actor(org.id, 'owner'), await server.actor(org.id, 'owner'), await server.actor(org.id, 'owner')];
      // The other node has read b and d as owners, and remembers them a few seconds.
      for (const actor of [b, d]) assert.equal((await other.http(actor.token).get(path(c.id))).status, 200);
      // Two owners demoting or disabling each other at once: the one whose change runs second is no owner by then.
      assert.equal((await a.http.patch(path(b.id), { role: 'admin' })).status, 200);
      const demoted = await other.http(b.token).patch(path(c.id), { role: 'viewer' });
      assert.equal(demoted.status, 403, demoted.text);
      assert.match(demoted.body.detail, /only an owner can change it/);
      assert.equal((await a.http.patch(path(d.id), { disabled: true })).status, 200);
      const disabled = await other.http(d.token).patch(path(c.id), { disabled: true });
      assert.equal(disabled.status, 401, disabled.text);
      assert.equal(disabled.body.code, 'invalid_token');
      // Nor does it hand out a role it no longer has.
      const made = await other.http(b.token).post(`/v1/orgs/${org.id}/service-users`, { name: 'made-by-b', role: 'owner' });
      assert.equal(made.status, 403, made.text);
      assert.equal((await other.http(d.token).post(`/v1/orgs/${org.id}/service-users`, { name: 'made-by-d', role: 'viewer' })).status, 401);
      const owners = (await server.core.serviceUsers.list(org.id, { limit: 200 })).items.filter((u) => u.role === 'owner' && !u.disabled);
      assert.deepEqual(owners.map((u) => u.id).sort(), [a.id, c.id].sort());
    } finally {
      await other.close();
    }
  });

  it('never hands out more than two live secrets under concurrent rotation', async () => {
    const created = (await admin.http.post(base(), { name: 'racing', role: 'developer' })).body;
    const results = await Promise.all(Array.from({ length: 4 }, () => admin.http.post(`${base()}/${created.id}/secrets`)));
    assert.deepEqual(results.map((r) => r.status).sort(), [201, 409, 409, 409]);
    assert.equal((await admin.http.get(`${base()}/${created.id}`)).body.secrets.length, 2);
  });

  it('disables and enables a service user: tokens are refused at once', async () => {
    const dev = await server.actor(orgId, 'developer');
    assert.equal((await dev.http.get(`/v1/orgs/${slug}`)).status, 200);

    const disabled = await admin.http.patch(`${base()}/${dev.id}`, { disabled: true });
    assert.equal(disabled.status, 200, disabled.text);
    assert.equal(disabled.body.disabled, true);
    assert.match(disabled.body.disabledAt, /^\d{4}-/);
    assertInvalidClient(await requestToken(server, dev));
    const refused = await dev.http.get(`/v1/orgs/${slug}`);
    assert.equal(refused.status, 401);
    assert.equal(refused.body.code, 'invalid_token');
    assert.match(refused.body.detail, /disabled/);

    const enabled = await admin.http.patch(`${base()}/${dev.id}`, { disabled: false });
    assert.equal(enabled.status, 200);
    assert.equal(enabled.body.disabled, false);
    assert.equal(enabled.body.disabledAt, null);
    assert.equal((await server.http(await server.token(dev)).get(`/v1/orgs/${slug}`)).status, 200);
  });

  it('deletes a service user: 204, then its tokens and credentials are refused', async () => {
    const dev = await server.actor(orgId, 'developer');
    const res = await admin.http.delete(`${base()}/${dev.id}`);
    assert.equal(res.status, 204);
    assert.equal(res.text, '');
    const refused = await dev.http.get(`/v1/orgs/${slug}`);
    assert.equal(refused.status, 401);
    assert.equal(refused.body.code, 'invalid_token');
    assertInvalidClient(await requestToken(server, dev));
    assert.equal((await admin.http.get(`${base()}/${dev.id}`)).status, 404);
    // The name is free again.
    assert.equal((await admin.http.post(base(), { name: dev.name, role: 'viewer' })).status, 201);
  });

  it('refuses taken names, bad names and unknown fields', async () => {
    await admin.http.post(base(), { name: 'taken', role: 'viewer' });
    const dup = await admin.http.post(base(), { name: 'taken', role: 'developer' });
    assert.equal(dup.status, 409);
    assert.equal(dup.body.code, 'service_user_name_taken');
    assert.deepEqual(dup.body.conflicts, [{ pointer: '/name', name: 'taken' }]);

    const other = (await admin.http.post(base(), { name: 'other', role: 'viewer' })).body;
    const rename = await admin.http.patch(`${base()}/${other.id}`, { name: 'taken' });
    assert.equal(rename.status, 409);
    assert.equal(rename.body.code, 'service_user_name_taken');
    assert.deepEqual(rename.body.conflicts, [{ pointer: '/name', name: 'taken' }]);

    for (const name of ['-bad/name', 'taken ', ' taken']) {
      const bad = await admin.http.post(base(), { name, role: 'viewer' });
      assert.equal(bad.status, 400, name);
      assert.deepEqual(bad.body.errors.map((e: { pointer: string }) => e.pointer), ['/name']);
    }
    const unknownRole = await admin.http.post(base(), { name: 'x', role: 'superuser' });
    assert.equal(unknownRole.status, 400);
    assert.ok(unknownRole.body.errors.some((e: { pointer: string }) => e.pointer === '/role'));
    const extra = await admin.http.post(base(), { name: 'x', role: 'viewer', instanceAdmin: true });
    assert.equal(extra.status, 400);
    assert.deepEqual(extra.body.errors.map((e: { pointer: string }) => e.pointer), ['/instanceAdmin']);
    assert.equal((await admin.http.patch(`${base()}/${other.id}`, {})).status, 400);
  });

  it('refuses a runner that is an instance administrator, made so (slipway service-user create) or changed into one', async () => {
    const orgId = (await admin.http.get(`/v1/orgs/${slug}`)).body.id;
    await assert.rejects(server.core.serviceUsers.create(cliContext(), orgId, { name: 'runner-admin', role: 'runner', instanceAdmin: true }),
      (error: AppError) => error.status === 400 && JSON.stringify(error.extras).includes('/instanceAdmin'));
    assert.equal((await admin.http.get(`${base()}/runner-admin`)).status, 404);

    const made = await server.core.serviceUsers.create(cliContext(), orgId, { name: 'admin-not-runner', role: 'admin', instanceAdmin: true });
    const demoted = await server.owner.http.patch(`${base()}/${made.id}`, { role: 'runner' });
    assert.equal(demoted.status, 400, demoted.text);
    assert.deepEqual(demoted.body.errors.map((e: { pointer: string }) => e.pointer), ['/role']);
    assert.equal((await admin.http.get(`${base()}/${made.id}`)).body.role, 'admin');
    assert.equal((await server.owner.http.delete(`${base()}/${made.id}`)).status, 204);
  });

  it('finds a service user by a name that looks like an id', async () => {
    const created = (await admin.http.post(base(), { name: 'su_lookalike', role: 'viewer' })).body;
    const got = await admin.http.get(`${base()}/su_lookalike`);
    assert.equal(got.status, 200, got.text);
    assert.equal(got.body.id, created.id);
  });

  it('answers 404 for unknown service users and for those of another organization', async () => {
    const elsewhere = await server.actor((await server.createOrg()).id, 'viewer');
    for (const ref of ['su_01jzzzzzzzzzzzzzzzzzzzzzzz', 'nobody', elsewhere.id]) {
      for (const [method, path] of [
        ['GET', `${base()}/${ref}`],
        ['PATCH', `${base()}/${ref}`],
        ['DELETE', `${base()}/${ref}`],
        ['POST', `${base()}/${ref}/secrets`],
        ['DELETE', `${base()}/${ref}/secrets/${elsewhere.secrets[0]!.id}`],
      ] as const) {
        const res = await admin.http.request(method, path, method === 'PATCH' ? { body: { description: 'x' } } : {});
        assert.equal(res.status, 404, `${method} ${path}: ${res.text}`);
        assert.equal(res.body.code, 'service_user_not_found');
      }
    }
    const foreign = await admin.http.delete(`${base()}/${admin.id}/secrets/${elsewhere.secrets[0]!.id}`);
    assert.equal(foreign.status, 404);
    assert.equal(foreign.body.code, 'client_secret_not_found');
    assert.equal((await admin.http.get(`/v1/orgs/${elsewhere.orgId}/service-users`)).status, 404);
  });

  it('refuses every service-user route to developers, viewers and runners', async () => {
    const target = await server.actor(orgId, 'viewer');
    for (const role of ['developer', 'viewer', 'runner'] as const) {
      const caller = await server.actor(orgId, role);
      for (const [method, path, body] of [
        ['GET', base(), undefined],
        ['POST', base(), { name: `by-${role}`, role: 'viewer' }],
        ['GET', `${base()}/${target.id}`, undefined],
        ['PATCH', `${base()}/${target.id}`, { description: 'x' }],
        ['DELETE', `${base()}/${target.id}`, undefined],
        ['POST', `${base()}/${target.id}/secrets`, undefined],
        ['DELETE', `${base()}/${target.id}/secrets/${target.secrets[0]!.id}`, undefined],
      ] as const) {
        const res = await caller.http.request(method, path, body === undefined ? {} : { body });
        assert.equal(res.status, 403, `${role} ${method} ${path}: ${res.text}`);
        assert.equal(res.body.code, 'forbidden');
        assert.equal(res.headers.get('content-type'), 'application/problem+json; charset=utf-8');
      }
    }
    const after = await admin.http.get(`${base()}/${target.id}`);
    assert.equal(after.body.description, '');
    assert.equal(after.body.secrets.length, 1);
  });

  it('lets an instance administrator act as owner in any organization, and only it touch instance administrators', async () => {
    const made = await server.owner.http.post(base(), { name: 'made-by-instance-admin', role: 'owner' });
    assert.equal(made.status, 201, made.text);
    assert.equal((await server.owner.http.patch(`${base()}/${owner.id}`, { description: 'seen by the instance admin' })).status, 200);

    // An ordinary owner of `default` may not disable or delete the instance administrator.
    const localOwner = await server.actor(server.bootstrap.orgId, 'owner');
    const path = `/v1/orgs/default/service-users/${server.owner.id}`;
    assert.equal((await localOwner.http.patch(path, { disabled: true })).status, 403);
    assert.equal((await localOwner.http.delete(path)).status, 403);
    assert.equal((await localOwner.http.post(`${path}/secrets`)).status, 403);
    assert.equal((await server.owner.http.get('/v1/orgs/default')).status, 200);
  });
});
