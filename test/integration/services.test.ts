// Services: CRUD, the spec and its rules, secret references checked when the service is saved.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Actor, TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';
import {
  assertHiddenFromOtherOrgs, createEnvironment, createService, deploy, eventsOf, startDeployFixture, unique, type DeployFixture,
} from '../support/deployments.js';

describe('services', () => {
  let f: DeployFixture;
  let server: TestServer;
  let orgId: string;
  let developer: Actor;
  let viewer: Actor;
  let admin: Actor;
  const secretName = unique('payments');

  before(async () => {
    f = await startDeployFixture();
    ({ server, orgId, developer, viewer, admin } = f);
    const res = await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secretName, values: { STRIPE_KEY: 'sk_live_very_secret', WEBHOOK_SECRET: 'whsec_also_secret' } }] });
    assert.equal(res.status, 201, res.text);
  });
  after(() => f.close());

  it('creates a service with a full spec and reads it back by id and by name', async () => {
    const name = unique('api');
    const spec = {
      command: ['node', 'server.js', '--port', '$PORT'],
      port: 8080,
      healthCheck: { path: '/healthz', timeoutSeconds: 30 },
      variables: { LOG_LEVEL: 'info', REGION: 'eu' },
      secrets: [{ secret: secretName }, { secret: secretName, key: 'STRIPE_KEY', as: 'PAYMENTS_KEY' }],
    };
    const created = await developer.http.post(`/v1/orgs/${orgId}/services`, { name, description: 'The API', spec });
    assert.equal(created.status, 201, created.text);
    const svc = created.body;
    assert.match(svc.id, /^svc_[0-9a-z]{26}$/);
    assert.deepEqual({ name: svc.name, description: svc.description, version: svc.version, spec: svc.spec }, { name, description: 'The API', version: 1, spec });
    for (const ref of [svc.id, name]) assert.deepEqual((await viewer.http.get(`/v1/orgs/${orgId}/services/${ref}`)).body, svc);
    assert.ok(!created.text.includes('sk_live_very_secret'));

    const minimal = await createService(developer.http, orgId, { spec: { image: 'registry.example/api:1.2' } });
    assert.deepEqual(minimal.spec, { image: 'registry.example/api:1.2', variables: {}, secrets: [] });
    // A health check's timeout has a default, saved with the spec (what a runner is given).
    const checked = await createService(developer.http, orgId, { spec: { command: ['node', 'server.js'], healthCheck: { path: '/ready' } } });
    assert.deepEqual(checked.spec.healthCheck, { path: '/ready', timeoutSeconds: 30 });

    const events = await eventsOf(server, orgId, svc.id);
    assert.deepEqual(events.map((e) => e.type), ['service.created']);
    assert.deepEqual(events[0].data, { name, version: 1, variables: ['LOG_LEVEL', 'REGION'], secrets: [secretName, secretName] });
  });

  it('lists services with a cursor', async () => {
    const org = (await server.createOrg()).id;
    const dev = await server.actor(org, 'developer');
    const made = [];
    for (let i = 0; i < 5; i++) made.push((await createService(dev.http, org)).id);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await dev.http.get(`/v1/orgs/${org}/services?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      assert.equal(page.status, 200);
      seen.push(...page.body.services.map((s: any) => s.id));
      cursor = page.body.nextCursor;
    } while (cursor !== null);
    assert.deepEqual(seen, made);
  });

  it('refuses unknown secrets and keys when the service is saved, pointing at each reference', async () => {
    const unknownSecret = await developer.http.post(`/v1/orgs/${orgId}/services`, {
      name: unique('svc'), spec: { command: ['x'], secrets: [{ secret: 'no-such-secret' }] },
    });
    assert.equal(unknownSecret.status, 422, unknownSecret.text);
    assert.match(unknownSecret.body.detail, /no-such-secret/);

    const unknownKey = await developer.http.post(`/v1/orgs/${orgId}/services`, {
      name: unique('svc'), spec: { command: ['x'], secrets: [{ secret: secretName, key: 'STRIPE_KEY' }, { secret: secretName, key: 'NOPE' }] },
    });
    assert.equal(unknownKey.status, 422);
    assert.equal(unknownKey.body.code, 'unknown_secret_reference');
    assert.deepEqual(unknownKey.body.errors.map((e: any) => e.pointer), ['/spec/secrets/1/key']);
    assert.match(unknownKey.body.detail, /NOPE/);

    // Both at once: one answer names both, so that the next try is not refused for the other.
    const both = await developer.http.post(`/v1/orgs/${orgId}/services`, {
      name: unique('svc'), spec: { command: ['x'], secrets: [{ secret: secretName, key: 'NOPE' }, { secret: 'no-such-secret' }] },
    });
    const problem = assertProblem(both, 422, 'unknown_secrets');
    assert.deepEqual(problem.missing, ['no-such-secret']);
    assert.deepEqual((problem.errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/spec/secrets/0/key', '/spec/secrets/1/secret']);
    assert.match(String(problem.detail), new RegExp(`no-such-secret\\. Besides, secret "${secretName}" \\(version 1\\) has no key "NOPE"`));

    const list = await viewer.http.get(`/v1/orgs/${orgId}/services?limit=200`);
    assert.ok(!list.body.services.some((s: any) => s.spec.secrets.some((r: any) => r.secret === 'no-such-secret' || r.key === 'NOPE')));
  });

  it('refuses a variable that would be set twice, `as` without `key`, and a spec with nothing to run', async () => {
    const twice = await developer.http.post(`/v1/orgs/${orgId}/services`, {
      name: unique('svc'),
      spec: { command: ['x'], variables: { STRIPE_KEY: 'plain' }, secrets: [{ secret: secretName }, { secret: secretName, key: 'WEBHOOK_SECRET' }] },
    });
    assert.equal(twice.status, 422);
    assert.equal(twice.body.code, 'variable_conflict');
    assert.deepEqual(twice.body.errors.map((e: any) => e.pointer), ['/spec/secrets/0', '/spec/secrets/1']);

    const asAlone = await developer.http.post(`/v1/orgs/${orgId}/services`, { name: unique('svc'), spec: { command: ['x'], secrets: [{ secret: secretName, as: 'X' }] } });
    assert.equal(asAlone.status, 400);
    assert.deepEqual(asAlone.body.errors.map((e: any) => e.pointer), ['/spec/secrets/0/as']);

    const nothing = await developer.http.post(`/v1/orgs/${orgId}/services`, { name: unique('svc'), spec: { port: 80 } });
    assert.equal(nothing.status, 400);
    assert.deepEqual(nothing.body.errors.map((e: any) => e.pointer), ['/spec/command']);

    const badShape = await developer.http.post(`/v1/orgs/${orgId}/services`, {
      name: unique('svc'), spec: { command: [], port: 70000, variables: { 'not valid': 'x' }, healthCheck: { path: 'healthz', timeoutSeconds: 0 } },
    });
    assert.equal(badShape.status, 400);
    const pointers = badShape.body.errors.map((e: any) => e.pointer);
    for (const p of ['/spec/command', '/spec/port', '/spec/variables/not valid', '/spec/healthCheck/path', '/spec/healthCheck/timeoutSeconds']) assert.ok(pointers.includes(p), `${p} in ${pointers}`);

    const taken = await createService(developer.http, orgId);
    const dup = await developer.http.post(`/v1/orgs/${orgId}/services`, { name: taken.name, spec: { command: ['x'] } });
    assert.equal(dup.status, 409);
    assert.equal(dup.body.code, 'service_name_taken');
  });

  it('refuses PORT, the runner\'s, wherever a spec would set it, pointing at each place, on create and on update', async () => {
    const ports = unique('ports');
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: ports, values: { PORT: '9000', HTTP_PORT: '8080' } }] })).status, 201);
    const everywhere = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/services`, {
      name: unique('svc'),
      spec: { command: ['x'], variables: { PORT: '3000' }, secrets: [{ secret: ports }, { secret: secretName, key: 'STRIPE_KEY', as: 'PORT' }, { secret: ports, key: 'PORT' }] },
    }), 422, 'reserved_variable');
    assert.deepEqual(everywhere.errors, [
      { pointer: '/spec/variables/PORT', message: 'PORT is set by a plain variable' },
      { pointer: '/spec/secrets/0', message: `PORT is set by secret "${ports}", exported whole, whose version 1 holds a key PORT` },
      { pointer: '/spec/secrets/1/as', message: `PORT is set by secret "${secretName}" key "STRIPE_KEY"` },
      { pointer: '/spec/secrets/2/key', message: `PORT is set by secret "${ports}" key "PORT"` },
    ]);
    assert.match(String(everywhere.detail), /^PORT is the runner's to set: .*`port`/);

    // Its other keys one by one, and its PORT under another name, are the way to take such a secret.
    const svc = await createService(developer.http, orgId, {
      spec: { command: ['x'], port: 8080, secrets: [{ secret: ports, key: 'HTTP_PORT' }, { secret: ports, key: 'PORT', as: 'UPSTREAM_PORT' }] },
    });
    for (const spec of [{ command: ['x'], variables: { PORT: '1' } }, { command: ['x'], secrets: [{ secret: ports }] }]) {
      assertProblem(await developer.http.patch(`/v1/orgs/${orgId}/services/${svc.id}`, { spec }), 422, 'reserved_variable');
    }
    // A secret that gains a PORT key is refused whole at the next save.
    const later = unique('later');
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: later, values: { A: '1' } }] })).status, 201);
    assert.equal((await developer.http.patch(`/v1/orgs/${orgId}/services/${svc.id}`, { spec: { command: ['x'], secrets: [{ secret: later }] } })).status, 200);
    assert.equal((await developer.http.patch(`/v1/orgs/${orgId}/secrets/${later}`, { set: { PORT: '80' } })).status, 200);
    const gained = assertProblem(await developer.http.patch(`/v1/orgs/${orgId}/services/${svc.id}`, { spec: { command: ['y'], secrets: [{ secret: later }] } }), 422, 'reserved_variable');
    assert.deepEqual((gained.errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/spec/secrets/0']);
    assert.deepEqual((await viewer.http.get(`/v1/orgs/${orgId}/services/${svc.id}`)).body.spec.command, ['x']);
  });

  it('bounds a spec\'s size as saved, in bytes of JSON (SLIPWAY_MAX_SPEC_BYTES), on create and on update', async () => {
    const limit = server.config.limits.specBytes;
    // A spec whose JSON, as saved with its defaults, is `bytes` long: one variable fills it out.
    const base = Buffer.byteLength(JSON.stringify({ command: ['x'], variables: { FILL: '' }, secrets: [] }));
    const sized = (bytes: number) => ({ command: ['x'], variables: { FILL: 'x'.repeat(bytes - base) } });
    const fits = await createService(developer.http, orgId, { spec: sized(limit) });
    assert.equal(Buffer.byteLength(JSON.stringify(fits.spec)), limit);

    const over = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/services`, { name: unique('svc'), spec: sized(limit + 1) }), 400, 'limit_exceeded');
    assert.deepEqual(over.limit, { name: 'SLIPWAY_MAX_SPEC_BYTES', value: limit });
    assert.deepEqual(over.errors, [{ pointer: '/spec', message: `is ${limit + 1} bytes as JSON, more than ${limit}` }]);
    // Bytes, not characters: two-byte characters count twice.
    const wide = { command: ['x'], variables: { FILL: '\u00e9'.repeat((limit - base) / 2 + 1) } };
    assertProblem(await developer.http.post(`/v1/orgs/${orgId}/services`, { name: unique('svc'), spec: wide }), 400, 'limit_exceeded');

    assertProblem(await developer.http.patch(`/v1/orgs/${orgId}/services/${fits.id}`, { spec: sized(limit + 1) }), 400, 'limit_exceeded');
    assert.deepEqual((await viewer.http.get(`/v1/orgs/${orgId}/services/${fits.id}`)).body, fits);
  });

  it('updates: spec replaced whole, version up by one, rules checked again, nothing changed on refusal', async () => {
    const svc = await createService(developer.http, orgId, { spec: { command: ['a'], variables: { A: '1' } } });
    const renamed = unique('renamed');
    const updated = await developer.http.patch(`/v1/orgs/${orgId}/services/${svc.name}`, {
      name: renamed, spec: { command: ['b'], secrets: [{ secret: secretName, key: 'STRIPE_KEY' }] },
    });
    assert.equal(updated.status, 200, updated.text);
    assert.equal(updated.body.name, renamed);
    assert.equal(updated.body.version, 2);
    assert.deepEqual(updated.body.spec, { command: ['b'], variables: {}, secrets: [{ secret: secretName, key: 'STRIPE_KEY' }] });

    const refused = await developer.http.patch(`/v1/orgs/${orgId}/services/${svc.id}`, { spec: { command: ['c'], secrets: [{ secret: secretName, key: 'MISSING' }] } });
    assert.equal(refused.status, 422);
    const now = await viewer.http.get(`/v1/orgs/${orgId}/services/${svc.id}`);
    assert.deepEqual(now.body, updated.body);

    const events = await eventsOf(server, orgId, svc.id);
    assert.deepEqual(events.map((e) => e.type), ['service.created', 'service.updated']);
    assert.deepEqual(events[1].data.changed.sort(), ['name', 'spec']);
    // Names only: the variable it removed; the references it added and removed; and what runs, both sides.
    assert.deepEqual(events[1].data.variableChanges, { added: [], removed: ['A'], changed: [] });
    assert.deepEqual(events[1].data.secretChanges, { added: [{ secret: secretName, key: 'STRIPE_KEY' }], removed: [] });
    assert.deepEqual(events[1].data.specChanges, [{ field: 'command', change: 'changed', from: ['a'], to: ['b'] }]);
  });

  it('refuses deletion while a deployment is queued, deletes it otherwise', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    const queued = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const refused = await admin.http.delete(`/v1/orgs/${orgId}/services/${svc.id}`);
    assert.equal(refused.status, 409);
    assert.equal(refused.body.code, 'service_in_use');
    assert.deepEqual(refused.body.conflicts, [{ deployment: queued.id, state: 'queued' }]);
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments/${queued.id}/cancel`, { reason: 'not needed' })).status, 200);
    assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/services/${svc.name}`)).status, 204);
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/services/${svc.id}`)).status, 404);
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/deployments/${queued.id}`)).status, 404);
    assert.deepEqual((await eventsOf(server, orgId, svc.id)).map((e) => e.type), ['service.created', 'service.deleted']);
  });

  it('refuses deleting a service that serves unless forced, since that stops its processes and its rollback targets go', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId);
    const made = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const claimed = await f.runner.take({ environments: [env.name], waitSeconds: 0 });
    assert.equal(claimed.deployment.id, made.id);
    assert.equal((await f.runner.complete(made.id, claimed.lease.token)).status, 200);

    const serving = await admin.http.delete(`/v1/orgs/${orgId}/services/${svc.name}`);
    assert.equal(serving.status, 409);
    assert.equal(serving.body.code, 'service_in_use');
    assert.deepEqual(serving.body.conflicts, [{ deployment: made.id, state: 'succeeded' }]);
    assert.match(serving.body.detail, new RegExp(`The service "${svc.name}" serves .*force=true`));
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/services/${svc.id}`)).status, 200);
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/deployments/${made.id}`)).body.state, 'succeeded');

    assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/services/${svc.name}?force=true`)).status, 204);
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/deployments/${made.id}`)).status, 404);
    const events = await eventsOf(server, orgId, svc.id);
    assert.deepEqual(events.map((e) => e.type), ['service.created', 'service.deleted']);
    // The log says which deployment stopped serving: nothing else will.
    assert.deepEqual(events[1].data.stoppedServing, [made.id]);
  });

  it('answers with an ETag and honours If-Match, so that of two edits of one version the second is refused, not lost', async () => {
    const svc = await createService(developer.http, orgId, { spec: { command: ['a'], variables: { A: '1' } } });
    const url = `/v1/orgs/${orgId}/services/${svc.id}`;
    const read = await viewer.http.get(url);
    const etag = read.headers.get('etag')!;
    assert.match(etag, /^"1\.[0-9a-z]+"$/);
    const notModified = await viewer.http.get(url, { headers: { 'if-none-match': etag } });
    assert.equal(notModified.status, 304);
    assert.equal(notModified.text, '');

    // Two jobs read version 1 and each adds a variable: one wins, the other is told.
    const edit = (name: string) => developer.http.patch(url, { spec: { command: ['a'], variables: { A: '1', [name]: 'x' } } }, { headers: { 'if-match': etag } });
    const answers = await Promise.all([edit('FROM_A'), edit('FROM_B')]);
    assert.deepEqual(answers.map((a) => a.status).sort(), [200, 412]);
    const refused = answers.find((a) => a.status === 412)!;
    assert.equal(refused.body.currentVersion, 2);
    const won = answers.find((a) => a.status === 200)!;
    assert.equal(won.headers.get('etag'), etag.replace('"1.', '"2.'));
    assert.deepEqual((await viewer.http.get(url)).body.spec, won.body.spec);

    assertProblem(await admin.http.delete(url, { headers: { 'if-match': etag } }), 412, 'precondition_failed');
    assert.equal((await viewer.http.get(url)).status, 200);
    assert.equal((await admin.http.delete(url, { headers: { 'if-match': won.headers.get('etag')! } })).status, 204);

    // Documented beside the headers an answer has already: a creation's Location stays.
    const doc = (await server.http().get('/openapi.json')).body;
    const createdHeaders = doc.paths['/v1/orgs/{orgId}/services'].post.responses['201'].headers;
    assert.ok(createdHeaders.location && createdHeaders.etag, JSON.stringify(createdHeaders));
  });

  it('makes no version and no event for a patch that changes nothing, and records what a change changed', async () => {
    const svc = await createService(developer.http, orgId, { description: 'first', spec: { command: ['a'] } });
    const url = `/v1/orgs/${orgId}/services/${svc.id}`;
    const same = await developer.http.patch(url, { name: svc.name, description: 'first', spec: { command: ['a'] } });
    assert.equal(same.status, 200, same.text);
    assert.equal(same.body.version, 1);
    assert.equal(same.body.updatedAt, svc.updatedAt);
    const changed = await developer.http.patch(url, { description: 'second', spec: { command: ['a'] } });
    assert.equal(changed.body.version, 2);
    const events = await eventsOf(server, orgId, svc.id);
    assert.deepEqual(events.map((e) => e.type), ['service.created', 'service.updated']);
    assert.deepEqual([events[1].data.changed, events[1].data.from, events[1].data.to], [['description'], { description: 'first' }, { description: 'second' }]);
  });

  it('is invisible from another organization, and so are the secrets it names', async () => {
    const svc = await createService(developer.http, orgId);
    await assertHiddenFromOtherOrgs(server, orgId, `/services/${svc.id}`);
    const stranger = await server.actor((await server.createOrg()).id, 'developer');
    const ref = await stranger.http.post(`/v1/orgs/${stranger.orgId}/services`, { name: unique('svc'), spec: { command: ['x'], secrets: [{ secret: secretName }] } });
    assert.equal(ref.status, 422);
  });
});
