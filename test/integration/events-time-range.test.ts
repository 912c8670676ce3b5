// A page of the event log bounded in time (`since`, `until`) holds what the whole log in commit order,
// filtered, holds, page after page and in either direction, whichever way the database reads it: on
// SQLite through the time index (a range with few events) or in commit order with the time compared
// (a larger one); on PostgreSQL as its planner chooses. The events' times are not in commit order,
// as they are not in production (a time is taken before its transaction waits for the write lock).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventsRepo, type EventFilter, type StoredEvent } from '../../src/modules/events/events.repo.js';
import { positionOf } from '../../src/modules/webhooks/webhooks.service.js';
import { openDatabase, type Database } from '../../src/platform/db/database.js';
import { migrateToLatest } from '../../src/platform/db/migrations/index.js';
import { newId } from '../../src/platform/ids.js';
import { tempDir, testDatabase } from '../support/harness.js';

const EVENTS = 240;
const BASE = Date.parse('2026-03-01T00:00:00.000Z');
const iso = (seconds: number) => new Date(BASE + seconds * 1000).toISOString();
const TYPES = ['secret.updated', 'deployment.created', 'service.updated'];

describe('the event log bounded in time', () => {
  let database: Database;
  let dropDatabase: () => Promise<void>;
  /** The organization's events in commit order, as they were written: id, type and time. */
  const written: Array<{ id: string; type: string; at: number }> = [];

  before(async () => {
    const test = await testDatabase();
    dropDatabase = test.drop;
    database = openDatabase({ databaseUrl: test.url, dataDir: tempDir('slipway-events-time-') });
    await migrateToLatest(database);
    for (const org of ['org_a', 'org_b']) await database.db.insertInto('organizations').values({ id: org, slug: org, name: org, created_at: iso(0), updated_at: iso(0) }).execute();
    // Times that go back now and then by up to 20 s, a few of them shared; each event its own
    // transaction, as each change is. Another organization's events in between.
    let seed = 7;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    for (let i = 0; i < EVENTS; i++) {
      const at = i * 10 - Math.floor(random() * 3) * 10;
      const type = TYPES[i % TYPES.length]!;
      const id = newId('event');
      await eventsRepo.insert(database.db, [{ id, org_id: 'org_a', type, actor_id: 'su_x', request_id: 'req', subject_type: 'secret', subject_id: 'sec_x', data: '{}', created_at: iso(at) }]);
      written.push({ id, type, at });
      if (i % 4 === 0) await eventsRepo.insert(database.db, [{ id: newId('event'), org_id: 'org_b', type, actor_id: 'su_y', request_id: 'req', subject_type: 'secret', subject_id: 'sec_y', data: '{}', created_at: iso(at) }]);
    }
  });
  after(async () => {
    await database?.close();
    await dropDatabase?.();
  });

  /** Every page of a listing, `limit` at a time, each one after the last event of the one before. */
  async function allPages(filter: Omit<EventFilter, 'after' | 'limit'>, limit: number): Promise<string[]> {
    const ids: string[] = [];
    let last: StoredEvent | undefined;
    for (let pages = 0; ; pages++) {
      assert.ok(pages <= EVENTS, 'the listing ends');
      const rows = await eventsRepo.list(database.db, database.dialect, 'org_a', { ...filter, limit, after: last === undefined ? null : positionOf(database.dialect, last) });
      const page = rows.slice(0, limit);
      ids.push(...page.map((r) => r.id));
      if (rows.length <= limit) return ids;
      last = page.at(-1);
    }
  }

  it('holds, page after page, what the log filtered holds, in either order', async () => {
    const bounds = [undefined, -5, 0, 5, 300, 1_205, 1_200, 2_000, 2_390, 2_400, 9_999];
    let compared = 0;
    for (const since of bounds) {
      for (const until of bounds) {
        if (since !== undefined && until !== undefined && until < since) continue;
        for (const newestFirst of [false, true]) {
          for (const type of [undefined, 'deployment.created']) {
            const expected = written.filter((e) => (since === undefined || e.at >= since) && (until === undefined || e.at < until) && (type === undefined || e.type === type)).map((e) => e.id);
            if (newestFirst) expected.reverse();
            // On SQLite: through the time index, then in commit order (the range holds more than 10 events).
            for (const sortedAtMost of [EVENTS, 10]) {
              const filter = { newestFirst, type, since: since === undefined ? undefined : iso(since), until: until === undefined ? undefined : iso(until), sortedAtMost };
              assert.deepEqual(await allPages(filter, 7), expected, JSON.stringify(filter));
              compared++;
            }
          }
        }
      }
    }
    assert.ok(compared > 200, String(compared));
  });
});
