// Webhooks: managing them, and deliveries to a real HTTP receiver, checked with the Standard
// Webhooks reference library: signatures, commit order, retries with the same id, disabling one
// that keeps failing and resuming where it stopped, secret rotation, and what never leaves.
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Webhook as Verifier } from 'standardwebhooks';
import { sql } from 'kysely';
import { rawDatabaseBytes, startServer, TEST_DB, type Actor, type TestServer } from '../support/harness.js';
import { eventsOf } from '../support/deployments.js';

interface Received {
  headers: http.IncomingHttpHeaders;
  body: string;
  event: any;
}

/** An HTTP server that records each POST and answers with what `answer` says (200 by default). */
async function startReceiver() {
  const received: Received[] = [];
  let answer: (r: Received, n: number) => number = () => 200;
  let before: () => Promise<void> = async () => {};
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const r = { headers: req.headers, body, event: JSON.parse(body) };
      received.push(r);
      await before();
      res.statusCode = answer(r, received.length);
      res.end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/t0ken-in-path?q=1`,
    received,
    answerWith(f: typeof answer) { answer = f; },
    /** Runs before each answer, which waits for it. */
    onRequest(f: () => Promise<void>) { before = f; },
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, ms = 30_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const verify = (secret: string, r: Received) => new Verifier(secret).verify(r.body, {
  'webhook-id': String(r.headers['webhook-id']), 'webhook-timestamp': String(r.headers['webhook-timestamp']), 'webhook-signature': String(r.headers['webhook-signature']),
});

describe('webhooks', () => {
  let server: TestServer;
  before(async () => { server = await startServer({ env: { SLIPWAY_WEBHOOK_ALLOW_PRIVATE: 'true', SLIPWAY_MAX_WEBHOOKS_PER_ORG: '3' } }); });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  async function freshOrg(): Promise<{ orgId: string; admin: Actor }> {
    const org = await server.createOrg();
    return { orgId: org.id, admin: await server.actor(org.id, 'admin') };
  }

  it('creates, reads, lists, changes and deletes webhooks; the secret is shown once, and events keep only the URL\'s origin', async () => {
    const { orgId, admin } = await freshOrg();
    const url = 'https://hooks.example.com/services/T000/B000/s3cr3t-path-token';
    const created = await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url, description: 'chat', events: ['deployment.*', 'secret.created'] });
    assert.equal(created.status, 201, created.text);
    assert.equal(created.headers.get('cache-control'), 'no-store');
    const hook = created.body;
    assert.match(hook.id, /^whk_[0-9a-z]{26}$/);
    assert.match(hook.secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
    assert.equal(created.headers.get('location'), `${server.config.baseUrl}/v1/orgs/${orgId}/webhooks/${hook.id}`);
    assert.deepEqual({ url: hook.url, events: hook.events, active: hook.active, state: hook.state, lastAttempt: hook.lastAttempt }, {
      url, events: ['deployment.*', 'secret.created'], active: true, state: 'active', lastAttempt: null,
    });

    const got = await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}`);
    assert.equal(got.status, 200);
    assert.equal(got.body.secret, undefined);
    const { secret, ...shown } = hook;
    assert.ok(secret);
    assert.deepEqual(got.body, shown);

    // A URL is kept, and shown, as the address deliveries go to.
    const second = (await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url: 'HTTPS://Other.Example.COM:443/a/../in' })).body;
    assert.equal(second.url, 'https://other.example.com/in');
    const first = await admin.http.get(`/v1/orgs/${orgId}/webhooks?limit=1`);
    assert.deepEqual(first.body.webhooks.map((w: any) => w.id), [hook.id]);
    const rest = await admin.http.get(`/v1/orgs/${orgId}/webhooks?limit=1&cursor=${first.body.nextCursor}`);
    assert.deepEqual(rest.body.webhooks.map((w: any) => w.id), [second.id]);
    assert.equal(rest.body.nextCursor, null);

    const patched = await admin.http.patch(`/v1/orgs/${orgId}/webhooks/${hook.id}`, { url: 'https://hooks.example.org/new/p4th-token', events: [], active: false });
    assert.equal(patched.status, 200, patched.text);
    assert.deepEqual([patched.body.events, patched.body.active, patched.body.state], [[], false, 'disabled']);
    const same = await admin.http.patch(`/v1/orgs/${orgId}/webhooks/${hook.id}`, { active: false });
    assert.equal(same.body.updatedAt, patched.body.updatedAt);
    const respelled = await admin.http.patch(`/v1/orgs/${orgId}/webhooks/${hook.id}`, { url: 'https:hooks.example.org/new/./p4th-token' });
    assert.deepEqual([respelled.body.url, respelled.body.updatedAt], ['https://hooks.example.org/new/p4th-token', patched.body.updatedAt]);

    assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/webhooks/${hook.id}`)).status, 204);
    assert.equal((await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}`)).status, 404);
    // An id of any length an id of another resource may have is not found, as those are.
    assert.equal((await admin.http.get(`/v1/orgs/${orgId}/webhooks/whk_${'x'.repeat(90)}`)).status, 404);

    const events = await eventsOf(server, orgId, hook.id);
    assert.deepEqual(events.map((e) => e.type), ['webhook.created', 'webhook.updated', 'webhook.deleted']);
    assert.deepEqual(events[0].data, { urlOrigin: 'https://hooks.example.com', events: ['deployment.*', 'secret.created'], active: true });
    assert.deepEqual(events[1].data.changed, ['url', 'events', 'active']);
    assert.deepEqual(events[1].data.to, { urlOrigin: 'https://hooks.example.org', events: [], active: false });
    const text = JSON.stringify(events);
    assert.ok(!text.includes('token') && !text.includes(secret), 'events name the origin only, and never the secret');
  });

  it('refuses what cannot be a webhook, naming the field, and more webhooks than the limit', async () => {
    const { orgId, admin } = await freshOrg();
    for (const [body, pointer] of [
      [{ url: 'ftp://example.com/x' }, '/url'],
      [{ url: 'https://user:pw@example.com/x' }, '/url'],
      [{ url: 'https://example.com/x#frag' }, '/url'],
      [{ url: 'https://example.com:0/x' }, '/url'],
      [{ url: `https://${'a'.repeat(64)}.example.com/x` }, '/url'],
      [{ url: `https://example.com/${'é'.repeat(400)}` }, '/url'],
      [{ url: 'https://example.com/x', events: ['secret.nope'] }, '/events/0'],
      [{ url: 'https://example.com/x', events: ['deployment.*', 'nothing.*'] }, '/events/1'],
      [{ url: 'https://example.com/x', events: ['secret.*', 'secret.*'] }, '/events/1'],
    ] as const) {
      const res = await admin.http.post(`/v1/orgs/${orgId}/webhooks`, body);
      assert.equal(res.status, 400, `${JSON.stringify(body)}: ${res.text}`);
      assert.ok(res.body.errors.some((e: any) => e.pointer === pointer), res.text);
    }
    for (let i = 0; i < 3; i++) assert.equal((await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url: `https://example.com/${i}` })).status, 201);
    const over = await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url: 'https://example.com/4' });
    assert.equal(over.status, 400);
    assert.equal(over.body.code, 'limit_exceeded');
    assert.deepEqual(over.body.limit, { name: 'SLIPWAY_MAX_WEBHOOKS_PER_ORG', value: 3 });

    const stranger = await server.actor((await server.createOrg()).id, 'owner');
    const mine = (await admin.http.get(`/v1/orgs/${orgId}/webhooks`)).body.webhooks[0].id;
    for (const res of [
      await stranger.http.get(`/v1/orgs/${stranger.orgId}/webhooks/${mine}`),
      await stranger.http.patch(`/v1/orgs/${stranger.orgId}/webhooks/${mine}`, { description: 'mine' }),
      await stranger.http.delete(`/v1/orgs/${stranger.orgId}/webhooks/${mine}`),
      await stranger.http.post(`/v1/orgs/${stranger.orgId}/webhooks/${mine}/rotate-secret`, {}),
      await stranger.http.get(`/v1/orgs/${stranger.orgId}/webhooks/${mine}/deliveries`),
      await stranger.http.get(`/v1/orgs/${orgId}/webhooks/${mine}`),
    ]) assert.equal(res.status, 404, res.text);
  });

  it('delivers the events it subscribes to, in commit order, signed, and never a secret value', async () => {
    const receiver = await startReceiver();
    try {
      const { orgId, admin } = await freshOrg();
      const hook = (await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url: receiver.url, events: ['secret.*', 'webhook.*'] })).body;
      const sentinel = 'SENTINEL-webhook-7b1f0c';
      assert.equal((await admin.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: 'db', values: { PASSWORD: sentinel } }] })).status, 201);
      assert.equal((await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: 'staging' })).status, 201);
      assert.equal((await admin.http.patch(`/v1/orgs/${orgId}/secrets/db`, { set: { PASSWORD: `${sentinel}-2` } })).status, 200);
      assert.equal((await admin.http.post(`/v1/orgs/${orgId}/secrets/db/reveal`, {})).status, 200);

      await waitFor('four deliveries', () => (receiver.received.length >= 4 ? true : undefined));
      const types = receiver.received.map((r) => r.event.type);
      assert.deepEqual(types, ['webhook.created', 'secret.created', 'secret.updated', 'secret.revealed']);
      for (const r of receiver.received) {
        verify(hook.secret, r);
        assert.equal(r.headers['webhook-id'], r.event.id);
        assert.equal(r.headers['content-type'], 'application/json');
        assert.match(String(r.headers['user-agent']), /^Slipway-Webhooks\//);
        assert.equal(r.event.orgId, orgId);
        assert.ok(!r.body.includes(sentinel), 'a delivery never carries a secret value');
      }
      assert.throws(() => verify(`whsec_${Buffer.alloc(32, 1).toString('base64')}`, receiver.received[0]!), 'another secret does not verify');
      // The same event as the API shows it.
      const listed = (await admin.http.get(`/v1/orgs/${orgId}/events?type=secret.created`)).body.events[0];
      const { orgId: _org, ...delivered } = receiver.received[1]!.event;
      assert.deepEqual(delivered, listed);

      const deliveries = await waitFor('the deliveries recorded', async () => {
        const res = await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}/deliveries`);
        return res.body.deliveries.length >= 4 ? res.body.deliveries : undefined;
      });
      assert.deepEqual(deliveries.map((d: any) => [d.eventType, d.attempt, d.status, d.error]).reverse(), types.map((t) => [t, 1, 200, null]));
      const state = (await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}`)).body;
      assert.deepEqual([state.state, state.lastAttempt.status, state.lastAttempt.error], ['active', 200, null]);
      // Deleted, it takes its delivery records with it.
      assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/webhooks/${hook.id}`)).status, 204);
      assert.deepEqual(await server.core.db.selectFrom('webhook_deliveries').select('id').where('webhook_id', '=', hook.id).execute(), []);
    } finally {
      await receiver.close();
    }
  });

  it('takes an environment\'s locks and unlocks by their types, and delivers them', async () => {
    const receiver = await startReceiver();
    try {
      const { orgId, admin } = await freshOrg();
      const made = await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url: receiver.url, events: ['environment.locked', 'environment.unlocked'] });
      assert.equal(made.status, 201, made.text);
      assert.equal((await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: 'production' })).status, 201);
      assert.equal((await admin.http.put(`/v1/orgs/${orgId}/environments/production/lock`, { reason: 'incident 42' })).status, 200);
      assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/environments/production/lock`)).status, 200);
      await waitFor('both events delivered', () => (receiver.received.length >= 2 ? true : undefined));
      assert.deepEqual(receiver.received.map((r) => [r.event.type, r.event.data.reason ?? r.event.data.lock?.reason]), [
        ['environment.locked', 'incident 42'],
        ['environment.unlocked', 'incident 42'],
      ]);
      const documented = (await server.http().get('/openapi.json')).body.paths['/v1/orgs/{orgId}/events'].get.description as string;
      assert.match(documented, /`environment\.[^`]*\blocked\|unlocked\b/);
    } finally {
      await receiver.close();
    }
  });

  it('tries a failing event again with the same id, and nothing after it goes first', async () => {
    const receiver = await startReceiver();
    try {
      receiver.answerWith((_r, n) => (n <= 3 ? 500 : 204));
      const { orgId, admin } = await freshOrg();
      const hook = (await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url: receiver.url, events: ['environment.created'] })).body;
      await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: 'one' });
      await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: 'two' });
      const failing = await waitFor('a failing state', async () => {
        const res = (await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}`)).body;
        return res.state === 'failing' ? res : undefined;
      });
      assert.equal(failing.lastAttempt.status, 500);
      assert.ok(failing.nextAttemptAt > failing.lastAttempt.at);
      await waitFor('both events delivered', () => (receiver.received.length >= 5 ? true : undefined));
      const ids = receiver.received.map((r) => r.headers['webhook-id']);
      const names = receiver.received.map((r) => r.event.data.name);
      assert.deepEqual(names, ['one', 'one', 'one', 'one', 'two']);
      assert.equal(new Set(ids.slice(0, 4)).size, 1, 'every attempt at one event carries its id');
      const stamps = receiver.received.slice(0, 4).map((r) => Number(r.headers['webhook-timestamp']));
      assert.ok(stamps[3]! - stamps[0]! >= 3, `paused 1, 2, 4 s between attempts: ${stamps.join(', ')}`);
      // Recorded once its answer is back, which comes after the receiver had the request.
      const deliveries = (await waitFor('the five deliveries recorded', async () => {
        const res = await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}/deliveries`);
        return res.body.deliveries.length >= 5 ? res.body.deliveries : undefined;
      })).reverse();
      assert.deepEqual(deliveries.map((d: any) => [d.attempt, d.status]), [[1, 500], [2, 500], [3, 500], [4, 204], [1, 204]]);
      assert.equal(deliveries[0].error, 'answered 500');
      const done = (await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}`)).body;
      assert.deepEqual([done.state, done.failingSince, done.nextAttemptAt], ['active', null, null]);
    } finally {
      await receiver.close();
    }
  });

  it('lets go of a failing event that its new events no longer take, and counts attempts per event', async () => {
    const receiver = await startReceiver();
    try {
      receiver.answerWith((r) => (r.event.type === 'environment.created' ? 503 : 200));
      const { orgId, admin } = await freshOrg();
      const hook = (await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url: receiver.url, events: ['environment.created'] })).body;
      await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: 'refused' });
      await waitFor('two refusals', async () => ((await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}`)).body.lastAttempt?.status === 503
        && receiver.received.length >= 2 ? true : undefined));
      await admin.http.patch(`/v1/orgs/${orgId}/webhooks/${hook.id}`, { events: ['secret.created'] });
      const clear = await waitFor('the failure passed over', async () => {
        const res = (await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}`)).body;
        return res.state === 'active' ? res : undefined;
      });
      assert.deepEqual([clear.failingSince, clear.nextAttemptAt], [null, null]);
      await admin.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: 'after', values: { K: 'v' } }] });
      const [latest] = await waitFor('the secret delivered', async () => {
        const res = (await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}/deliveries`)).body.deliveries;
        return res[0]?.eventType === 'secret.created' ? res : undefined;
      });
      assert.deepEqual([latest.attempt, latest.status], [1, 200]);
    } finally {
      await receiver.close();
    }
  });

  it('takes a 2xx as it arrives, however slowly its body follows', async () => {
    const receiver = http.createServer((req, res) => {
      req.resume();
      res.writeHead(200);
      res.write('taking my time');
      setTimeout(() => res.end(), 20_000).unref();
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    try {
      const { orgId, admin } = await freshOrg();
      const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/in`;
      const hook = (await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url })).body;
      const [delivery] = await waitFor('the delivery recorded', async () => {
        const res = await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}/deliveries`);
        return res.body.deliveries.length > 0 ? res.body.deliveries : undefined;
      });
      assert.deepEqual([delivery.eventType, delivery.status, delivery.error], ['webhook.created', 200, null]);
    } finally {
      receiver.closeAllConnections();
      await new Promise<void>((resolve) => receiver.close(() => resolve()));
    }
  });

  it('sends an event to the new URL when the URL changes while an attempt at the old one is under way', async () => {
    const slow = await startReceiver();
    const good = await startReceiver();
    try {
      let answered = false;
      slow.answerWith(() => 500);
      const { orgId, admin } = await freshOrg();
      const hook = (await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url: slow.url, events: ['environment.created'], active: false })).body;
      await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: 'moved' });
      // The slow receiver holds its answer until the URL has changed.
      const stalled = new Promise<void>((resolve) => { slow.onRequest(async () => { resolve(); await waitFor('the URL changed', () => (answered ? true : undefined)); }); });
      await admin.http.patch(`/v1/orgs/${orgId}/webhooks/${hook.id}`, { active: true });
      await stalled;
      const moved = await admin.http.patch(`/v1/orgs/${orgId}/webhooks/${hook.id}`, { url: good.url });
      assert.equal(moved.status, 200, moved.text);
      answered = true;
      await waitFor('the event at the new URL', () => (good.received.length > 0 ? true : undefined));
      assert.equal(good.received[0]!.event.data.name, 'moved');
      const state = await waitFor('the webhook active', async () => {
        const res = (await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}`)).body;
        return res.lastAttempt?.status === 200 ? res : undefined;
      });
      assert.deepEqual([state.state, state.failingSince], ['active', null]);
      // The old URL's answer, which came after the change, is not the webhook's: it records nothing,
      // and no pause for a failure held the new URL's first attempt back.
      const deliveries = (await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}/deliveries`)).body.deliveries;
      assert.deepEqual(deliveries.map((d: any) => [d.attempt, d.status]), [[1, 200]]);
    } finally {
      await slow.close();
      await good.close();
    }
  });

  it('signs with the new secret and, for a day, the previous one after a rotation', async () => {
    const receiver = await startReceiver();
    try {
      const { orgId, admin } = await freshOrg();
      const hook = (await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url: receiver.url, events: ['environment.*'] })).body;
      const rotated = await admin.http.post(`/v1/orgs/${orgId}/webhooks/${hook.id}/rotate-secret`);
      assert.equal(rotated.status, 200, rotated.text);
      assert.equal(rotated.headers.get('cache-control'), 'no-store');
      assert.notEqual(rotated.body.secret, hook.secret);
      const inADay = Date.parse(rotated.body.previousSecretExpiresAt) - Date.now();
      assert.ok(inADay > 23.9 * 3600_000 && inADay <= 24 * 3600_000, rotated.body.previousSecretExpiresAt);
      await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: 'rotated' });
      const [r] = await waitFor('a delivery', () => (receiver.received.length >= 1 ? receiver.received : undefined));
      assert.equal(String(r!.headers['webhook-signature']).split(' ').length, 2);
      verify(rotated.body.secret, r!);
      verify(hook.secret, r!);
      const events = await eventsOf(server, orgId, hook.id);
      assert.deepEqual(events.map((e) => e.type), ['webhook.created', 'webhook.secret_rotated']);
    } finally {
      await receiver.close();
    }
  });

  it('sends a test delivery on request, signed, off or on and whatever it subscribes to, outside the log and the deliveries', async () => {
    const receiver = await startReceiver();
    try {
      const { orgId, admin } = await freshOrg();
      const hook = (await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url: receiver.url, events: ['secret.*'] })).body;
      assert.equal((await admin.http.patch(`/v1/orgs/${orgId}/webhooks/${hook.id}`, { active: false })).status, 200);
      const tested = await admin.http.post(`/v1/orgs/${orgId}/webhooks/${hook.id}/test`);
      assert.equal(tested.status, 200, tested.text);
      assert.deepEqual({ ...tested.body, durationMs: 0 }, { eventId: tested.body.eventId, delivered: true, status: 200, error: null, durationMs: 0 });
      assert.match(tested.body.eventId, /^evt_/);
      assert.equal(receiver.received.length, 1);
      const [r] = receiver.received;
      verify(hook.secret, r!);
      assert.equal(r!.headers['webhook-id'], tested.body.eventId);
      assert.deepEqual({ ...r!.event, createdAt: null }, {
        id: tested.body.eventId, type: 'webhook.test', actor: admin.id, requestId: r!.event.requestId, subject: { type: 'webhook', id: hook.id },
        data: { test: true }, createdAt: null, orgId,
      });

      receiver.answerWith(() => 503);
      const refused = await admin.http.post(`/v1/orgs/${orgId}/webhooks/${hook.id}/test`, {});
      assert.equal(refused.status, 200, refused.text);
      assert.deepEqual([refused.body.delivered, refused.body.status, refused.body.error], [false, 503, 'answered 503']);
      assert.notEqual(refused.body.eventId, tested.body.eventId);

      // Neither the webhook's state nor its deliveries moved, and the log holds no test.
      const after = (await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}`)).body;
      assert.deepEqual([after.state, after.lastAttempt], ['disabled', hook.lastAttempt]);
      assert.deepEqual((await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}/deliveries`)).body.deliveries, []);
      assert.deepEqual((await eventsOf(server, orgId, hook.id)).map((e) => e.type), ['webhook.created', 'webhook.updated']);

      const developer = await server.actor(orgId, 'developer');
      assert.equal((await developer.http.post(`/v1/orgs/${orgId}/webhooks/${hook.id}/test`)).status, 403);
      const other = await freshOrg();
      assert.equal((await other.admin.http.post(`/v1/orgs/${other.orgId}/webhooks/${hook.id}/test`)).status, 404);
      assert.equal(receiver.received.length, 2);
    } finally {
      await receiver.close();
    }
  });

  it('keeps its place in the log when a restore into another PostgreSQL cluster renumbers the events', { skip: TEST_DB !== 'postgres' && 'PostgreSQL only' }, async () => {
    const receiver = await startReceiver();
    try {
      const { orgId, admin } = await freshOrg();
      const hook = (await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url: receiver.url, events: ['environment.created'] })).body;
      await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: 'before' });
      await waitFor('the first delivery', () => (receiver.received.length === 1 ? true : undefined));
      await waitFor('its position written', async () => {
        const row = await server.core.db.selectFrom('webhooks').select('position_event_id').where('id', '=', hook.id).executeTakeFirstOrThrow();
        return row.position_event_id === receiver.received[0]!.event.id ? true : undefined;
      });
      // What a dump restored into another cluster looks like: that cluster's transaction ids, past
      // this one's, on the events and on the webhook's position among them.
      const db = server.core.db;
      await sql`update events set tx_id = (tx_id::text::bigint + 1000000000)::text::xid8 where org_id = ${orgId}`.execute(db);
      await sql`update webhooks set position_tx = (position_tx::bigint + 1000000000)::text where id = ${hook.id}`.execute(db);
      // And one the dump caught committing after the delivered one, though it took its id (time-
      // ordered) before: in id order it comes first, and must not be passed over for that.
      const delivered = receiver.received[0]!.event.id;
      await sql`insert into events (id, org_id, type, actor_id, request_id, subject_type, subject_id, data, created_at, tx_id)
        select 'evt_00000000000000000000000000', org_id, type, actor_id, request_id, subject_type, subject_id, '{"name":"committed-late"}', created_at, (tx_id::text::bigint + 1)::text::xid8
        from events where id = ${delivered}`.execute(db);
      assert.ok(await server.core.events.renumberRestored((trx) => server.core.webhooks.followRenumberedEvents(trx)) > 0);
      await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: 'after' });
      await waitFor('the event written after the restore', () => (receiver.received.some((r) => r.event.data.name === 'after') ? true : undefined));
      // At least once: the one committed late comes, and the one delivered before may come again.
      assert.deepEqual(receiver.received.map((r) => r.event.data.name), ['before', 'committed-late', 'before', 'after']);
    } finally {
      await receiver.close();
    }
  });

  it('never shows a signing secret but where it is handed out: not in reads, events, logs or the database', async () => {
    const { orgId, admin } = await freshOrg();
    const hook = (await admin.http.post(`/v1/orgs/${orgId}/webhooks`, { url: 'https://example.com/in' })).body;
    const rotated = (await admin.http.post(`/v1/orgs/${orgId}/webhooks/${hook.id}/rotate-secret`, {})).body;
    const reads = [
      (await admin.http.get(`/v1/orgs/${orgId}/webhooks/${hook.id}`)).text,
      (await admin.http.get(`/v1/orgs/${orgId}/webhooks`)).text,
      (await admin.http.patch(`/v1/orgs/${orgId}/webhooks/${hook.id}`, { description: 'x' })).text,
      JSON.stringify(await eventsOf(server, orgId, hook.id)),
      server.logs.join('\n'),
    ];
    const raw = await rawDatabaseBytes(server);
    for (const secret of [hook.secret, rotated.secret]) {
      const bare = secret.slice('whsec_'.length);
      for (const text of reads) assert.ok(!text.includes(bare));
      for (const bytes of raw) {
        assert.equal(bytes.indexOf(bare), -1, 'sealed in the database');
        assert.equal(bytes.indexOf(Buffer.from(bare, 'base64')), -1, 'sealed in the database');
      }
    }
  });
});

