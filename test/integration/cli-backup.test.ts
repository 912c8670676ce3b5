// `slipway backup --to FILE` against the database of a server that keeps writing meanwhile: the
// copy is whole (SQLite's own check passes), owner-only, and a server started on it, with the
// master key, reveals what was written before. PostgreSQL is refused with what to use instead.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { addBulk } from '../support/large-database.js';
import { startServer, tempDir, type HttpResult, type TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';
import { cliEnv, runCli } from '../support/processes.js';

describe('slipway backup', () => {
  let server: TestServer;
  const dirs: string[] = [];
  before(async () => { server = await startServer(); });
  after(async () => {
    await server.close();
    for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
  });
  const newDir = () => { const dir = tempDir('slipway-backup-'); dirs.push(dir); return dir; };

  it('copies a SQLite database whole while the server writes, into a file a server can run on', async (t) => {
    if (server.core.database.dialect !== 'sqlite') {
      const refused = await runCli(['backup', '--to', path.join(newDir(), 'copy.db')], cliEnv(server));
      assert.equal(refused.code, 2, refused.stderr);
      assert.match(refused.stderr, /^slipway: backup copies a SQLite database; back PostgreSQL up with its own tools \(pg_dump/);
      t.skip('SQLite only');
      return;
    }
    const admin = server.owner;
    const before = await admin.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'kept-in-backup', values: { K: 'sentinel-before-backup' } }] });
    assert.equal(before.status, 201, before.text);
    /** Where a follower of the event log is after reading all of it. */
    const resumeCursor = async (http: typeof admin.http) => {
      let page = (await http.get('/v1/orgs/default/events?limit=200')).body;
      while (page.nextCursor !== null) page = (await http.get(`/v1/orgs/default/events?limit=200&cursor=${encodeURIComponent(page.nextCursor)}`)).body;
      return page.resumeCursor as string;
    };
    const fromBefore = await resumeCursor(admin.http);

    // Writes go on all the while the copy is made.
    let writing = true;
    let written = 0;
    const writer = (async () => {
      while (writing) {
        const res = await admin.http.post('/v1/orgs/default/secrets', { secrets: Array.from({ length: 50 }, (_, i) => ({ name: `during-${written}-${i}`, values: { V: 'x'.repeat(200) } })) });
        assert.equal(res.status, 201, res.text);
        written++;
      }
    })();
    const target = path.join(newDir(), 'slipway.db');
    const result = await runCli(['backup', '--to', target, '--json'], cliEnv(server));
    writing = false;
    await writer;
    assert.equal(result.code, 0, result.stderr);
    const printed = JSON.parse(result.stdout) as { file: string; bytes: number; check: string };
    assert.deepEqual([printed.file, printed.check], [target, 'ok']);
    assert.equal(fs.statSync(target).mode & 0o777, 0o600);
    assert.ok(written > 0, 'the server wrote while the copy was made');

    // It never writes over a file, and says what it needs.
    const existing = await runCli(['backup', '--to', target], cliEnv(server));
    assert.equal(existing.code, 2, existing.stderr);
    assert.match(existing.stderr, /exists already; give a new file \(nothing was written\)/);
    // A link, even one to nothing, is a file there already: nothing is written through it.
    const link = path.join(newDir(), 'link.db');
    fs.symlinkSync(path.join(path.dirname(link), 'nowhere.db'), link);
    const throughLink = await runCli(['backup', '--to', link], cliEnv(server));
    assert.equal(throughLink.code, 2, throughLink.stderr);
    assert.match(throughLink.stderr, /link\.db exists already \(a link to nothing\); give a new file \(nothing was written\)/);
    assert.equal(fs.existsSync(path.join(path.dirname(link), 'nowhere.db')), false);
    const missing = await runCli(['backup'], cliEnv(server));
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /--to FILE is required/);
    const nowhere = path.join(newDir(), 'no-such-directory', 'copy.db');
    const noDirectory = await runCli(['backup', '--to', nowhere], cliEnv(server));
    assert.equal(noDirectory.code, 2, noDirectory.stderr);
    assert.match(noDirectory.stderr, /the directory .*no-such-directory does not exist; make it first \(nothing was written\)/);

    // Restored: the copy as the database of a new data directory, with the master key beside it
    // (that server's close removes the directory).
    // A follower of the log that read past what the copy holds.
    assert.equal((await admin.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'after-backup', values: { K: 'x' } }] })).status, 201);
    const fromAfter = await resumeCursor(admin.http);
    const restored = path.dirname(target);
    for (const file of ['master.key', 'bootstrap.json']) fs.copyFileSync(path.join(server.dataDir, file), path.join(restored, file));
    const again = await startServer({ reuse: { dataDir: restored, database: { url: null, drop: async () => {} } } });
    try {
      const reveal = await again.owner.http.post('/v1/orgs/default/secrets/kept-in-backup/reveal', {});
      assert.equal(reveal.status, 200, reveal.text);
      assert.deepEqual(reveal.body.values, { K: 'sentinel-before-backup' });
      // The restored log numbers its new events as the old one numbered those the copy lacks: a
      // cursor past the copy is refused, not left to pass the new events by; one from before it goes on.
      assert.equal((await again.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name: 'after-restore', values: { K: 'y' } }] })).status, 201);
      assertProblem(await again.owner.http.get(`/v1/orgs/default/events?cursor=${encodeURIComponent(fromAfter)}`), 400, 'invalid_cursor');
      const names: string[] = [];
      for (let cursor: string | null = fromBefore; cursor !== null;) {
        const page: HttpResult = await again.owner.http.get(`/v1/orgs/default/events?limit=200&cursor=${encodeURIComponent(cursor)}`);
        assert.equal(page.status, 200, page.text);
        names.push(...page.body.events.map((e: { data: { name?: string } }) => e.data.name));
        cursor = page.body.nextCursor;
      }
      assert.equal(names.at(-1), 'after-restore');
      assert.ok(!names.includes('after-backup'), 'what the copy lacks is not there');
    } finally {
      await again.close();
    }
  });

  it('stopped by a signal while it copies, leaves no file at --to and nothing of its own', async (t) => {
    if (server.core.database.dialect !== 'sqlite') return t.skip('SQLite only');
    const dir = newDir();
    const env = { SLIPWAY_DATA_DIR: dir };
    const migrated = await runCli(['migrate'], env);
    assert.equal(migrated.code, 0, migrated.stderr);
    addBulk(path.join(dir, 'slipway.db'));
    const out = newDir();
    const target = path.join(out, 'copy.db');
    // Once SQLite has started writing the copy: a large database takes it a second or more.
    const copying = () => fs.readdirSync(out).some((f) => f.endsWith('.partial') && fs.statSync(path.join(out, f)).size > 0);
    const stopped = await runCli(['backup', '--to', target], env, undefined, { when: copying, signal: 'SIGINT' });
    assert.equal(stopped.signal, 'SIGINT', `${stopped.code} ${stopped.stderr}`);
    assert.match(stopped.stderr, /^slipway: interrupted \(SIGINT\): no backup was written \(the part copied, .*copy\.db\.\d+\.partial, is removed\)\n$/);
    assert.deepEqual(fs.readdirSync(out), []);
    // And the next one, left alone, is a backup.
    const again = await runCli(['backup', '--to', target, '--json'], env);
    assert.equal(again.code, 0, again.stderr);
    assert.equal(JSON.parse(again.stdout).check, 'ok');
    assert.deepEqual(fs.readdirSync(out), ['copy.db']);
  });

  it('refuses a database that is not Slipway\'s, writing nothing', async (t) => {
    if (server.core.database.dialect !== 'sqlite') return t.skip('SQLite only');
    const dir = newDir();
    const other = path.join(dir, 'other.db');
    const { SQLite } = await import('../../src/platform/db/sqlite-library.js');
    const db = new SQLite(other);
    db.exec('create table notes (body text)');
    db.close();
    const target = path.join(dir, 'copy.db');
    const refused = await runCli(['backup', '--to', target, '--database-url', `sqlite:${other}`], cliEnv(server));
    assert.equal(refused.code, 2, refused.stderr);
    assert.match(refused.stderr, /holds no Slipway schema/);
    assert.equal(fs.existsSync(target), false);
  });
});

