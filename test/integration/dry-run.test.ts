// `?dryRun=true` on the apply-style writes (services, environments, the secrets' bulk upsert): the
// answer a change would have, or the problem that would refuse it, and nothing written.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Actor } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';
import { createEnvironment, createService, eventsSettled, unique, useDeployFixture } from '../support/deployments.js';

describe('dry runs', () => {
  const f = useDeployFixture();

  /** Every event of the organization, oldest first. */
  async function allEvents(orgId: string): Promise<any[]> {
    await eventsSettled(f.server);
    const res = await f.server.owner.http.get(`/v1/orgs/${orgId}/events?limit=200`);
    assert.equal(res.status, 200, res.text);
    return res.body.events;
  }

  /** A fresh organization with an actor of `role` and one secret. */
  async function freshOrg(role: 'developer' | 'admin'): Promise<{ orgId: string; actor: Actor; secret: string }> {
    const orgId = (await f.server.createOrg()).id;
    const actor = await f.server.actor(orgId, role);
    const secret = unique('db');
    const made = await actor.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { URL: 'postgres://x', PASSWORD: 'pw' } }] });
    assert.equal(made.status, 201, made.text);
    return { orgId, actor, secret };
  }

  it('a service create answers what it would make, with 200 and no Location, and makes nothing', async () => {
    const { orgId, actor, secret } = await freshOrg('developer');
    const before = await allEvents(orgId);
    const name = unique('web');
    const body = { name, description: 'Web', spec: { command: ['node', 'web.js'], variables: { B: '2', A: '1' }, secrets: [{ secret }] } };
    const res = await actor.http.post(`/v1/orgs/${orgId}/services?dryRun=true`, body);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers.get('location'), null);
    assert.equal(res.body.name, name);
    assert.equal(res.body.version, 1);
    // As it would be saved: variables in the order of their names.
    assert.deepEqual(Object.keys(res.body.spec.variables), ['A', 'B']);
    assertProblem(await actor.http.get(`/v1/orgs/${orgId}/services/${name}`), 404, 'service_not_found');
    assert.deepEqual((await actor.http.get(`/v1/orgs/${orgId}/services`)).body.services, []);
    assert.deepEqual(await allEvents(orgId), before);

    // The name is still free, and the real create still makes version 1.
    const real = await actor.http.post(`/v1/orgs/${orgId}/services`, body);
    assert.equal(real.status, 201, real.text);
    assert.notEqual(real.body.id, res.body.id);
    assert.deepEqual(real.body.spec, res.body.spec);
  });

  it('a service change answers the version it would make; the service, its ETag and its events stay as they were', async () => {
    const { orgId, actor, secret } = await freshOrg('developer');
    const svc = await createService(actor.http, orgId, { spec: { command: ['node', 'a.js'], variables: { MODE: 'a' } } });
    const before = await allEvents(orgId);
    const patch = { spec: { command: ['node', 'b.js'], variables: { MODE: 'b' }, secrets: [{ secret, key: 'URL', as: 'DATABASE_URL' }] } };
    const etag = (await actor.http.get(`/v1/orgs/${orgId}/services/${svc.id}`)).headers.get('etag')!;
    const res = await actor.http.patch(`/v1/orgs/${orgId}/services/${svc.id}?dryRun=true`, patch, { headers: { 'if-match': etag } });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.version, 2);
    assert.deepEqual(res.body.spec.command, ['node', 'b.js']);
    // No ETag for a version that does not exist.
    assert.equal(res.headers.get('etag'), null);
    const now = await actor.http.get(`/v1/orgs/${orgId}/services/${svc.id}`);
    assert.equal(now.body.version, 1);
    assert.deepEqual(now.body.spec.command, ['node', 'a.js']);
    assert.deepEqual(await allEvents(orgId), before);

    // Unchanged: the current version, as a real PATCH would say.
    const same = await actor.http.patch(`/v1/orgs/${orgId}/services/${svc.id}?dryRun=true`, { spec: svc.spec });
    assert.equal(same.body.version, 1);
    assert.deepEqual(same.body, now.body);

    // The real change makes version 2, as the dry run said.
    const real = await actor.http.patch(`/v1/orgs/${orgId}/services/${svc.id}`, patch);
    assert.equal(real.body.version, 2);
    assert.deepEqual(real.body.spec, res.body.spec);
  });

  it('refuses as the real change would: unknown secrets, a stale If-Match, a name taken, bad input', async () => {
    const { orgId, actor } = await freshOrg('developer');
    const svc = await createService(actor.http, orgId);
    const other = await createService(actor.http, orgId);
    const unknown = await actor.http.post(`/v1/orgs/${orgId}/services?dryRun=true`, { name: unique('svc'), spec: { command: ['x'], secrets: [{ secret: 'no-such-secret' }] } });
    assert.deepEqual(assertProblem(unknown, 422, 'unknown_secrets').missing, ['no-such-secret']);
    assertProblem(await actor.http.patch(`/v1/orgs/${orgId}/services/${svc.id}?dryRun=true`, { description: 'x' }, { headers: { 'if-match': 'W/"7"' } }), 412, 'precondition_failed');
    assertProblem(await actor.http.patch(`/v1/orgs/${orgId}/services/${svc.id}?dryRun=true`, { name: other.name }), 409, 'service_name_taken');
    assertProblem(await actor.http.post(`/v1/orgs/${orgId}/services?dryRun=true`, { name: other.name, spec: { command: ['x'] } }), 409, 'service_name_taken');
    const bad = assertProblem(await actor.http.post(`/v1/orgs/${orgId}/services?dryRun=yes`, { name: unique('svc'), spec: { command: ['x'] } }), 400);
    assert.match(JSON.stringify(bad.errors), /\/query\/dryRun/);
    assert.equal((await actor.http.get(`/v1/orgs/${orgId}/services/${svc.id}`)).body.version, 1);
  });

  it('an environment create and change answer what they would make, and make nothing', async () => {
    const { orgId, actor, secret } = await freshOrg('admin');
    const before = await allEvents(orgId);
    const name = unique('staging');
    const made = await actor.http.post(`/v1/orgs/${orgId}/environments?dryRun=true`, { name, protected: true, variables: { REGION: 'eu' }, secrets: [{ secret }] });
    assert.equal(made.status, 200, made.text);
    assert.equal(made.headers.get('location'), null);
    assert.equal(made.body.protected, true);
    assertProblem(await actor.http.get(`/v1/orgs/${orgId}/environments/${name}`), 404, 'environment_not_found');
    assert.deepEqual(await allEvents(orgId), before);

    const env = await createEnvironment(actor.http, orgId, { protected: true });
    const settled = await allEvents(orgId);
    const changed = await actor.http.patch(`/v1/orgs/${orgId}/environments/${env.id}?dryRun=true`, { protected: false, variables: { REGION: 'us' } });
    assert.equal(changed.status, 200, changed.text);
    assert.equal(changed.body.protected, false);
    assert.deepEqual(changed.body.variables, { REGION: 'us' });
    const now = (await actor.http.get(`/v1/orgs/${orgId}/environments/${env.id}`)).body;
    assert.deepEqual(now, env);
    assert.deepEqual(await allEvents(orgId), settled);
    assertProblem(await actor.http.patch(`/v1/orgs/${orgId}/environments/${env.id}?dryRun=true`, { secrets: [{ secret: 'gone' }] }), 422, 'unknown_secrets');
  });

  it('a bulk upsert says per item what it would do and which keys it would change; no version, no event, no value', async () => {
    const { orgId, actor, secret } = await freshOrg('developer');
    const admin = await f.server.actor(orgId, 'admin');
    const before = await allEvents(orgId);
    const sentinel = `SENTINEL-${unique('dry')}`;
    const fresh = unique('new');
    const res = await actor.http.put(`/v1/orgs/${orgId}/secrets?dryRun=true`, {
      secrets: [{ name: secret, values: { URL: 'postgres://x', TOKEN: sentinel } }, { name: fresh, values: { K: sentinel } }],
    });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body.secrets.map((s: any) => [s.name, s.result, s.version]), [[secret, 'updated', 2], [fresh, 'created', 1]]);
    assert.deepEqual(res.body.secrets[0].keyChanges, { added: ['TOKEN'], removed: ['PASSWORD'], changed: [] });
    assert.ok(!res.text.includes(sentinel));

    assert.equal((await actor.http.get(`/v1/orgs/${orgId}/secrets/${secret}`)).body.version, 1);
    assert.equal((await actor.http.get(`/v1/orgs/${orgId}/secrets/${secret}/versions`)).body.versions.length, 1);
    assert.deepEqual((await admin.http.post(`/v1/orgs/${orgId}/secrets/${secret}/reveal`, {})).body.values, { URL: 'postgres://x', PASSWORD: 'pw' });
    assertProblem(await actor.http.get(`/v1/orgs/${orgId}/secrets/${fresh}`), 404, 'secret_not_found');
    // The reveal above is the only event since.
    assert.deepEqual((await allEvents(orgId)).slice(before.length).map((e) => e.type), ['secret.revealed']);
    assert.ok(!f.server.logs.join('\n').includes(sentinel));
  });

  it('an Idempotency-Key is not taken by a dry run: the real request with it runs, then replays', async () => {
    const { orgId, actor } = await freshOrg('developer');
    const key = unique('key');
    const body = { name: unique('svc'), spec: { command: ['x'] } };
    for (let i = 0; i < 2; i++) {
      const dry = await actor.http.post(`/v1/orgs/${orgId}/services?dryRun=true`, body, { headers: { 'idempotency-key': key } });
      assert.equal(dry.status, 200, dry.text);
      assert.equal(dry.headers.get('idempotent-replayed'), null);
    }
    const real = await actor.http.post(`/v1/orgs/${orgId}/services`, body, { headers: { 'idempotency-key': key } });
    assert.equal(real.status, 201, real.text);
    const again = await actor.http.post(`/v1/orgs/${orgId}/services`, body, { headers: { 'idempotency-key': key } });
    assert.equal(again.status, 201);
    assert.equal(again.body.id, real.body.id);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
  });

  it('needs the role the change needs, and hides other organizations', async () => {
    const { orgId, actor } = await freshOrg('developer');
    const svc = await createService(actor.http, orgId);
    const env = await createEnvironment((await f.server.actor(orgId, 'admin')).http, orgId);
    const viewer = await f.server.actor(orgId, 'viewer');
    const body = { name: unique('svc'), spec: { command: ['x'] } };
    assertProblem(await viewer.http.post(`/v1/orgs/${orgId}/services?dryRun=true`, body), 403, 'forbidden');
    assertProblem(await viewer.http.patch(`/v1/orgs/${orgId}/services/${svc.id}?dryRun=true`, { description: 'x' }), 403, 'forbidden');
    assertProblem(await viewer.http.put(`/v1/orgs/${orgId}/secrets?dryRun=true`, { secrets: [{ name: 'a', values: { A: '1' } }] }), 403, 'forbidden');
    // Environments are an admin's.
    assertProblem(await actor.http.post(`/v1/orgs/${orgId}/environments?dryRun=true`, { name: unique('env') }), 403, 'forbidden');
    assertProblem(await actor.http.patch(`/v1/orgs/${orgId}/environments/${env.id}?dryRun=true`, { protected: true }), 403, 'forbidden');
    assertProblem(await f.server.http().post(`/v1/orgs/${orgId}/services?dryRun=true`, body), 401);

    const stranger = await f.server.actor((await f.server.createOrg()).id, 'owner');
    assertProblem(await stranger.http.post(`/v1/orgs/${orgId}/services?dryRun=true`, body), 404);
    assertProblem(await stranger.http.patch(`/v1/orgs/${orgId}/services/${svc.id}?dryRun=true`, { description: 'x' }), 404);
    assertProblem(await stranger.http.patch(`/v1/orgs/${orgId}/environments/${env.id}?dryRun=true`, { protected: true }), 404);
    assertProblem(await stranger.http.put(`/v1/orgs/${orgId}/secrets?dryRun=true`, { secrets: [{ name: 'a', values: { A: '1' } }] }), 404);
  });
});
