// Organizations through the API: a caller sees its own, an instance administrator sees and creates
// any; owners rename and re-slug theirs.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Actor, HttpResult, TestServer } from '../support/harness.js';
import { assertOneChain, eventsSettled } from '../support/deployments.js';
import { startWithOrg, type OrgFixture } from '../support/org-fixture.js';
import { assertProblem } from '../support/problems.js';

describe('organizations', () => {
  let fixture: OrgFixture;
  let server: TestServer;
  let orgId: string;
  let slug: string;
  let owner: Actor;
  let admin: Actor;

  before(async () => {
    fixture = await startWithOrg();
    ({ server, orgId, slug, owner, admin } = fixture);
  });
  after(() => fixture.close());

  it('lists only the caller\'s own organization for a member', async () => {
    await server.createOrg();
    for (const role of ['viewer', 'developer', 'runner'] as const) {
      const member = await server.actor(orgId, role);
      const res = await member.http.get('/v1/orgs');
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(res.body, {
        orgs: [{ id: orgId, slug, name: `Test ${slug}`, createdAt: res.body.orgs[0].createdAt, updatedAt: res.body.orgs[0].updatedAt }],
        nextCursor: null,
      });
    }
  });

  it('lists every organization for the instance administrator, page by page', async () => {
    for (let i = 0; i < 4; i++) await server.createOrg();
    const seen: string[] = [];
    let cursor: string | null = null;
    let lastPage: HttpResult | null = null;
    do {
      const res: HttpResult = await server.owner.http.get(`/v1/orgs?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      assert.equal(res.status, 200, res.text);
      assert.ok(res.body.orgs.length >= 1 && res.body.orgs.length <= 2);
      seen.push(...res.body.orgs.map((o: { id: string }) => o.id));
      cursor = res.body.nextCursor;
      lastPage = res;
    } while (cursor !== null);
    assert.equal(lastPage!.body.nextCursor, null);
    const all = await server.core.orgs.list({ orgId: null, all: true }, { limit: 200 });
    assert.ok(all.items.length >= 6);
    assert.deepEqual(seen, all.items.map((o) => o.id));
    assert.ok(seen.includes(server.bootstrap.orgId) && seen.includes(orgId));

    const bad = await server.owner.http.get('/v1/orgs?cursor=not-a-cursor');
    assert.equal(bad.status, 400);
    assert.equal(bad.body.code, 'invalid_cursor');
    const tooMany = await server.owner.http.get('/v1/orgs?limit=201');
    assert.equal(tooMany.status, 400);
    assert.equal(tooMany.body.errors[0].pointer, '/query/limit');
  });

  it('gets an organization by id and by slug, and hides other organizations', async () => {
    const byId = await admin.http.get(`/v1/orgs/${orgId}`);
    const bySlug = await admin.http.get(`/v1/orgs/${slug}`);
    assert.equal(byId.status, 200);
    assert.deepEqual(bySlug.body, byId.body);
    assert.equal(byId.body.slug, slug);
    assert.match(byId.body.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

    for (const other of [server.bootstrap.orgId, 'default', 'no-such-org', 'org_01jzzzzzzzzzzzzzzzzzzzzzzz']) {
      const res = await admin.http.get(`/v1/orgs/${other}`);
      assert.equal(res.status, 404, `${other}: ${res.text}`);
      assert.equal(res.body.code, 'organization_not_found');
    }
    assert.equal((await server.owner.http.get(`/v1/orgs/${slug}`)).body.id, orgId);
  });

  it('creates organizations for the instance administrator only', async () => {
    const res = await server.owner.http.post('/v1/orgs', { slug: 'acme', name: 'Acme Inc.' });
    assert.equal(res.status, 201, res.text);
    assert.match(res.body.id, /^org_/);
    assert.deepEqual({ slug: res.body.slug, name: res.body.name }, { slug: 'acme', name: 'Acme Inc.' });
    assert.equal(res.body.updatedAt, res.body.createdAt);
    assert.equal((await server.owner.http.get('/v1/orgs/acme')).body.id, res.body.id);

    const taken = await server.owner.http.post('/v1/orgs', { slug: 'acme', name: 'Another Acme' });
    assert.equal(taken.status, 409);
    assert.equal(taken.body.code, 'org_slug_taken');
    assert.deepEqual(taken.body.conflicts, [{ pointer: '/slug', slug: 'acme' }]);

    for (const bad of ['Acme', '-acme', 'acme-', 'ac_me', 'a'.repeat(64), '']) {
      const invalid = await server.owner.http.post('/v1/orgs', { slug: bad, name: 'Bad' });
      assert.equal(invalid.status, 400, `${bad}: ${invalid.text}`);
      assert.deepEqual(invalid.body.errors.map((e: { pointer: string }) => e.pointer), ['/slug']);
    }
    const noName = await server.owner.http.post('/v1/orgs', { slug: 'nameless' });
    assert.equal(noName.status, 400);
    assert.deepEqual(noName.body.errors.map((e: { pointer: string }) => e.pointer), ['/name']);
    // A name is read in lists: not blank, not padded, no control characters or reordering marks.
    for (const name of ['   ', ' Acme', 'Acme ', 'Acme\u0007\u001b[2J', 'Acme \u202egnp.exe', '\u200b', '\u3164', 'Acme\u200b', '\u200fAcme', '\u200d']) {
      const invalid = await server.owner.http.post('/v1/orgs', { slug: 'padded', name });
      assert.equal(invalid.status, 400, `${JSON.stringify(name)}: ${invalid.text}`);
      assert.deepEqual(invalid.body.errors.map((e: { pointer: string }) => e.pointer), ['/name']);
    }
    for (const [slug, name] of [['family', '\u{1F468}\u200d\u{1F469}\u200d\u{1F467} Family'], ['kabushiki', '日本 株式会社']]) {
      const named = await server.owner.http.post('/v1/orgs', { slug, name });
      assert.equal(named.status, 201, named.text);
      assert.equal(named.body.name, name);
    }

    const refused = await owner.http.post('/v1/orgs', { slug: 'by-an-owner', name: 'Nope' });
    assert.equal(refused.status, 403);
    assert.equal(refused.body.code, 'forbidden');
    assert.equal((await server.owner.http.get('/v1/orgs/by-an-owner')).status, 404);
  });

  it('lets an owner rename an organization and change its slug, and not an admin', async () => {
    const org = await server.createOrg();
    const orgOwner = await server.actor(org.id, 'owner');
    const orgAdmin = await server.actor(org.id, 'admin');

    const denied = await orgAdmin.http.patch(`/v1/orgs/${org.id}`, { name: 'By an admin' });
    assert.equal(denied.status, 403);
    assert.equal((await orgAdmin.http.get(`/v1/orgs/${org.id}`)).body.name, org.name);

    const renamed = await orgOwner.http.patch(`/v1/orgs/${org.slug}`, { name: 'Renamed' });
    assert.equal(renamed.status, 200, renamed.text);
    assert.equal(renamed.body.name, 'Renamed');
    assert.equal(renamed.body.slug, org.slug);
    assert.ok(renamed.body.updatedAt >= org.updatedAt);

    const moved = await orgOwner.http.patch(`/v1/orgs/${org.id}`, { slug: 'moved-here' });
    assert.equal(moved.status, 200, moved.text);
    assert.equal(moved.body.slug, 'moved-here');
    assert.equal((await orgOwner.http.get('/v1/orgs/moved-here')).body.id, org.id);
    assert.equal((await orgOwner.http.get(`/v1/orgs/${org.slug}`)).status, 404);

    const clash = await orgOwner.http.patch(`/v1/orgs/${org.id}`, { slug: slug });
    assert.equal(clash.status, 409);
    assert.equal(clash.body.code, 'org_slug_taken');
    assert.deepEqual(clash.body.conflicts, [{ pointer: '/slug', slug }]);

    const empty = await orgOwner.http.patch(`/v1/orgs/${org.id}`, {});
    assert.equal(empty.status, 400);
    const badSlug = await orgOwner.http.patch(`/v1/orgs/${org.id}`, { slug: 'Not A Slug' });
    assert.equal(badSlug.status, 400);
    assert.deepEqual(badSlug.body.errors.map((e: { pointer: string }) => e.pointer), ['/slug']);

    // The slug it gave up stays its own: another organization cannot take it (requests still sent
    // to it would reach that one), by a rename or at creation; the organization itself can.
    const other = await server.createOrg();
    const otherOwner = await server.actor(other.id, 'owner');
    const squat = await otherOwner.http.patch(`/v1/orgs/${other.id}`, { slug: org.slug });
    assert.equal(squat.status, 409, squat.text);
    assert.equal(squat.body.code, 'org_slug_taken');
    assert.deepEqual(squat.body.conflicts, [{ pointer: '/slug', slug: org.slug }]);
    // The instance administrator, who sees every organization, is told why, by whom and since when.
    const byAdmin = await server.owner.http.post('/v1/orgs', { slug: org.slug, name: 'Squatter' });
    assert.equal(byAdmin.status, 409, byAdmin.text);
    assert.deepEqual(byAdmin.body.conflicts, [{ pointer: '/slug', slug: org.slug, organization: org.id }]);
    assert.match(byAdmin.body.detail, new RegExp(`"${org.slug}" belonged to the organization ${org.id} until .* stays reserved to it`));
    assert.equal((await orgOwner.http.get(`/v1/orgs/${org.slug}`)).status, 404);
    const back = await orgOwner.http.patch(`/v1/orgs/${org.id}`, { slug: org.slug });
    assert.equal(back.status, 200, back.text);
    assert.equal((await orgOwner.http.patch(`/v1/orgs/${org.id}`, { slug: 'moved-again' })).status, 200);
    assert.equal((await orgOwner.http.patch(`/v1/orgs/${org.id}`, { slug: 'moved-here' })).status, 200, 'a slug given up twice is still its own');

    // Slugs given up stay reserved, up to ten: not a way to hold any number of names.
    const hoarder = await server.createOrg();
    const hoarderOwner = await server.actor(hoarder.id, 'owner');
    for (let i = 0; i < 10; i++) assert.equal((await hoarderOwner.http.patch(`/v1/orgs/${hoarder.id}`, { slug: `${hoarder.slug}-${i}` })).status, 200);
    const eleventh = assertProblem(await hoarderOwner.http.patch(`/v1/orgs/${hoarder.id}`, { slug: `${hoarder.slug}-x` }), 400, 'limit_exceeded');
    assert.match(String(eleventh.detail), /keeps 10 slugs it gave up reserved to itself .*Take one of those back/);
    assert.deepEqual((eleventh.errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/slug']);
    // Taking one back frees its place.
    assert.equal((await hoarderOwner.http.patch(`/v1/orgs/${hoarder.id}`, { slug: hoarder.slug })).status, 200);

    // Another organization's owner does not even see it.
    assert.equal((await owner.http.patch(`/v1/orgs/${org.id}`, { name: 'Hijacked' })).status, 404);
    // The instance administrator acts as owner everywhere.
    assert.equal((await server.owner.http.patch(`/v1/orgs/${org.id}`, { name: 'By the instance admin' })).status, 200);
  });

  it('tells the owner of another organization only that a slug is taken, not whether or when an organization gave it up', async () => {
    const gone = await server.createOrg();
    const goneOwner = await server.actor(gone.id, 'owner');
    assert.equal((await goneOwner.http.patch(`/v1/orgs/${gone.id}`, { slug: `${gone.slug}-now` })).status, 200);
    const other = await server.createOrg();
    const otherOwner = await server.actor(other.id, 'owner');
    const given = await otherOwner.http.patch(`/v1/orgs/${other.id}`, { slug: gone.slug });
    const held = await otherOwner.http.patch(`/v1/orgs/${other.id}`, { slug: `${gone.slug}-now` });
    for (const [res, taken] of [[given, gone.slug], [held, `${gone.slug}-now`]] as const) {
      assert.equal(res.status, 409, res.text);
      assert.equal(res.body.code, 'org_slug_taken');
      assert.deepEqual(res.body.conflicts, [{ pointer: '/slug', slug: taken }]);
    }
    // One answer for a slug in use and for one given up: nothing says when, or that it was given up.
    assert.equal(given.body.detail.replace(gone.slug, 'S'), held.body.detail.replace(`${gone.slug}-now`, 'S'));
    assert.doesNotMatch(given.body.detail, /\d{4}-\d{2}-\d{2}T/);
  });

  it('keeps a slug given up reserved to its organization while others race for it, and every slug it held through concurrent changes', async () => {
    for (let round = 0; round < 4; round++) {
      const org = await server.createOrg();
      const orgOwner = await server.actor(org.id, 'owner');
      // Its slug changes while five requests of the instance administrator try to take the old one.
      const [moved, ...squats] = await Promise.all([
        orgOwner.http.patch(`/v1/orgs/${org.id}`, { slug: `${org.slug}-moved` }),
        ...Array.from({ length: 5 }, (_, i) => server.owner.http.post('/v1/orgs', { slug: org.slug, name: `Squatter ${i}` })),
      ]);
      assert.equal(moved.status, 200, moved.text);
      assert.deepEqual(squats.map((r) => r.status), [409, 409, 409, 409, 409], `round ${round}: ${squats.map((r) => r.text).join(' ')}`);

      // Eight changes of one organization's slug at once (nine given up in all, within the ten it
      // may keep): every slug it gave up stays its own, and each event starts from the slug the
      // change before it left.
      const changes = await Promise.all(Array.from({ length: 8 }, (_, i) => orgOwner.http.patch(`/v1/orgs/${org.id}`, { slug: `${org.slug}-${i}` })));
      assert.deepEqual(changes.map((r) => r.status), Array(8).fill(200));
      const held = [`${org.slug}-moved`, ...changes.map((r) => r.body.slug as string)];
      for (const taken of held) assert.equal((await server.owner.http.post('/v1/orgs', { slug: taken, name: 'Squatter' })).status, 409, taken);
      await eventsSettled(server);
      const events = (await server.owner.http.get(`/v1/orgs/${org.id}/events?type=organization.updated&limit=100`)).body.events as any[];
      const slugs = events.filter((e) => e.data.changed.includes('slug')).map((e): [string, string] => [e.data.from.slug, e.data.to.slug]);
      assert.equal(slugs.length, 9);
      assertOneChain(slugs, org.slug);
    }
  });

  it('asks for a token on every organization route', async () => {
    for (const [method, path] of [['GET', '/v1/orgs'], ['POST', '/v1/orgs'], ['GET', `/v1/orgs/${slug}`], ['PATCH', `/v1/orgs/${slug}`]] as const) {
      const res = await server.http().request(method, path, method === 'GET' ? {} : { body: { name: 'x' } });
      assert.equal(res.status, 401, `${method} ${path}`);
      assert.match(res.headers.get('www-authenticate') ?? '', /^Bearer /);
    }
  });
});
