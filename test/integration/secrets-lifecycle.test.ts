// One secret's life over real HTTP: read with ETag, replace and patch (If-Match, unchanged),
// versions, reveal, restore a version, delete, undelete, permanent delete, list and paginate.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startServer, type Actor, type TestServer } from '../support/harness.js';
import { eventsSettled, eventually } from '../support/deployments.js';

const base = '/v1/orgs/default/secrets';
/** A secret's ETag as the README documents it: its version and its creation time in milliseconds, base 36. */
const etag = (version: number, createdAt: string) => `"${version}.${Date.parse(createdAt).toString(36)}"`;

describe('secrets lifecycle', () => {
  let server: TestServer;
  let admin: Actor;
  let dev: Actor;
  before(async () => {
    server = await startServer();
    admin = server.owner;
    dev = await server.actor(server.bootstrap.orgId, 'developer');
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  const create = async (name: string, values: Record<string, string>) => {
    const res = await dev.http.post(base, { secrets: [{ name, values }] });
    assert.equal(res.status, 201, res.text);
  };
  const reveal = async (name: string, version?: number) => {
    const res = await admin.http.post(`${base}/${name}/reveal`, version === undefined ? {} : { version });
    assert.equal(res.status, 200, res.text);
    return res.body.values as Record<string, string>;
  };

  it('reads one secret with its ETag (version and creation time), and never its values', async () => {
    await create('db.main', { URL: 'postgres://a', PASSWORD: 'p1' });
    const res = await dev.http.get(`${base}/db.main`);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('etag'), etag(1, res.body.createdAt));
    assert.deepEqual(res.body.keys, ['PASSWORD', 'URL']);
    assert.equal(res.body.version, 1);
    assert.ok(!res.text.includes('postgres://a'));
    const missing = await dev.http.get(`${base}/nope`);
    assert.equal(missing.status, 404);
    assert.equal(missing.body.code, 'secret_not_found');
    // A write to a secret never creates it: the problem says what does.
    const replaced = await dev.http.put(`${base}/nope`, { values: { A: 'x' } });
    assert.equal(replaced.status, 404);
    assert.match(replaced.body.detail, /Create it with POST …\/secrets, or PUT …\/secrets/);
  });

  it('answers a read 304 when If-None-Match names the current version, and 200 once it moved', async () => {
    await create('cond.get', { A: '1' });
    const tag = (await dev.http.get(`${base}/cond.get`)).headers.get('etag')!;
    const read = (ifNoneMatch: string) => dev.http.get(`${base}/cond.get`, { headers: { 'if-none-match': ifNoneMatch } });
    for (const held of [tag, `W/${tag}`, '"1"', `"7", ${tag}`, '*']) {
      const res = await read(held);
      assert.equal(res.status, 304, held);
      assert.equal(res.text, '');
      assert.equal(res.headers.get('etag'), tag);
      // No body, so nothing to describe: a Content-Length on a 304 must be the 200's (RFC 9110 §8.6).
      assert.equal(res.headers.get('content-length'), null, held);
      assert.equal(res.headers.get('content-type'), null, held);
    }
    assert.equal((await dev.http.patch(`${base}/cond.get`, { set: { A: '2' } })).status, 200);
    const moved = await read(tag);
    assert.equal(moved.status, 200);
    assert.equal(moved.headers.get('etag'), etag(2, moved.body.createdAt));
    const malformed = await read('3');
    assert.equal(malformed.status, 400);
    assert.equal(malformed.body.errors[0].pointer, '/headers/if-none-match');
  });

  it('refuses a read and a reveal with a stale If-Match (412, no event), and reveals with the current one', async () => {
    await create('cond.reveal', { A: '1' });
    const tag = (await dev.http.get(`${base}/cond.reveal`)).headers.get('etag')!;
    assert.equal((await dev.http.get(`${base}/cond.reveal`, { headers: { 'if-match': tag } })).status, 200);
    assert.equal((await dev.http.patch(`${base}/cond.reveal`, { set: { A: '2' } })).status, 200);
    const staleRead = await dev.http.get(`${base}/cond.reveal`, { headers: { 'if-match': tag } });
    assert.equal(staleRead.status, 412, staleRead.text);
    assert.equal(staleRead.body.currentVersion, 2);
    const reveals = async () => (await eventsSettled(server), await admin.http.get(`/v1/orgs/${server.bootstrap.orgId}/events?type=secret.revealed&limit=200`)).body.events
      .filter((e: any) => e.data.name === 'cond.reveal').length;
    const staleReveal = await admin.http.post(`${base}/cond.reveal/reveal`, {}, { headers: { 'if-match': tag } });
    assert.equal(staleReveal.status, 412, staleReveal.text);
    assert.equal(await reveals(), 0);
    const current = (await dev.http.get(`${base}/cond.reveal`)).headers.get('etag')!;
    const revealed = await admin.http.post(`${base}/cond.reveal/reveal`, {}, { headers: { 'if-match': current } });
    assert.equal(revealed.status, 200, revealed.text);
    assert.deepEqual(revealed.body.values, { A: '2' });
    assert.equal(await reveals(), 1);
  });

  it('replaces values as a new version; identical values make none and say so', async () => {
    await create('replace-me', { A: '1', B: '2' });
    const res = await dev.http.put(`${base}/replace-me`, { values: { A: '1', C: '3' } });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.result, 'updated');
    assert.equal(res.body.version, 2);
    assert.deepEqual(res.body.keys, ['A', 'C']);
    assert.equal(res.headers.get('etag'), etag(2, res.body.createdAt));
    assert.ok(res.body.updatedAt >= res.body.createdAt);

    const same = await dev.http.put(`${base}/replace-me`, { values: { C: '3', A: '1' } });
    assert.equal(same.status, 200);
    assert.equal(same.body.result, 'unchanged');
    assert.equal(same.body.version, 2);
    assert.deepEqual(await reveal('replace-me'), { A: '1', C: '3' });

    const missing = await dev.http.put(`${base}/not-there`, { values: { A: '1' } });
    assert.equal(missing.status, 404);
  });

  it('patches: sets some keys, removes others, ignores absent ones, refuses contradictions', async () => {
    await create('patch-me', { A: '1', B: '2', C: '3' });
    const res = await dev.http.patch(`${base}/patch-me`, { set: { A: 'one', D: '4' }, unset: ['B', 'NOT_THERE'] });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.result, 'updated');
    assert.equal(res.body.version, 2);
    assert.deepEqual(res.body.keys, ['A', 'C', 'D']);
    assert.deepEqual(await reveal('patch-me'), { A: 'one', C: '3', D: '4' });

    const same = await dev.http.patch(`${base}/patch-me`, { set: { A: 'one' }, unset: ['B'] });
    assert.equal(same.body.result, 'unchanged');
    assert.equal(same.body.version, 2);

    const both = await dev.http.patch(`${base}/patch-me`, { set: { A: 'x' }, unset: ['A'] });
    assert.equal(both.status, 400);
    assert.equal(both.body.errors[0].pointer, '/unset/0');
    const empty = await dev.http.patch(`${base}/patch-me`, {});
    assert.equal(empty.status, 400);
    const allGone = await dev.http.patch(`${base}/patch-me`, { unset: ['A', 'C', 'D'] });
    assert.equal(allGone.status, 400);
    assert.match(allGone.body.detail, /at least one/);
    const badKey = await dev.http.patch(`${base}/patch-me`, { unset: ['1BAD'] });
    assert.equal(badKey.status, 400);
    assert.equal((await dev.http.get(`${base}/patch-me`)).body.version, 2);
  });

  it('honours If-Match on replace, patch, restore and delete: 412 on a stale version', async () => {
    await create('guarded', { A: '1' });
    const stale = await dev.http.put(`${base}/guarded`, { values: { A: '2' } }, { headers: { 'if-match': '"7"' } });
    assert.equal(stale.status, 412);
    assert.equal(stale.body.code, 'precondition_failed');
    assert.equal(stale.body.currentVersion, 1);

    const ok = await dev.http.put(`${base}/guarded`, { values: { A: '2' } }, { headers: { 'if-match': '"1"' } });
    assert.equal(ok.status, 200);
    // If-Match compares strongly (RFC 9110 §13.1.1): a weak tag never matches.
    const weak = await dev.http.patch(`${base}/guarded`, { set: { B: 'b' } }, { headers: { 'if-match': 'W/"2"' } });
    assert.equal(weak.status, 412);
    const strong = await dev.http.patch(`${base}/guarded`, { set: { B: 'b' } }, { headers: { 'if-match': '"2"' } });
    assert.equal(strong.body.version, 3);
    const any = await dev.http.patch(`${base}/guarded`, { set: { C: 'c' } }, { headers: { 'if-match': '*' } });
    assert.equal(any.body.version, 4);
    // Not an entity tag at all: the request is malformed, and nothing is written.
    const garbage = await dev.http.patch(`${base}/guarded`, { set: { D: 'd' } }, { headers: { 'if-match': 'nonsense' } });
    assert.equal(garbage.status, 400);
    assert.equal((await dev.http.get(`${base}/guarded`)).body.version, 4);
    const restore = await admin.http.post(`${base}/guarded/restore`, { version: 1 }, { headers: { 'if-match': '"3"' } });
    assert.equal(restore.status, 412);
    const del = await dev.http.delete(`${base}/guarded`, { headers: { 'if-match': '"1"' } });
    assert.equal(del.status, 412);
    assert.equal((await dev.http.get(`${base}/guarded`)).status, 200);
  });

  it('honours If-None-Match on every write (RFC 9110 §13.1.2, weak comparison): 412 and nothing changed', async () => {
    await create('unless', { A: '1' });
    const tag = (await dev.http.get(`${base}/unless`)).headers.get('etag')!;
    const writes = [
      (h: Record<string, string>) => dev.http.put(`${base}/unless`, { values: { A: 'put' } }, { headers: h }),
      (h: Record<string, string>) => dev.http.patch(`${base}/unless`, { set: { B: 'patch' } }, { headers: h }),
      (h: Record<string, string>) => admin.http.post(`${base}/unless/restore`, { version: 1 }, { headers: h }),
      (h: Record<string, string>) => dev.http.delete(`${base}/unless`, { headers: h }),
    ];
    for (const write of writes) {
      for (const header of ['*', tag, `W/${tag}`, '"1"', `"9", ${tag}`]) {
        const refused = await write({ 'if-none-match': header });
        assert.equal(refused.status, 412, `${header}: ${refused.text}`);
        assert.equal(refused.body.code, 'precondition_failed');
      }
      assert.equal((await write({ 'if-none-match': 'nonsense' })).status, 400);
    }
    const still = await dev.http.get(`${base}/unless`);
    assert.equal(still.body.version, 1);
    assert.deepEqual(await reveal('unless'), { A: '1' });
    // A tag of another version does not stop the write.
    const other = await dev.http.patch(`${base}/unless`, { set: { B: 'b' } }, { headers: { 'if-none-match': '"7"' } });
    assert.equal(other.status, 200, other.text);
    assert.equal(other.body.version, 2);
  });

  it('honours If-Match when a deleted secret is brought back', async () => {
    await create('undeleted', { A: '1' });
    await dev.http.patch(`${base}/undeleted`, { set: { A: '2' } });
    assert.equal((await dev.http.delete(`${base}/undeleted`)).status, 204);
    const stale = await admin.http.post(`${base}/undeleted/restore`, {}, { headers: { 'if-match': '"1"' } });
    assert.equal(stale.status, 412, stale.text);
    assert.equal(stale.body.currentVersion, 2);
    assert.equal((await dev.http.get(`${base}/undeleted`)).body.code, 'secret_deleted');
    const restored = await admin.http.post(`${base}/undeleted/restore`, {}, { headers: { 'if-match': '"2"' } });
    assert.equal(restored.status, 200, restored.text);
    assert.equal(restored.body.result, 'restored');
    assert.equal(restored.headers.get('etag'), etag(2, restored.body.createdAt));
  });

  it('an ETag read before a permanent delete does not match the secret created again under its name', async () => {
    await create('reborn', { A: 'first life' });
    const old = await dev.http.get(`${base}/reborn`);
    const oldTag = old.headers.get('etag')!;
    assert.equal((await admin.http.delete(`${base}/reborn?permanent=true`)).status, 204);
    await create('reborn', { A: 'second life' });
    const now = await dev.http.get(`${base}/reborn`);
    assert.equal(now.body.version, 1);
    assert.notEqual(now.headers.get('etag'), oldTag);

    for (const write of [
      () => dev.http.put(`${base}/reborn`, { values: { A: 'overwritten' } }, { headers: { 'if-match': oldTag } }),
      () => dev.http.patch(`${base}/reborn`, { set: { B: 'b' } }, { headers: { 'if-match': oldTag } }),
      () => dev.http.delete(`${base}/reborn`, { headers: { 'if-match': oldTag } }),
    ]) {
      const stale = await write();
      assert.equal(stale.status, 412, stale.text);
      assert.match(stale.body.detail, /deleted permanently and created again/);
      assert.ok(stale.body.detail.includes(now.headers.get('etag')!));
    }
    assert.equal((await dev.http.get(`${base}/reborn`)).body.version, 1);
    assert.deepEqual(await reveal('reborn'), { A: 'second life' });
    // The current ETag, and a bare version (which does not tell the two apart), still hold.
    const fresh = await dev.http.patch(`${base}/reborn`, { set: { B: 'b' } }, { headers: { 'if-match': now.headers.get('etag')! } });
    assert.equal(fresh.status, 200, fresh.text);
    const bare = await dev.http.patch(`${base}/reborn`, { set: { C: 'c' } }, { headers: { 'if-match': '"2"' } });
    assert.equal(bare.status, 200, bare.text);
  });

  it('lists versions newest first with who and when, reads one, and restores an earlier one as a new version', async () => {
    // Values distinctive enough that no id or cursor in a response can contain them by chance.
    await create('versioned', { K: 'value-one-Zq8' });
    await dev.http.put(`${base}/versioned`, { values: { K: 'value-two-Zq8' } });
    await admin.http.put(`${base}/versioned`, { values: { K: 'value-three-Zq8', L: 'x' } });

    const list = await dev.http.get(`${base}/versioned/versions?limit=2`);
    assert.equal(list.status, 200);
    assert.deepEqual(list.body.versions.map((v: any) => v.version), [3, 2]);
    assert.equal(list.body.versions[0].createdBy, admin.clientId);
    assert.equal(list.body.versions[1].createdBy, dev.clientId);
    assert.deepEqual(list.body.versions[0].keys, ['K', 'L']);
    const rest = await dev.http.get(`${base}/versioned/versions?limit=2&cursor=${list.body.nextCursor}`);
    assert.deepEqual(rest.body.versions.map((v: any) => v.version), [1]);
    assert.equal(rest.body.nextCursor, null);
    assert.ok(!list.text.includes('value-three-Zq8') && !rest.text.includes('value-one-Zq8'));

    const one = await dev.http.get(`${base}/versioned/versions/1`);
    assert.equal(one.status, 200);
    assert.deepEqual(one.body.keys, ['K']);
    assert.equal((await dev.http.get(`${base}/versioned/versions/9`)).status, 404);

    const restored = await admin.http.post(`${base}/versioned/restore`, { version: 1 });
    assert.equal(restored.status, 200, restored.text);
    assert.equal(restored.body.result, 'updated');
    assert.equal(restored.body.version, 4);
    assert.equal(restored.headers.get('etag'), etag(4, restored.body.createdAt));
    assert.deepEqual(await reveal('versioned'), { K: 'value-one-Zq8' });
    assert.deepEqual(await reveal('versioned', 2), { K: 'value-two-Zq8' });
    const again = await admin.http.post(`${base}/versioned/restore`, { version: 4 });
    assert.equal(again.body.result, 'unchanged');
    assert.equal((await admin.http.post(`${base}/versioned/restore`, { version: 12 })).status, 404);
  });

  it('reveal answers no-store, names who revealed which version in an event, and 404s an unknown version', async () => {
    await create('revealed', { TOKEN: 't1' });
    await dev.http.put(`${base}/revealed`, { values: { TOKEN: 't2' } });
    const res = await admin.http.post(`${base}/revealed/reveal`, { version: 1 });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('cache-control'), 'no-store');
    assert.deepEqual(res.body, { name: 'revealed', version: 1, values: { TOKEN: 't1' } });
    const bare = await admin.http.request('POST', `${base}/revealed/reveal`);
    assert.equal(bare.status, 200, bare.text);
    assert.equal(bare.body.version, 2);
    assert.equal((await admin.http.post(`${base}/revealed/reveal`, { version: 3 })).status, 404);

    // On PostgreSQL an event is listed once every transaction older than its own has ended (commit
    // order); another test's open transaction can hold it back for a moment.
    const mine = await eventually('both reveal events', async () => {
      const events = await admin.http.get(`/v1/orgs/default/events?type=secret.revealed&limit=200`);
      const found = events.body.events.filter((e: any) => e.data.name === 'revealed');
      return found.length >= 2 ? found : undefined;
    });
    assert.deepEqual(mine.map((e: any) => [e.actor, e.data.version]), [[admin.clientId, 1], [admin.clientId, 2]]);
    assert.ok(mine.every((e: any) => typeof e.requestId === 'string'));
  });

  it('delete hides a secret and keeps its name; an admin restores it as it was', async () => {
    await create('doomed', { A: '1' });
    await dev.http.put(`${base}/doomed`, { values: { A: '2' } });
    const del = await dev.http.delete(`${base}/doomed`);
    assert.equal(del.status, 204);

    const get = await dev.http.get(`${base}/doomed`);
    assert.equal(get.status, 404);
    assert.equal(get.body.code, 'secret_deleted');
    assert.ok(get.body.restorableUntil > new Date().toISOString());
    const listed = await dev.http.get(`${base}?prefix=doomed`);
    assert.deepEqual(listed.body.secrets, []);
    const deleted = await dev.http.get(`${base}?prefix=doomed&deleted=true`);
    assert.deepEqual(deleted.body.secrets.map((s: any) => [s.name, s.version]), [['doomed', 2]]);
    assert.ok(deleted.body.secrets[0].deletedAt && deleted.body.secrets[0].restorableUntil);

    assert.equal((await dev.http.post(base, { secrets: [{ name: 'doomed', values: { A: 'x' } }] })).status, 409);
    assert.equal((await dev.http.put(base, { secrets: [{ name: 'doomed', values: { A: 'x' } }] })).body.code, 'secret_deleted');
    assert.equal((await dev.http.put(`${base}/doomed`, { values: { A: 'x' } })).status, 404);
    assert.equal((await dev.http.delete(`${base}/doomed`)).status, 404);
    // Restoring one of its versions is not what a deleted secret takes: the problem says which restore is.
    const aVersion = await admin.http.post(`${base}/doomed/restore`, { version: 1 });
    assert.equal(aVersion.status, 404, aVersion.text);
    assert.equal(aVersion.body.code, 'secret_deleted');
    assert.match(aVersion.body.detail, /restored whole, as it was: send this restore without `version`/);
    assert.deepEqual(aVersion.body.errors.map((e: { pointer: string }) => e.pointer), ['/version']);

    const restored = await admin.http.post(`${base}/doomed/restore`);
    assert.equal(restored.status, 200, restored.text);
    assert.equal(restored.body.result, 'restored');
    assert.equal(restored.body.version, 2);
    assert.equal(restored.body.deletedAt, undefined);
    assert.deepEqual(await reveal('doomed'), { A: '2' });
    const notDeleted = await admin.http.post(`${base}/doomed/restore`, {});
    assert.equal(notDeleted.status, 409);
    assert.equal(notDeleted.body.code, 'secret_not_deleted');
  });

  it('permanent delete destroys every version and frees the name', async () => {
    await create('gone', { A: 'first-life' });
    await dev.http.put(`${base}/gone`, { values: { A: 'second' } });
    const id = (await server.core.db.selectFrom('secrets').select('id').where('name', '=', 'gone').executeTakeFirstOrThrow()).id;
    assert.equal((await admin.http.delete(`${base}/gone?permanent=true`)).status, 204);
    const versions = await server.core.db.selectFrom('secret_versions').select('version').where('secret_id', '=', id).execute();
    assert.deepEqual(versions, []);
    assert.equal((await admin.http.get(`${base}/gone`)).status, 404);
    assert.equal((await admin.http.post(`${base}/gone/restore`)).status, 404);

    await create('gone', { A: 'new-life' });
    assert.equal((await dev.http.get(`${base}/gone`)).body.version, 1);
    // Also on a secret that was deleted softly first.
    assert.equal((await dev.http.delete(`${base}/gone`)).status, 204);
    assert.equal((await admin.http.delete(`${base}/gone?permanent=true`)).status, 204);
    assert.equal((await dev.http.get(`${base}?prefix=gone&deleted=true`)).body.secrets.length, 0);

    await eventsSettled(server);
    const events = await admin.http.get(`/v1/orgs/default/events?type=secret.*&limit=200`);
    const types = events.body.events.filter((e: any) => e.data.name === 'gone').map((e: any) => e.type);
    assert.deepEqual(types, ['secret.created', 'secret.updated', 'secret.destroyed', 'secret.created', 'secret.deleted', 'secret.destroyed']);
  });

  it('lists by name with cursor pagination and a case-sensitive prefix filter', async () => {
    const names = ['app-a', 'app-b', 'app-c', 'app.d', 'app_e', 'App-F', 'apple'];
    assert.equal((await dev.http.post(base, { secrets: names.map((name) => ({ name, values: { K: name } })) })).status, 201);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res: any = await dev.http.get(`${base}?prefix=app&limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      assert.equal(res.status, 200);
      assert.ok(res.body.secrets.length <= 2);
      for (const s of res.body.secrets) assert.deepEqual(Object.keys(s).sort(), ['createdAt', 'keys', 'name', 'updatedAt', 'version']);
      seen.push(...res.body.secrets.map((s: any) => s.name));
      cursor = res.body.nextCursor;
      pages++;
    } while (cursor !== null && pages < 10);
    assert.deepEqual([...seen].sort(), names.filter((n) => n.startsWith('app')).sort());
    assert.equal(new Set(seen).size, seen.length);
    assert.equal((await dev.http.get(`${base}?prefix=app-&limit=200`)).body.secrets.length, 3);
    assert.equal((await dev.http.get(`${base}?cursor=%25%25`)).status, 400);
  });
});

describe('secrets retention', () => {
  let server: TestServer;
  before(async () => { server = await startServer({ env: { SLIPWAY_SECRET_RETENTION_DAYS: '0' } }); });
  after(async () => { await server.close(); });

  it('a deletion past its retention window is gone: not restorable, not listed, its name free, purged', async () => {
    const http = server.owner.http;
    assert.equal((await http.post(base, { secrets: [{ name: 'short', values: { A: '1' } }, { name: 'shorter', values: { A: '1' } }] })).status, 201);
    assert.equal((await http.delete(`${base}/short`)).status, 204);
    assert.equal((await http.delete(`${base}/shorter`)).status, 204);
    assert.equal((await http.post(`${base}/short/restore`)).status, 404);
    assert.deepEqual((await http.get(`${base}?deleted=true`)).body.secrets, []);

    // Writing the name purges the old secret on the spot.
    const again = await http.put(base, { secrets: [{ name: 'short', values: { A: '2' } }] });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.body.secrets[0].result, 'created');

    // Another organization's deletion past retention.
    const other = await server.createOrg();
    const otherOwner = await server.actor(other.id, 'owner');
    assert.equal((await otherOwner.http.post(`/v1/orgs/${other.id}/secrets`, { secrets: [{ name: 'shorter', values: { A: '1' } }] })).status, 201);
    assert.equal((await otherOwner.http.delete(`/v1/orgs/${other.id}/secrets/shorter`)).status, 204);

    // The periodic purge removes the rest, an organization's at a time, each event in its own log.
    assert.equal(await server.core.secrets.purgeExpired(), 2);
    assert.equal(await server.core.secrets.purgeExpired(), 0);
    const rows = await server.core.db.selectFrom('secrets').select('name').where('name', 'in', ['short', 'shorter']).execute();
    assert.deepEqual(rows.map((r) => r.name), ['short']);
    await eventsSettled(server);
    const events = await http.get(`/v1/orgs/default/events?type=secret.purged`);
    assert.deepEqual(events.body.events.map((e: any) => [e.data.name, e.actor]).sort(), [['short', 'system'], ['shorter', 'system']]);
    const others = await otherOwner.http.get(`/v1/orgs/${other.id}/events?type=secret.purged`);
    assert.deepEqual(others.body.events.map((e: any) => [e.data.name, e.actor]), [['shorter', 'system']]);
  });
});
