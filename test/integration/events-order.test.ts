// The audit log is paged in commit order: a reader that follows cursors never passes an event that
// was still being committed, and cursors from before that order (an event id) still work.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { sql } from 'kysely';
import { cliContext } from '../../src/platform/context.js';
import { appendEvents } from '../../src/modules/events/event-log.js';
import { eventsSettled } from '../support/deployments.js';
import { TEST_DB, type Actor, type HttpResult } from '../support/harness.js';
import { startWithOrg, type OrgFixture } from '../support/org-fixture.js';

interface EventT {
  id: string;
  type: string;
  subject: { type: string; id: string };
  data: Record<string, unknown>;
}

const cursorFor = (key: string) => Buffer.from(JSON.stringify({ l: 'events', k: key }), 'utf8').toString('base64url');

describe('events in commit order', () => {
  let fixture: OrgFixture;
  let orgId: string;
  let admin: Actor;
  let counter = 0;

  before(async () => {
    fixture = await startWithOrg();
    ({ orgId, admin } = fixture);
  });
  after(() => fixture.close());

  /** One committed change (a secret created), and so one event. */
  async function change(): Promise<void> {
    const res = await admin.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: `ORDER_${++counter}`, values: { K: 'v' } }] });
    assert.equal(res.status, 201, res.text);
  }

  /**
   * Pages one event at a time from `cursor`, as a consumer tailing the log would: the events read
   * and the last cursor the server handed out (where the consumer resumes next time).
   */
  async function tail(cursor: string | null): Promise<{ events: EventT[]; resumeAt: string | null }> {
    const events: EventT[] = [];
    let resumeAt = cursor;
    for (let next = cursor, first = true; first || next !== null; first = false) {
      const res: HttpResult = await admin.http.get(`/v1/orgs/${orgId}/events?limit=1${next === null ? '' : `&cursor=${next}`}`);
      assert.equal(res.status, 200, res.text);
      events.push(...res.body.events);
      next = res.body.nextCursor;
      if (next !== null) resumeAt = next;
    }
    return { events, resumeAt };
  }

  it('never lets a reader pass an event whose transaction commits late', { skip: TEST_DB !== 'postgres' && 'SQLite commits one writer at a time' }, async () => {
    await change();
    await change();
    // A transaction writes its event (taking its id now) and stays open while later changes commit.
    let commitHeld!: () => void;
    const held = new Promise<void>((resolve) => { commitHeld = resolve; });
    let written!: () => void;
    const wrote = new Promise<void>((resolve) => { written = resolve; });
    const slow = fixture.server.core.db.transaction().execute(async (trx) => {
      await appendEvents(trx, cliContext(), [{ orgId, type: 'test.slow', subject: { type: 'test', id: 'slow' } }]);
      written();
      await held;
    });
    await wrote;
    await change();
    await change();

    const before = await tail(null);
    assert.ok(!before.events.some((e) => e.type === 'test.slow'), 'an uncommitted event is not listed');
    commitHeld();
    await slow;
    const resumed = await tail(before.resumeAt);

    // Across the two sittings the reader has read every event, the late one included (resuming
    // re-reads the last event of the first sitting, which came without a cursor after it).
    const all = (await tail(null)).events.map((e) => e.id);
    const seen = new Set([...before.events, ...resumed.events].map((e) => e.id));
    assert.ok(all.length >= 5);
    assert.deepEqual([...seen].sort(), [...all].sort(), 'the reader missed an event');
    assert.ok(resumed.events.some((e) => e.type === 'test.slow'));
  });

  it('puts events restored from another cluster back in order at start, and cursors keep their place', { skip: TEST_DB !== 'postgres' && 'PostgreSQL only' }, async () => {
    await change();
    await change();
    await eventsSettled(fixture.server);
    const { events: before } = await tail(null);
    const middle = before[before.length - 2]!;
    // What a dump restored into another cluster looks like: transaction ids of that cluster, some
    // of them not reached here (the last event's), the others meaning something else here.
    const last = before[before.length - 1]!;
    await sql`update events set tx_id = (pg_snapshot_xmax(pg_current_snapshot())::text::bigint + 1000000)::text::xid8 where id = ${last.id}`
      .execute(fixture.server.core.db);
    assert.ok(!(await tail(null)).events.some((e) => e.id === last.id), 'an id from the future looks uncommitted');

    assert.ok(await fixture.server.core.events.renumberRestored() >= before.length);
    await change();
    await eventsSettled(fixture.server);
    const { events: after } = await tail(null);
    assert.deepEqual(after.slice(0, before.length).map((e) => e.id), before.map((e) => e.id), 'the restored events come first, in order');
    assert.equal(after.length, before.length + 1);
    const resumed = await admin.http.get(`/v1/orgs/${orgId}/events?cursor=${cursorFor(middle.id)}`);
    assert.deepEqual(resumed.body.events.map((e: EventT) => e.id), after.slice(before.length - 1).map((e) => e.id));
    assert.equal(await fixture.server.core.events.renumberRestored(), 0);
  });

  it('pages from a cursor that names an event id (as cursors did before) and refuses an unknown one', async () => {
    await change();
    await change();
    await eventsSettled(fixture.server);
    const { events: all } = await tail(null);
    assert.ok(all.length >= 2);
    const from = all[all.length - 2]!;
    const res = await admin.http.get(`/v1/orgs/${orgId}/events?cursor=${cursorFor(from.id)}`);
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body.events.map((e: EventT) => e.id), [all[all.length - 1]!.id]);

    const unknown = await admin.http.get(`/v1/orgs/${orgId}/events?cursor=${cursorFor('evt_00000000000000000000000000')}`);
    assert.equal(unknown.status, 400, unknown.text);
    assert.equal(unknown.body.code, 'invalid_cursor');
    // On SQLite a number (as cursors were before they named events) names an event of this
    // organization's, never a place in the instance's sequence, which would tell what others wrote.
    if (fixture.server.core.database.dialect === 'sqlite') {
      const seqOf = async (id: string) => Number((await fixture.server.core.db.selectFrom('events').select('seq').where('id', '=', id).executeTakeFirstOrThrow()).seq);
      const own = await admin.http.get(`/v1/orgs/${orgId}/events?cursor=${cursorFor(String(await seqOf(from.id)))}`);
      assert.deepEqual(own.body.events.map((e: EventT) => e.id), [all[all.length - 1]!.id]);
      const elsewhere = await fixture.server.owner.http.get(`/v1/orgs/${fixture.server.bootstrap.orgId}/events?limit=1`);
      const others = await admin.http.get(`/v1/orgs/${orgId}/events?cursor=${cursorFor(String(await seqOf(elsewhere.body.events[0].id)))}`);
      assert.equal(others.status, 400, others.text);
      assert.equal(others.body.code, 'invalid_cursor');
    }
    for (const bad of ['12.x', '99999999999999999999', '-1', '', 'evt_', 'evt_\u0000', 'evt_x\u0000']) {
      const garbage = await admin.http.get(`/v1/orgs/${orgId}/events?cursor=${cursorFor(bad)}`);
      assert.equal(garbage.status, 400, `${bad}: ${garbage.text}`);
    }
  });

  it('lists events in the order their changes were made', async () => {
    const names: string[] = [];
    for (let i = 0; i < 5; i++) {
      await change();
      names.push(`ORDER_${counter}`);
    }
    const { events } = await tail(null);
    const created = events.filter((e) => e.type === 'secret.created' && names.includes(e.data.name as string)).map((e) => e.data.name);
    assert.deepEqual(created, names);
    const ids = events.map((e) => e.id);
    assert.equal(new Set(ids).size, ids.length, 'no event is listed twice');
  });
});
