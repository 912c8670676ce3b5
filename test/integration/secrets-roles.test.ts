// Who may do what with secrets, cell by cell: viewer+ reads metadata, developer+ writes and
// deletes softly, admin/owner reveal, restore and delete permanently, a runner does none of it.
// Every route answers 404 to a caller from another organization, whatever its role.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Role } from '../../src/modules/auth/roles.js';
import { startServer, type Actor, type HttpClient, type HttpResult, type TestServer } from '../support/harness.js';

type Least = 'viewer' | 'developer' | 'admin';

interface RouteCase {
  label: string;
  least: Least;
  success: number;
  /** Prepares a fresh secret (through the owner) and calls the route as `http`. */
  call: (http: HttpClient, org: string, name: string) => Promise<HttpResult>;
  /** The state the secret must be in beforehand. */
  setup?: 'deleted';
}

const RANK: Record<Role, number> = { runner: -1, viewer: 1, developer: 2, admin: 3, owner: 4 };
const ROLES: Role[] = ['viewer', 'developer', 'admin', 'owner', 'runner'];

const path = (org: string, name = '') => `/v1/orgs/${org}/secrets${name ? `/${name}` : ''}`;

const CASES: RouteCase[] = [
  { label: 'GET list', least: 'viewer', success: 200, call: (h, o) => h.get(path(o)) },
  { label: 'GET one', least: 'viewer', success: 200, call: (h, o, n) => h.get(path(o, n)) },
  { label: 'GET versions', least: 'viewer', success: 200, call: (h, o, n) => h.get(`${path(o, n)}/versions`) },
  { label: 'GET version', least: 'viewer', success: 200, call: (h, o, n) => h.get(`${path(o, n)}/versions/1`) },
  { label: 'POST bulk create', least: 'developer', success: 201, call: (h, o, n) => h.post(path(o), { secrets: [{ name: `${n}-new`, values: { A: '1' } }] }) },
  { label: 'PUT bulk upsert', least: 'developer', success: 200, call: (h, o, n) => h.put(path(o), { secrets: [{ name: n, values: { A: '2' } }] }) },
  { label: 'PUT replace', least: 'developer', success: 200, call: (h, o, n) => h.put(path(o, n), { values: { A: '2' } }) },
  { label: 'PATCH', least: 'developer', success: 200, call: (h, o, n) => h.patch(path(o, n), { set: { B: '2' } }) },
  { label: 'DELETE', least: 'developer', success: 204, call: (h, o, n) => h.delete(path(o, n)) },
  { label: 'DELETE permanent', least: 'admin', success: 204, call: (h, o, n) => h.delete(`${path(o, n)}?permanent=true`) },
  { label: 'POST reveal', least: 'admin', success: 200, call: (h, o, n) => h.post(`${path(o, n)}/reveal`, {}) },
  { label: 'POST restore version', least: 'admin', success: 200, call: (h, o, n) => h.post(`${path(o, n)}/restore`, { version: 1 }) },
  { label: 'POST restore (undelete)', least: 'admin', success: 200, setup: 'deleted', call: (h, o, n) => h.post(`${path(o, n)}/restore`) },
];

const allowed = (role: Role, least: Least) => role !== 'runner' && RANK[role] >= RANK[least];

describe('secrets role matrix', () => {
  let server: TestServer;
  let orgId: string;
  const actors = new Map<Role, Actor>();
  let outsider: Actor;
  let counter = 0;

  before(async () => {
    server = await startServer();
    const org = await server.createOrg();
    orgId = org.id;
    for (const role of ROLES) actors.set(role, await server.actor(orgId, role));
    outsider = await server.actor((await server.createOrg()).id, 'owner');
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  /** A fresh secret at version 2 (so restoring version 1 makes a change), made by the instance owner. */
  async function freshSecret(state?: 'deleted'): Promise<string> {
    const name = `cell-${++counter}`;
    assert.equal((await server.owner.http.post(path(orgId), { secrets: [{ name, values: { A: '1' } }] })).status, 201);
    assert.equal((await server.owner.http.put(path(orgId, name), { values: { A: 'x' } })).status, 200);
    if (state === 'deleted') assert.equal((await server.owner.http.delete(path(orgId, name))).status, 204);
    return name;
  }

  for (const c of CASES) {
    it(`${c.label}: ${c.least} and above, never a runner`, async () => {
      for (const role of ROLES) {
        const name = await freshSecret(c.setup);
        const res = await c.call(actors.get(role)!.http, orgId, name);
        if (allowed(role, c.least)) {
          assert.equal(res.status, c.success, `${role}: ${res.text}`);
        } else {
          assert.equal(res.status, 403, `${role}: ${res.text}`);
          assert.equal(res.body.code, 'forbidden');
        }
      }
    });
  }

  it('a refused caller changes nothing', async () => {
    const name = await freshSecret();
    for (const role of ['viewer', 'runner'] as Role[]) {
      const http = actors.get(role)!.http;
      await http.put(path(orgId, name), { values: { A: 'hacked' } });
      await http.patch(path(orgId, name), { set: { A: 'hacked' } });
      await http.delete(path(orgId, name));
    }
    await actors.get('developer')!.http.delete(`${path(orgId, name)}?permanent=true`);
    const res = await server.owner.http.get(path(orgId, name));
    assert.equal(res.status, 200);
    assert.equal(res.body.version, 2);
  });

  for (const c of CASES) {
    it(`${c.label}: another organization's caller gets 404 and changes nothing`, async () => {
      const name = await freshSecret(c.setup);
      const before = await server.core.db.selectFrom('secrets').selectAll().where('name', '=', name).executeTakeFirstOrThrow();
      for (const org of [orgId, (await server.core.orgs.find(orgId))!.slug]) {
        const res = await c.call(outsider.http, org, name);
        assert.equal(res.status, 404, res.text);
        assert.ok(!res.text.includes('"values"'));
      }
      const after = await server.core.db.selectFrom('secrets').selectAll().where('name', '=', name).executeTakeFirstOrThrow();
      assert.deepEqual(after, before);
    });
  }

  it('the same name in two organizations is two secrets', async () => {
    const theirs = outsider.orgId;
    assert.equal((await outsider.http.post(path(theirs), { secrets: [{ name: 'shared-name', values: { A: 'theirs' } }] })).status, 201);
    assert.equal((await actors.get('developer')!.http.post(path(orgId), { secrets: [{ name: 'shared-name', values: { A: 'ours' } }] })).status, 201);
    assert.deepEqual((await actors.get('admin')!.http.post(`${path(orgId, 'shared-name')}/reveal`, {})).body.values, { A: 'ours' });
    assert.deepEqual((await outsider.http.post(`${path(theirs, 'shared-name')}/reveal`, {})).body.values, { A: 'theirs' });
    assert.equal((await actors.get('owner')!.http.get(path(theirs, 'shared-name'))).status, 404);
  });
});
