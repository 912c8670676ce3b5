// The audit log: every change appends exactly its event inside the change's own transaction (a
// refused change appends nothing), with the caller, its request id and no secret in it.
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { sql } from 'kysely';
import { nowIso } from '../../src/platform/clock.js';
import { TEST_DB, type Actor, type HttpResult, type TestServer } from '../support/harness.js';
import { eventsSettled } from '../support/deployments.js';
import { startWithOrg, type OrgFixture } from '../support/org-fixture.js';

interface EventT {
  id: string;
  type: string;
  actor: string | null;
  requestId: string | null;
  subject: { type: string; id: string };
  data: Record<string, unknown>;
  createdAt: string;
}

let requestCounter = 0;
const requestId = (label: string) => `evt-test-${label}-${++requestCounter}`;

describe('events', () => {
  let fixture: OrgFixture;
  let server: TestServer;
  let orgId: string;
  let owner: Actor;
  let admin: Actor;
  /** Every client secret handed out in this file, to prove none reaches the log. */
  const issuedSecrets: string[] = [];

  before(async () => {
    fixture = await startWithOrg();
    ({ server, orgId, owner, admin } = fixture);
    issuedSecrets.push(owner.clientSecret, admin.clientSecret);
  });
  after(() => fixture.close());

  async function allEvents(org: string, by: Actor = admin, query = ''): Promise<EventT[]> {
    await eventsSettled(server);
    const out: EventT[] = [];
    let cursor: string | null = null;
    do {
      const res: HttpResult = await by.http.get(`/v1/orgs/${org}/events?limit=200${query}${cursor ? `&cursor=${cursor}` : ''}`);
      assert.equal(res.status, 200, res.text);
      out.push(...res.body.events);
      cursor = res.body.nextCursor;
    } while (cursor !== null);
    return out;
  }

  /** The events one request appended (its X-Request-Id), in the organization's log. */
  async function eventsOf(rid: string, org = orgId, by: Actor = admin): Promise<EventT[]> {
    return (await allEvents(org, by)).filter((e) => e.requestId === rid);
  }

  /** Asserts that the request appended exactly one event, and returns it. */
  async function onlyEvent(rid: string, expected: { type: string; actor: string; subject: { type: string; id: string }; data: Record<string, unknown> }, org = orgId, by: Actor = admin): Promise<EventT> {
    const events = await eventsOf(rid, org, by);
    assert.equal(events.length, 1, JSON.stringify(events));
    const [event] = events as [EventT];
    assert.deepEqual({ type: event.type, actor: event.actor, requestId: event.requestId, subject: event.subject, data: event.data }, { ...expected, requestId: rid });
    assert.match(event.id, /^evt_/);
    assert.match(event.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    return event;
  }

  const send = (by: Actor, rid: string, method: string, path: string, body?: unknown) =>
    by.http.request(method, path, { headers: { 'x-request-id': rid }, ...(body === undefined ? {} : { body }) });

  it('records each service-user change with its actor, request id, subject and no secret', async () => {
    const su = `/v1/orgs/${orgId}/service-users`;
    let rid = requestId('create');
    const created = await send(admin, rid, 'POST', su, { name: 'audited', role: 'developer' });
    assert.equal(created.status, 201);
    assert.equal(created.headers.get('x-request-id'), rid);
    issuedSecrets.push(created.body.clientSecret);
    const id = created.body.id as string;
    const subject = { type: 'service_user', id };
    await onlyEvent(rid, { type: 'service_user.created', actor: admin.id, subject, data: { name: 'audited', role: 'developer', instanceAdmin: false } });

    rid = requestId('role');
    assert.equal((await send(admin, rid, 'PATCH', `${su}/${id}`, { role: 'viewer' })).status, 200);
    await onlyEvent(rid, { type: 'service_user.role_changed', actor: admin.id, subject, data: { from: 'developer', to: 'viewer' } });

    rid = requestId('rename');
    assert.equal((await send(admin, rid, 'PATCH', `${su}/${id}`, { name: 'audited-2', description: 'renamed' })).status, 200);
    await onlyEvent(rid, { type: 'service_user.updated', actor: admin.id, subject, data: { name: 'audited-2', changed: ['name', 'description'], from: { name: 'audited', description: '' }, to: { name: 'audited-2', description: 'renamed' } } });

    rid = requestId('disable');
    assert.equal((await send(admin, rid, 'PATCH', `${su}/${id}`, { disabled: true })).status, 200);
    await onlyEvent(rid, { type: 'service_user.disabled', actor: admin.id, subject, data: {} });

    rid = requestId('enable');
    assert.equal((await send(admin, rid, 'PATCH', `${su}/${id}`, { disabled: false })).status, 200);
    await onlyEvent(rid, { type: 'service_user.enabled', actor: admin.id, subject, data: {} });

    rid = requestId('add-secret');
    const added = await send(admin, rid, 'POST', `${su}/${id}/secrets`);
    assert.equal(added.status, 201);
    issuedSecrets.push(added.body.clientSecret);
    await onlyEvent(rid, { type: 'service_user.secret_added', actor: admin.id, subject, data: { secretId: added.body.id, hint: added.body.hint } });

    rid = requestId('remove-secret');
    const firstSecret = created.body.secrets[0].id as string;
    assert.equal((await send(admin, rid, 'DELETE', `${su}/${id}/secrets/${firstSecret}`)).status, 204);
    await onlyEvent(rid, { type: 'service_user.secret_removed', actor: admin.id, subject, data: { secretId: firstSecret } });

    rid = requestId('promote');
    assert.equal((await send(owner, rid, 'PATCH', `${su}/${id}`, { role: 'owner' })).status, 200);
    await onlyEvent(rid, { type: 'service_user.role_changed', actor: owner.id, subject, data: { from: 'viewer', to: 'owner' } });

    rid = requestId('delete');
    assert.equal((await send(owner, rid, 'DELETE', `${su}/${id}`)).status, 204);
    await onlyEvent(rid, { type: 'service_user.deleted', actor: owner.id, subject, data: { name: 'audited-2' } });

    // A change that changes nothing appends nothing.
    rid = requestId('no-op');
    assert.equal((await send(admin, rid, 'PATCH', `${su}/${admin.id}`, { role: 'admin' })).status, 200);
    assert.deepEqual(await eventsOf(rid), []);
  });

  it('records organization changes', async () => {
    let rid = requestId('org-create');
    const created = await send(server.owner, rid, 'POST', '/v1/orgs', { slug: 'audited-org', name: 'Audited' });
    assert.equal(created.status, 201);
    const subject = { type: 'organization', id: created.body.id as string };
    await onlyEvent(rid, { type: 'organization.created', actor: server.owner.id, subject, data: { slug: 'audited-org', name: 'Audited' } }, created.body.id, server.owner);

    rid = requestId('org-update');
    assert.equal((await send(server.owner, rid, 'PATCH', '/v1/orgs/audited-org', { slug: 'audited-org-2', name: 'Audited 2' })).status, 200);
    await onlyEvent(rid, {
      type: 'organization.updated', actor: server.owner.id, subject,
      data: { changed: ['slug', 'name'], from: { slug: 'audited-org', name: 'Audited' }, to: { slug: 'audited-org-2', name: 'Audited 2' } },
    }, created.body.id, server.owner);

    rid = requestId('org-rename');
    assert.equal((await send(owner, rid, 'PATCH', `/v1/orgs/${orgId}`, { name: 'Renamed by its owner' })).status, 200);
    const org = await server.core.orgs.get(orgId);
    await onlyEvent(rid, {
      type: 'organization.updated', actor: owner.id, subject: { type: 'organization', id: orgId },
      data: { changed: ['name'], from: { name: `Test ${org.slug}` }, to: { name: 'Renamed by its owner' } },
    });
  });

  it('records secret changes without their values', async () => {
    const rid = requestId('secrets');
    const res = await send(admin, rid, 'POST', `/v1/orgs/${orgId}/secrets`, { secrets: [{ name: 'audited-secret', values: { TOKEN: 'value-never-logged-7f3a' } }] });
    assert.equal(res.status, 201, res.text);
    const events = await eventsOf(rid);
    assert.equal(events.length, 1);
    const [event] = events as [EventT];
    assert.deepEqual({ type: event.type, actor: event.actor, subjectType: event.subject.type, name: event.data.name }, {
      type: 'secret.created', actor: admin.id, subjectType: 'secret', name: 'audited-secret',
    });
    assert.ok(!JSON.stringify(await allEvents(orgId)).includes('value-never-logged-7f3a'));
  });

  it('appends nothing for a refused change', async () => {
    const su = `/v1/orgs/${orgId}/service-users`;
    const target = (await admin.http.post(su, { name: 'refusals', role: 'developer' })).body;
    issuedSecrets.push(target.clientSecret);
    await admin.http.post(`${su}/${target.id}/secrets`).then((r) => issuedSecrets.push(r.body.clientSecret));
    const before = await allEvents(orgId);

    const refusals: Array<[Actor, string, string, unknown, number]> = [
      [admin, 'POST', su, { name: 'an-owner', role: 'owner' }, 403],
      [admin, 'POST', su, { name: 'refusals', role: 'viewer' }, 409],
      [admin, 'PATCH', `${su}/${target.id}`, { role: 'owner' }, 403],
      [admin, 'PATCH', `${su}/${owner.id}`, { disabled: true }, 403],
      [owner, 'PATCH', `${su}/${owner.id}`, { role: 'admin' }, 409],
      [owner, 'DELETE', `${su}/${owner.id}`, undefined, 409],
      [admin, 'POST', `${su}/${target.id}/secrets`, undefined, 409],
      [admin, 'PATCH', `/v1/orgs/${orgId}`, { name: 'nope' }, 403],
      [owner, 'PATCH', `/v1/orgs/${orgId}`, { slug: 'default' }, 409],
      [owner, 'POST', '/v1/orgs', { slug: 'not-allowed', name: 'x' }, 403],
      [admin, 'POST', `/v1/orgs/${orgId}/secrets`, { secrets: [{ name: 'audited-secret', values: { A: 'b' } }] }, 409],
    ];
    for (const [by, method, path, body, status] of refusals) {
      const res = await send(by, requestId('refused'), method, path, body);
      assert.equal(res.status, status, `${method} ${path}: ${res.text}`);
    }
    assert.deepEqual(await allEvents(orgId), before);
  });

  it('pages oldest first and filters by type and subject', async () => {
    const su = `/v1/orgs/${orgId}/service-users`;
    const target = (await admin.http.post(su, { name: 'paged', role: 'viewer' })).body;
    issuedSecrets.push(target.clientSecret);
    await admin.http.patch(`${su}/${target.id}`, { role: 'developer' });
    await admin.http.patch(`${su}/${target.id}`, { disabled: true });

    const all = await allEvents(orgId);
    assert.ok(all.length >= 10);
    const paged: EventT[] = [];
    let cursor: string | null = null;
    do {
      const res: HttpResult = await admin.http.get(`/v1/orgs/${orgId}/events?limit=3${cursor ? `&cursor=${cursor}` : ''}`);
      assert.ok(res.body.events.length <= 3);
      paged.push(...res.body.events);
      cursor = res.body.nextCursor;
    } while (cursor !== null);
    assert.deepEqual(paged, all);
    for (let i = 1; i < all.length; i++) {
      assert.ok(all[i - 1]!.id < all[i]!.id);
      assert.ok(all[i - 1]!.createdAt <= all[i]!.createdAt);
    }

    const bySubject = await allEvents(orgId, admin, `&subject=${target.id}`);
    assert.deepEqual(bySubject.map((e) => e.type), ['service_user.created', 'service_user.role_changed', 'service_user.disabled']);
    const exact = await allEvents(orgId, admin, '&type=service_user.disabled');
    assert.ok(exact.length >= 2);
    assert.ok(exact.every((e) => e.type === 'service_user.disabled'));
    const family = await allEvents(orgId, admin, '&type=service_user.*');
    assert.deepEqual(family, all.filter((e) => e.type.startsWith('service_user.')));
    assert.deepEqual((await allEvents(orgId, admin, '&type=organization.*')).map((e) => e.type), ['organization.created', 'organization.updated']);
    assert.deepEqual(await allEvents(orgId, admin, `&type=secret.*&subject=${target.id}`), []);
    // A family is a literal prefix: `_` and `%` match only themselves.
    assert.deepEqual(await allEvents(orgId, admin, '&type=service%25.*'), []);
    assert.deepEqual(await allEvents(orgId, admin, '&type=service_us__.*'), []);
    const bad = await admin.http.get(`/v1/orgs/${orgId}/events?cursor=@@@`);
    assert.equal(bad.status, 400);
  });

  it('filters by actor and by time (what did this caller do, and when), and binds its cursors to them', async () => {
    const su = `/v1/orgs/${orgId}/service-users`;
    // Times by the server's own clock (on PostgreSQL, the database's: this machine's, offset).
    const start = nowIso();
    const made = (await owner.http.post(su, { name: 'audited', role: 'viewer' })).body;
    issuedSecrets.push(made.clientSecret);
    await new Promise((resolve) => setTimeout(resolve, 20));
    const middle = nowIso();
    await new Promise((resolve) => setTimeout(resolve, 20));
    await admin.http.patch(`${su}/${made.id}`, { role: 'developer' });
    await owner.http.patch(`${su}/${made.id}`, { description: 'seen' });
    const all = await allEvents(orgId, admin, `&subject=${made.id}`);
    assert.deepEqual(all.map((e) => e.type), ['service_user.created', 'service_user.role_changed', 'service_user.updated']);

    assert.deepEqual((await allEvents(orgId, admin, `&subject=${made.id}&actor=${owner.id}`)).map((e) => e.type), ['service_user.created', 'service_user.updated']);
    assert.deepEqual((await allEvents(orgId, admin, `&actor=${admin.id}&since=${encodeURIComponent(start)}`)).map((e) => e.type), ['service_user.role_changed']);
    assert.deepEqual((await allEvents(orgId, admin, `&subject=${made.id}&until=${encodeURIComponent(middle)}`)).map((e) => e.type), ['service_user.created']);
    // Another zone is the same instant.
    const offset = new Date(Date.parse(middle)).toISOString().replace('Z', '+00:00');
    assert.deepEqual((await allEvents(orgId, admin, `&subject=${made.id}&since=${encodeURIComponent(offset)}`)).map((e) => e.type), ['service_user.role_changed', 'service_user.updated']);
    // A page's cursor goes with its filters only.
    const first = await admin.http.get(`/v1/orgs/${orgId}/events?limit=1&actor=${owner.id}&subject=${made.id}`);
    assert.equal(first.status, 200, first.text);
    const other = await admin.http.get(`/v1/orgs/${orgId}/events?limit=1&actor=${admin.id}&subject=${made.id}&cursor=${first.body.nextCursor}`);
    assert.equal(other.body.code, 'invalid_cursor');
    assert.equal((await admin.http.get(`/v1/orgs/${orgId}/events?since=yesterday`)).status, 400);
    // A leap second, which RFC 3339 allows and a Date cannot hold, is its second's last millisecond.
    const leap = '2016-12-31T23:59:60Z';
    assert.deepEqual((await allEvents(orgId, admin, `&subject=${made.id}&since=${leap}`)).map((e) => e.type), all.map((e) => e.type));
    assert.deepEqual(await allEvents(orgId, admin, `&subject=${made.id}&until=${encodeURIComponent(leap.replace('Z', '+00:00'))}`), []);
  });

  it('gives a cursor to follow the log from its end: later, only what was appended since', async () => {
    const base = `/v1/orgs/${orgId}/events?type=service_user.*&limit=200`;
    const end = (await admin.http.get(base)).body;
    assert.equal(end.nextCursor, null);
    assert.equal(typeof end.resumeCursor, 'string');
    const idle = (await admin.http.get(`${base}&cursor=${end.resumeCursor}`)).body;
    assert.deepEqual(idle.events, []);
    assert.equal(idle.resumeCursor, end.resumeCursor, 'nothing new: the same place');
    const su = `/v1/orgs/${orgId}/service-users`;
    const later = (await admin.http.post(su, { name: 'followed', role: 'viewer' })).body;
    issuedSecrets.push(later.clientSecret);
    // On PostgreSQL, another test file's open transaction may hold the new event back a moment.
    await eventsSettled(server);
    const since = (await admin.http.get(`${base}&cursor=${idle.resumeCursor}`)).body;
    assert.deepEqual(since.events.map((e: EventT) => [e.type, e.subject.id]), [['service_user.created', later.id]]);
    assert.notEqual(since.resumeCursor, end.resumeCursor);
  });

  it('pages newest first, with filters, and its resume cursor follows the log from the newest event', async () => {
    const su = `/v1/orgs/${orgId}/service-users`;
    const target = (await admin.http.post(su, { name: 'newest-first', role: 'viewer' })).body;
    issuedSecrets.push(target.clientSecret);
    await admin.http.patch(`${su}/${target.id}`, { role: 'developer' });
    await eventsSettled(server);

    const all = await allEvents(orgId);
    const newest: EventT[] = [];
    let cursor: string | null = null;
    let first: HttpResult | undefined;
    do {
      const res: HttpResult = await admin.http.get(`/v1/orgs/${orgId}/events?order=newest&limit=4${cursor ? `&cursor=${cursor}` : ''}`);
      assert.equal(res.status, 200, res.text);
      first ??= res;
      newest.push(...res.body.events);
      cursor = res.body.nextCursor;
    } while (cursor !== null);
    assert.deepEqual(newest, [...all].reverse(), 'every event once, in the reverse of the oldest-first order');
    assert.deepEqual(first!.body.events[0].subject.id, target.id);

    const bySubject = await allEvents(orgId, admin, `&order=newest&subject=${target.id}`);
    assert.deepEqual(bySubject.map((e) => e.type), ['service_user.role_changed', 'service_user.created']);
    const family = await allEvents(orgId, admin, '&order=newest&type=service_user.*');
    assert.deepEqual(family, [...all].reverse().filter((e) => e.type.startsWith('service_user.')));

    // A cursor goes with the order it was made in.
    const oldestCursor = (await admin.http.get(`/v1/orgs/${orgId}/events?limit=1`)).body.nextCursor;
    const mixed = await admin.http.get(`/v1/orgs/${orgId}/events?order=newest&cursor=${oldestCursor}`);
    assert.equal(mixed.status, 400, mixed.text);
    const mixedBack = await admin.http.get(`/v1/orgs/${orgId}/events?order=oldest&cursor=${first!.body.nextCursor}`);
    assert.equal(mixedBack.status, 400, mixedBack.text);
    assert.equal((await admin.http.get(`/v1/orgs/${orgId}/events?order=latest`)).status, 400);

    // The first page's resume cursor is after the newest event: following it, oldest first, brings
    // only what is appended later.
    const resume = first!.body.resumeCursor as string;
    assert.deepEqual((await admin.http.get(`/v1/orgs/${orgId}/events?cursor=${resume}`)).body.events, []);
    await admin.http.patch(`${su}/${target.id}`, { disabled: true });
    await eventsSettled(server);
    const since = (await admin.http.get(`/v1/orgs/${orgId}/events?order=oldest&cursor=${resume}`)).body;
    assert.deepEqual(since.events.map((e: EventT) => [e.type, e.subject.id]), [['service_user.disabled', target.id]]);
    // A page with no event has nothing to resume from.
    assert.equal((await admin.http.get(`/v1/orgs/${orgId}/events?order=newest&subject=nothing-here`)).body.resumeCursor, null);
  });

  it('reads a subject\'s events through the subject\'s index, not the whole log in commit order', async () => {
    if (TEST_DB === 'sqlite') {
      const plan = await sql<{ detail: string }>`explain query plan select * from events where org_id = ${orgId} and subject_id = ${'sec_x'} and seq < ${1000} order by seq desc limit 51`.execute(server.core.db);
      assert.match(plan.rows.map((r) => r.detail).join('\n'), /USING INDEX events_org_subject \(org_id=\? AND subject_id=\? AND seq<\?\)/);
      assert.doesNotMatch(plan.rows.map((r) => r.detail).join('\n'), /TEMP B-TREE/);
      return;
    }
    // PostgreSQL, on a table this small, would read it whole: told not to, it shows the index serves.
    const plan = await server.core.db.transaction().execute(async (trx) => {
      await sql`set local enable_seqscan = off`.execute(trx);
      return sql<{ 'QUERY PLAN': string }>`explain select * from events where org_id = ${orgId} and subject_id = ${'sec_x'} order by tx_id desc, id desc limit 51`.execute(trx);
    });
    assert.match(plan.rows.map((r) => r['QUERY PLAN']).join('\n'), /events_org_subject/);
  });

  it('is for admins and owners of the organization only', async () => {
    assert.equal((await owner.http.get(`/v1/orgs/${orgId}/events`)).status, 200);
    for (const role of ['developer', 'viewer', 'runner'] as const) {
      const caller = await server.actor(orgId, role);
      issuedSecrets.push(caller.clientSecret);
      const res = await caller.http.get(`/v1/orgs/${orgId}/events`);
      assert.equal(res.status, 403, `${role}: ${res.text}`);
      assert.equal(res.body.code, 'forbidden');
    }
    const other = await server.createOrg();
    const otherAdmin = await server.actor(other.id, 'admin');
    issuedSecrets.push(otherAdmin.clientSecret);
    assert.equal((await otherAdmin.http.get(`/v1/orgs/${orgId}/events`)).status, 404);
    await otherAdmin.http.post(`/v1/orgs/${other.id}/service-users`, { name: 'elsewhere', role: 'viewer' }).then((r) => issuedSecrets.push(r.body.clientSecret));

    const mine = await allEvents(orgId);
    const theirs = await allEvents(other.id, otherAdmin);
    assert.ok(theirs.length >= 1);
    const theirIds = new Set(theirs.map((e) => e.id));
    assert.ok(mine.every((e) => !theirIds.has(e.id) && e.subject.id !== other.id && e.actor !== otherAdmin.id));
    assert.ok(theirs.every((e) => e.actor === otherAdmin.id || e.actor === 'cli'));
  });

  it('never carries a client secret or its hash', async () => {
    const text = JSON.stringify([...(await allEvents(orgId)), ...(await allEvents(server.bootstrap.orgId, server.owner))]);
    const rows = await server.core.db.selectFrom('events').select('data').execute();
    const stored = rows.map((r) => r.data).join('\n');
    assert.ok(issuedSecrets.length >= 8);
    for (const secret of [...issuedSecrets, server.bootstrap.clientSecret]) {
      const hash = createHmac('sha256', server.core.identity.pepper).update(secret).digest();
      for (const needle of [secret, hash.toString('hex'), hash.toString('base64'), hash.toString('base64url')]) {
        assert.ok(!text.includes(needle), 'an event response carries a client secret or its hash');
        assert.ok(!stored.includes(needle), 'a stored event carries a client secret or its hash');
      }
    }
  });
});