describe('webhooks that keep failing, and private addresses', () => {
  let server: TestServer;
  before(async () => { server = await startServer({ env: { SLIPWAY_WEBHOOK_ALLOW_PRIVATE: 'true', SLIPWAY_WEBHOOK_DISABLE_AFTER_SECONDS: '2' } }); });
  after(async () => { await server.close(); });

  it('disables a webhook failing past the limit, and one turned on again delivers from where it stopped', async () => {
    const receiver = await startReceiver();
    try {
      receiver.answerWith(() => 503);
      const org = await server.createOrg();
      const admin = await server.actor(org.id, 'admin');
      const hook = (await admin.http.post(`/v1/orgs/${org.id}/webhooks`, { url: receiver.url, events: ['environment.created'] })).body;
      await admin.http.post(`/v1/orgs/${org.id}/environments`, { name: 'first' });
      const disabled = await waitFor('the webhook disabled', async () => {
        const res = (await admin.http.get(`/v1/orgs/${org.id}/webhooks/${hook.id}`)).body;
        return res.state === 'disabled' ? res : undefined;
      });
      assert.equal(disabled.active, false);
      assert.match(disabled.disabledReason, /^Disabled after failing since .* SLIPWAY_WEBHOOK_DISABLE_AFTER_SECONDS is 2\); the last: answered 503$/);
      const [event] = (await eventsOf(server, org.id, hook.id)).filter((e) => e.type === 'webhook.disabled');
      assert.equal(event.actor, 'system');
      assert.equal(event.data.lastStatus, 503);
      const attempts = receiver.received.length;
      await admin.http.post(`/v1/orgs/${org.id}/environments`, { name: 'second' });
      await new Promise((r) => setTimeout(r, 2000));
      assert.equal(receiver.received.length, attempts, 'a disabled webhook delivers nothing');

      receiver.answerWith(() => 200);
      const on = await admin.http.patch(`/v1/orgs/${org.id}/webhooks/${hook.id}`, { active: true });
      assert.deepEqual([on.body.state, on.body.disabledReason, on.body.failingSince], ['active', null, null]);
      await waitFor('the two events', () => (receiver.received.filter((r) => r.event.data.name === 'second').length === 1 ? true : undefined));
      const delivered = receiver.received.slice(attempts).map((r) => r.event.data.name);
      assert.deepEqual(delivered, ['first', 'second']);
    } finally {
      await receiver.close();
    }
  });

  it('gives a webhook with events to deliver its turn while others of its organization pass over a busy log', async () => {
    const receiver = await startReceiver();
    try {
      const org = await server.createOrg();
      const admin = await server.actor(org.id, 'admin');
      for (let i = 0; i < 10; i++) assert.equal((await admin.http.post(`/v1/orgs/${org.id}/webhooks`, { url: receiver.url, events: ['service.deleted'] })).status, 201);
      await admin.http.post(`/v1/orgs/${org.id}/webhooks`, { url: receiver.url, events: ['secret.updated'] });
      await admin.http.post(`/v1/orgs/${org.id}/secrets`, { secrets: [{ name: 'busy', values: { K: '0' } }] });
      // The log kept busy until it is delivered to (a loaded machine takes longer over each turn), for at most 20 s.
      let during = 0;
      for (let i = 1, until = Date.now() + 20_000; during === 0 && Date.now() < until; i++) {
        await admin.http.patch(`/v1/orgs/${org.id}/secrets/busy`, { set: { K: String(i) } });
        await new Promise((r) => setTimeout(r, 200));
        during = receiver.received.filter((r) => r.event.type === 'secret.updated').length;
      }
      assert.ok(during > 0, 'the webhook with something to deliver got no turn while the log was busy');
    } finally {
      await receiver.close();
    }
  });

  it('by default refuses URLs of this machine and of private networks', async () => {
    const strict = await startServer();
    try {
      for (const url of ['http://127.0.0.1:9/x', 'http://localhost/x', 'http://api.localhost/x', 'http://[::1]/x', 'http://10.1.2.3/x', 'http://169.254.169.254/latest/meta-data', 'http://[::ffff:192.168.0.1]/x', 'http://[::ffff:7f00:1]/x',
        'http://[::127.0.0.1]/x', 'http://[2002:7f00:1::]/x', 'http://[64:ff9b:1::7f00:1]/x', 'http://[fec0::1]/x', 'http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/x', 'http://2130706433/x', 'http://0x7f.1/x', 'http://intranet/x']) {
        const res = await strict.owner.http.post(`/v1/orgs/${strict.bootstrap.orgId}/webhooks`, { url });
        assert.equal(res.status, 400, `${url}: ${res.text}`);
        assert.match(res.body.errors[0].message, /SLIPWAY_WEBHOOK_ALLOW_PRIVATE/);
      }
      assert.equal((await strict.owner.http.post(`/v1/orgs/${strict.bootstrap.orgId}/webhooks`, { url: 'https://203.0.113.9/x' })).status, 201);
    } finally {
      await strict.close();
    }
  });
});
