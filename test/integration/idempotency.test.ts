// Idempotency-Key on every POST of the API: replays byte for byte, refuses reuse with another
// body, scopes keys per caller, executes a storm of concurrent retries once, and keeps its state in
// the database (restart, expiry, abandoned attempts, no client secret in plain text).
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import Fastify from 'fastify';
import { createErrorHandler } from '../../src/http/error-handler.js';
import { registerIdempotency } from '../../src/modules/idempotency/idempotency.hooks.js';
import { idempotencyRepo } from '../../src/modules/idempotency/idempotency.repo.js';
import { createIdempotencyService } from '../../src/modules/idempotency/idempotency.service.js';
import { cliContext } from '../../src/platform/context.js';
import { errors } from '../../src/platform/errors.js';
import { createEnvironment, createService, eventually } from '../support/deployments.js';
import { rawDatabaseBytes, startServer, type Actor, type HttpResult, type TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';

const withKey = (key: string) => ({ headers: { 'idempotency-key': key } });
const oneSecret = (name: string) => ({ secrets: [{ name, values: { TOKEN: `value-of-${name}` } }] });
let names = 0;
const uniqueName = (what: string) => `${what}-${process.pid}-${++names}`;

describe('Idempotency-Key', () => {
  let server: TestServer;
  let developer: Actor;
  before(async () => {
    server = await startServer();
    developer = await server.actor(server.bootstrap.orgId, 'developer');
  });
  after(async () => { await server.close(); });

  const secretsNamed = (name: string) => server.core.db.selectFrom('secrets').select('id').where('name', '=', name).execute();
  const eventsAbout = (subjectId: string) => server.core.db.selectFrom('events').select('id').where('subject_id', '=', subjectId).execute();
  const keyRow = (key: string) => server.core.db.selectFrom('idempotency_keys').selectAll().where('idempotency_key', '=', key).executeTakeFirst();
  const createSecret = (key: string, name: string, as: Actor = server.owner) => as.http.post('/v1/orgs/default/secrets', oneSecret(name), withKey(key));

  function assertReplayOf(replay: HttpResult, first: HttpResult): void {
    assert.equal(replay.status, first.status);
    assert.equal(replay.text, first.text);
    assert.equal(replay.headers.get('content-type'), first.headers.get('content-type'));
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.notEqual(replay.headers.get('x-request-id'), first.headers.get('x-request-id'));
  }

  it('replays the first response byte for byte and executes once', async () => {
    const key = randomUUID();
    const name = uniqueName('replayed');
    const first = await createSecret(key, name);
    assert.equal(first.status, 201, first.text);
    assert.equal(first.headers.get('idempotent-replayed'), null);
    const replay = await createSecret(key, name);
    assertReplayOf(replay, first);
    const rows = await secretsNamed(name);
    assert.equal(rows.length, 1);
    assert.equal((await eventsAbout(rows[0]!.id)).length, 1);
  });

  it('treats the same body with other key order and spacing as the same request', async () => {
    const key = randomUUID();
    const name = uniqueName('reordered');
    const first = await server.owner.http.post('/v1/orgs/default/secrets', undefined, {
      ...withKey(key), raw: `{"secrets":[{"name":"${name}","values":{"A":"1","B":"2"}}]}`, contentType: 'application/json',
    });
    assert.equal(first.status, 201, first.text);
    const replay = await server.owner.http.post('/v1/orgs/default/secrets', undefined, {
      ...withKey(key), raw: `{ "secrets": [ { "values": { "B": "2", "A": "1" }, "name": "${name}" } ] }`, contentType: 'application/json',
    });
    assertReplayOf(replay, first);
  });

  it('refuses the same key with another body or on another route (422) and executes nothing', async () => {
    const key = randomUUID();
    const name = uniqueName('first');
    assert.equal((await createSecret(key, name)).status, 201);
    const other = uniqueName('other');
    const res = await createSecret(key, other);
    assert.equal(res.status, 422, res.text);
    assert.equal(res.headers.get('content-type'), 'application/problem+json; charset=utf-8');
    assert.equal(res.body.code, 'idempotency_key_reused');
    assert.match(res.body.detail, /POST \/v1\/orgs\/default\/secrets/);
    assert.equal((await secretsNamed(other)).length, 0);
    const elsewhere = await server.owner.http.post('/v1/orgs', { slug: uniqueName('org'), name: 'Elsewhere' }, withKey(key));
    assert.equal(elsewhere.status, 422, elsewhere.text);
  });

  it('scopes keys per caller: another service user with the same key executes its own request', async () => {
    const key = randomUUID();
    const mineName = uniqueName('mine');
    const mine = await createSecret(key, mineName);
    assert.equal(mine.status, 201);
    const theirsName = uniqueName('theirs');
    const theirs = await createSecret(key, theirsName, developer);
    assert.equal(theirs.status, 201, theirs.text);
    assert.equal(theirs.headers.get('idempotent-replayed'), null);
    assert.equal(theirs.body.secrets[0].name, theirsName);
    // …and the first caller's key still stands for its own request.
    assertReplayOf(await createSecret(key, mineName), mine);
  });

  it('executes twenty concurrent retries once: one 201, every other answer its replay or a 409 in progress', async () => {
    const key = randomUUID();
    const name = uniqueName('storm');
    const answers = await Promise.all(Array.from({ length: 20 }, () => createSecret(key, name, developer)));
    const created = answers.filter((a) => a.status === 201);
    const busy = answers.filter((a) => a.status === 409);
    assert.equal(created.length + busy.length, 20, answers.map((a) => `${a.status} ${a.text}`).join('\n'));
    assert.ok(created.length >= 1);
    assert.equal(created.filter((a) => a.headers.get('idempotent-replayed') === null).length, 1);
    for (const a of created) assert.equal(a.text, created[0]!.text);
    for (const a of busy) {
      assert.equal(a.body.code, 'idempotency_request_in_progress');
      assert.equal(a.headers.get('retry-after'), '1');
    }
    const rows = await secretsNamed(name);
    assert.equal(rows.length, 1);
    assert.equal((await eventsAbout(rows[0]!.id)).length, 1);
    assertReplayOf(await createSecret(key, name, developer), created[0]!);
  });

  it('creates one deployment for twenty concurrent retries, where nothing else would stop a second', async () => {
    const orgId = server.bootstrap.orgId;
    const env = await createEnvironment(server.owner.http, orgId);
    const svc = await createService(developer.http, orgId);
    const key = randomUUID();
    const body = { service: svc.id, environment: env.id, revision: 'once' };
    const answers = await Promise.all(Array.from({ length: 20 }, () => developer.http.post(`/v1/orgs/${orgId}/deployments`, body, { headers: { 'idempotency-key': key } })));
    const created = answers.filter((a) => a.status === 201);
    assert.equal(created.length + answers.filter((a) => a.status === 409 && a.body.code === 'idempotency_request_in_progress').length, 20, answers.map((a) => `${a.status} ${a.text}`).join('\n'));
    assert.equal(created.filter((a) => a.headers.get('idempotent-replayed') === null).length, 1);
    for (const a of created) assert.equal(a.text, created[0]!.text);
    const made = (await developer.http.get(`/v1/orgs/${orgId}/deployments?service=${svc.id}`)).body.deployments;
    assert.deepEqual(made.map((d: { id: string }) => d.id), [created[0]!.body.id]);
    const events = await server.core.db.selectFrom('events').select('type').where('subject_id', '=', created[0]!.body.id).execute();
    assert.deepEqual(events.map((e) => e.type), ['deployment.created']);
  });

  it('keeps and replays a 4xx outcome (a 409 conflict) rather than running again', async () => {
    const name = uniqueName('taken');
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', oneSecret(name))).status, 201);
    const key = randomUUID();
    const first = await createSecret(key, name);
    assert.equal(first.status, 409, first.text);
    assert.equal(first.body.code, 'secret_exists');
    const replay = await createSecret(key, name);
    // The body names the first request's id: the same bytes, not a second run.
    assertReplayOf(replay, first);
    assert.equal(replay.body.requestId, first.headers.get('x-request-id'));
  });

  it('frees the key after a conflict with a concurrent request (409 with Retry-After), and maps a database deadlock, and a row deleted meanwhile, to one', async () => {
    // A route of the API's shape on an app of its own, with the real hooks, error handler and
    // key store, that meets the two kinds of race once each and then succeeds.
    const app = Fastify();
    app.setErrorHandler(createErrorHandler(1024 * 1024));
    app.decorateRequest('principal', null);
    app.addHook('onRequest', (req, _reply, done) => { req.principal = { subject: server.owner.clientId } as never; done(); });
    registerIdempotency(app as never, { idempotency: server.core.idempotency });
    let runs = 0;
    app.post('/v1/race', { config: { auth: 'developer' } }, async () => {
      runs++;
      if (runs === 1) throw errors.raced('secret_changed', 'raced');
      if (runs === 2) throw Object.assign(new Error('deadlock detected'), { code: '40P01' });
      // What a write names, deleted by a request that committed first: a foreign key refuses it.
      if (runs === 3) throw Object.assign(new Error('FOREIGN KEY constraint failed'), { code: 'SQLITE_CONSTRAINT_FOREIGNKEY' });
      return { ran: runs };
    });
    try {
      const key = randomUUID();
      const call = () => app.inject({ method: 'POST', url: '/v1/race', headers: { 'idempotency-key': key }, payload: {} });
      const raced = await call();
      assert.equal(raced.statusCode, 409);
      assert.equal(raced.headers['retry-after'], '1');
      const deadlocked = await call();
      assert.equal(deadlocked.statusCode, 409, deadlocked.body);
      assert.equal(deadlocked.json().code, 'write_conflict');
      assert.equal(deadlocked.headers['retry-after'], '1');
      const deleted = await call();
      assert.equal(deleted.statusCode, 409, deleted.body);
      assert.equal(deleted.json().code, 'deleted_meanwhile');
      assert.equal(deleted.headers['retry-after'], '1');
      const ran = await call();
      assert.equal(ran.statusCode, 200);
      assert.deepEqual(ran.json(), { ran: 4 });
      const replay = await call();
      assert.equal(replay.headers['idempotent-replayed'], 'true');
      assert.equal(runs, 4);
    } finally {
      await app.close();
    }
  });

  it('frees the key after a 5xx, so that a retry runs', async () => {
    const key = randomUUID();
    const name = uniqueName('after-5xx');
    const request = { subject: server.owner.clientId, key, method: 'POST', path: '/v1/orgs/default/secrets', body: oneSecret(name), requestId: randomUUID() };
    const admission = await server.core.idempotency.admit(request);
    assert.equal(admission.kind, 'execute');
    if (admission.kind !== 'execute') return;
    assert.equal(await server.core.idempotency.finish(admission.claim, { status: 503, headers: {}, body: Buffer.from('{}') }, { retryAfter: false }), true);
    assert.equal(await keyRow(key), undefined);
    const res = await createSecret(key, name);
    assert.equal(res.status, 201, res.text);
    assert.equal(res.headers.get('idempotent-replayed'), null);
  });

  it('keeps no 401: a long-polling claim whose caller is refused while it waits is run again by a retry with a new token', async () => {
    const env = await createEnvironment(server.owner.http, server.bootstrap.orgId);
    const runner = await server.actor(server.bootstrap.orgId, 'runner');
    const key = randomUUID();
    const claim = (as: Actor) => as.http.post(`/v1/orgs/${server.bootstrap.orgId}/runner/claim`, { environments: [env.id], waitSeconds: 5 }, withKey(key));
    const waiting = claim(runner);
    await eventually('the claim to wait', async () => (await keyRow(key)) ?? undefined);
    // Disabled while it waits: the claim finds its token refused when it looks again.
    await server.core.serviceUsers.update(cliContext(), server.bootstrap.orgId, runner.id, { disabled: true });
    const refused = await waiting;
    assert.equal(refused.status, 401, refused.text);
    assert.equal(await keyRow(key), undefined, 'the key is free again');
    await server.core.serviceUsers.update(cliContext(), server.bootstrap.orgId, runner.id, { disabled: false });
    const token = await server.token(runner);
    const retried = await claim({ ...runner, token, http: server.http(token) });
    assert.equal(retried.status, 204, retried.text);
    assert.equal(retried.headers.get('idempotent-replayed'), null);
  });

  it('never lets a retry take over a key whose first request is still running, however long it runs', async () => {
    // The lock timeout shortened to 3 s (renewed every second): a request that runs longer keeps its hold.
    const service = createIdempotencyService({ db: server.core.db, sealKey: randomBytes(32), lockTimeoutMs: 3_000 });
    const request = { subject: server.owner.clientId, key: randomUUID(), method: 'POST', path: '/v1/orgs/default/secrets', body: oneSecret(uniqueName('long')), requestId: randomUUID() };
    const first = await service.admit(request);
    assert.equal(first.kind, 'execute');
    if (first.kind !== 'execute') return;
    const stop = service.hold(first.claim);
    try {
      for (let i = 0; i < 4; i++) {
        await sleep(1_000);
        await assert.rejects(service.admit(request), (error: { code?: string }) => error.code === 'idempotency_request_in_progress');
      }
    } finally {
      stop();
    }
    // Once nothing holds it, the key is free after the timeout: the attempt is taken to have died.
    await sleep(3_200);
    assert.equal((await service.admit(request)).kind, 'execute');
  });

  it('keeps the hold of a request whose client went away while it still runs, so that the client\'s retry waits', async () => {
    // The real hooks on an app of its own, over a key store with a 3 s lock timeout, and a route
    // that runs until the test lets it finish; its client hangs up while it runs and retries after
    // the timeout.
    const service = createIdempotencyService({ db: server.core.db, sealKey: randomBytes(32), lockTimeoutMs: 3_000 });
    const app = Fastify();
    app.setErrorHandler(createErrorHandler(1024 * 1024));
    app.decorateRequest('principal', null);
    app.addHook('onRequest', (req, _reply, done) => { req.principal = { subject: server.owner.clientId } as never; done(); });
    registerIdempotency(app as never, { idempotency: service });
    let runs = 0;
    let open!: () => void;
    const gate = new Promise<void>((resolve) => { open = resolve; });
    app.post('/v1/slow', { config: { auth: 'developer' } }, async () => {
      runs++;
      await gate;
      return { ran: runs };
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const key = randomUUID();
      const send = (signal?: AbortSignal) => fetch(`${url}/v1/slow`, { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{}', ...(signal ? { signal } : {}) });
      // The client hangs up once its request runs (not after a fixed time, which a slow machine could
      // spend before the request arrives, leaving the retry to run it).
      const hangUp = new AbortController();
      const first = send(hangUp.signal);
      await eventually('the first attempt to run', async () => (runs === 1 ? true : undefined));
      hangUp.abort();
      await assert.rejects(first);
      await sleep(3_500);
      const retry = await send();
      assert.equal(retry.status, 409);
      assert.equal(((await retry.json()) as { code: string }).code, 'idempotency_request_in_progress');
      open();
      // Once the first attempt's response is recorded, the retry replays it.
      const replay = await eventually('the first response to be recorded', async () => {
        const res = await send();
        return res.status === 409 ? undefined : res;
      });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(runs, 1);
    } finally {
      open();
      await app.close();
    }
  });

  it('answers 409 while the first attempt runs, and lets a retry take over once it is abandoned', async () => {
    const key = randomUUID();
    const name = uniqueName('abandoned');
    // An attempt that got the key and then died with its node: it never records an outcome.
    const admission = await server.core.idempotency.admit({ subject: server.owner.clientId, key, method: 'POST', path: '/v1/orgs/default/secrets', body: oneSecret(name), requestId: randomUUID() });
    assert.equal(admission.kind, 'execute');
    const busy = await createSecret(key, name);
    assert.equal(busy.status, 409, busy.text);
    assert.equal(busy.body.code, 'idempotency_request_in_progress');
    assert.equal((await secretsNamed(name)).length, 0);
    await server.core.db.updateTable('idempotency_keys').set({ locked_at: new Date(Date.now() - 61_000).toISOString() }).where('idempotency_key', '=', key).execute();
    const retry = await createSecret(key, name);
    assert.equal(retry.status, 201, retry.text);
    assert.equal((await secretsNamed(name)).length, 1);
    assertReplayOf(await createSecret(key, name), retry);
  });

  it('never runs again a request that committed its change and died before its response was kept', async () => {
    const env = await createEnvironment(server.owner.http, 'default');
    const svc = await createService(server.owner.http, 'default');
    const body = { service: svc.name, environment: env.name, revision: 'r1' };
    const key = randomUUID();
    const first = await server.owner.http.post('/v1/orgs/default/deployments', body, withKey(key));
    assert.equal(first.status, 201, first.text);
    const firstRequestId = first.headers.get('x-request-id');
    const row = await keyRow(key);
    assert.equal(row!.request_id, firstRequestId);
    assert.ok(row!.committed_at !== null, 'the change marked its key committed');
    // What a node that died between its COMMIT and recording the response leaves behind: the
    // change is in, the key still in progress, and nobody renews its hold any more.
    await server.core.db.updateTable('idempotency_keys')
      .set({ state: 'in_progress', status: null, headers: null, body_sealed: null, completed_at: null, locked_at: new Date(Date.now() - 61_000).toISOString() })
      .where('idempotency_key', '=', key).execute();
    // Another caller sending the same X-Request-Id (it is the caller's to choose) adds nothing to `changed`.
    const borrowed = await developer.http.post('/v1/orgs/default/secrets', oneSecret(uniqueName('same-request-id')), { headers: { 'x-request-id': firstRequestId! } });
    assert.equal(borrowed.status, 201, borrowed.text);
    assert.equal(borrowed.headers.get('x-request-id'), firstRequestId);
    // Nor does a later request of the same caller under it (a CI job that sends one id on every call).
    const later = await server.owner.http.post('/v1/orgs/default/secrets', oneSecret(uniqueName('same-request-id-later')), { headers: { 'x-request-id': firstRequestId! } });
    assert.equal(later.status, 201, later.text);
    const deploymentsOf = async () => (await server.core.db.selectFrom('deployments').select('id').where('service_id', '=', svc.id).execute()).map((d) => d.id);
    assert.deepEqual(await deploymentsOf(), [first.body.id]);

    for (let i = 0; i < 2; i++) {
      const retry = await server.owner.http.post('/v1/orgs/default/deployments', body, withKey(key));
      assert.equal(retry.status, 409, retry.text);
      assert.equal(retry.body.code, 'idempotency_response_lost');
      assert.equal(retry.body.firstRequestId, firstRequestId);
      assert.deepEqual(retry.body.changed, [{ type: 'deployment', id: first.body.id }]);
      assert.equal(retry.headers.get('retry-after'), null);
    }
    assert.deepEqual(await deploymentsOf(), [first.body.id], 'the deployment was created once');
    // The same key with another body is still a misuse of the key.
    const other = await server.owner.http.post('/v1/orgs/default/deployments', { ...body, revision: 'r2' }, withKey(key));
    assert.equal(other.status, 422, other.text);
  });

  it('does not free the key of a request that failed after committing its change: a retry is told its response was lost', async () => {
    const name = uniqueName('committed-then-5xx');
    const request = { subject: server.owner.clientId, key: randomUUID(), method: 'POST', path: '/v1/orgs/default/secrets', body: oneSecret(name), requestId: randomUUID() };
    const admission = await server.core.idempotency.admit(request);
    assert.equal(admission.kind, 'execute');
    if (admission.kind !== 'execute') return;
    // The change commits under the key, then the request fails on its way out.
    await server.core.secrets.bulkCreate({ requestId: request.requestId, actor: { id: server.owner.clientId, kind: 'service_user', orgId: server.bootstrap.orgId, role: 'owner', instanceAdmin: false }, idempotency: admission.claim },
      server.bootstrap.orgId, oneSecret(name).secrets);
    // Say its PostgreSQL connection was lost while the COMMIT went through: the answer is a 503.
    assert.equal(await server.core.idempotency.finish(admission.claim, { status: 503, headers: { 'content-type': 'application/problem+json' }, body: Buffer.from('{"code":"unavailable"}') }, { retryAfter: true }), true);
    await assert.rejects(server.core.idempotency.admit(request), (error: { code?: string; extras?: { firstRequestId?: string; changed?: unknown } }) => {
      assert.equal(error.code, 'idempotency_response_lost');
      assert.equal(error.extras?.firstRequestId, request.requestId);
      assert.equal((error.extras?.changed as Array<{ type: string }>).length, 1);
      return true;
    });
    const retry = await createSecret(request.key, name);
    assert.equal(retry.status, 409, retry.text);
    assert.equal(retry.body.code, 'idempotency_response_lost');
    assert.equal((await secretsNamed(name)).length, 1);
  });

  it('rolls back the change of a request whose key a retry took over while it ran: the retry runs in its place', async () => {
    const name = uniqueName('taken-over');
    const request = { subject: server.owner.clientId, key: randomUUID(), method: 'POST', path: '/v1/orgs/default/secrets', body: oneSecret(name), requestId: randomUUID() };
    const slow = await server.core.idempotency.admit(request);
    assert.equal(slow.kind, 'execute');
    // The first attempt stalls past the lock timeout without renewing (a frozen process, say), and a retry takes the key over.
    await server.core.db.updateTable('idempotency_keys').set({ locked_at: new Date(Date.now() - 61_000).toISOString() }).where('idempotency_key', '=', request.key).execute();
    const retry = await server.core.idempotency.admit({ ...request, requestId: randomUUID() });
    assert.equal(retry.kind, 'execute');
    if (slow.kind !== 'execute' || retry.kind !== 'execute') return;
    const ctxOf = (claim: typeof slow.claim, requestId: string) => ({ requestId, actor: { id: server.owner.clientId, kind: 'service_user' as const, orgId: server.bootstrap.orgId, role: 'owner' as const, instanceAdmin: false }, idempotency: claim });
    // The first attempt wakes up and makes its change: it must not commit, as the retry runs it.
    await assert.rejects(server.core.secrets.bulkCreate(ctxOf(slow.claim, request.requestId), server.bootstrap.orgId, oneSecret(name).secrets),
      (error: { code?: string }) => error.code === 'idempotency_request_in_progress');
    assert.equal((await secretsNamed(name)).length, 0, 'the stale attempt changed nothing');
    await server.core.secrets.bulkCreate(ctxOf(retry.claim, randomUUID()), server.bootstrap.orgId, oneSecret(name).secrets);
    assert.equal((await secretsNamed(name)).length, 1);
  });

  it('does not take over a key whose holder committed its change after the key was read as abandoned', async () => {
    const name = uniqueName('committed-while-read');
    const request = { subject: server.owner.clientId, key: randomUUID(), method: 'POST', path: '/v1/orgs/default/secrets', body: oneSecret(name), requestId: randomUUID() };
    const holder = await server.core.idempotency.admit(request);
    if (holder.kind !== 'execute') return assert.fail('the first attempt runs');
    await server.core.db.updateTable('idempotency_keys').set({ locked_at: new Date(Date.now() - 61_000).toISOString() }).where('idempotency_key', '=', request.key).execute();
    const seen = (await keyRow(request.key))!;
    // Between the retry's read and its takeover, the holder (slow, not dead) commits its change.
    await server.core.secrets.bulkCreate({ requestId: request.requestId, actor: { id: server.owner.clientId, kind: 'service_user', orgId: server.bootstrap.orgId, role: 'owner', instanceAdmin: false }, idempotency: holder.claim },
      server.bootstrap.orgId, oneSecret(name).secrets);
    const fresh = { ...seen, lock_token: randomUUID(), locked_at: new Date().toISOString(), committed_at: null, request_id: randomUUID() };
    assert.equal(await idempotencyRepo.takeOver(server.core.db, seen, fresh), false, 'the commit mark is not overwritten');
    // A renewal since the read stops a takeover too: its holder is alive.
    await server.core.db.updateTable('idempotency_keys').set({ committed_at: null }).where('idempotency_key', '=', request.key).execute();
    const reread = (await keyRow(request.key))!;
    await idempotencyRepo.renew(server.core.db, request.subject, request.key, holder.claim.lockToken, new Date().toISOString());
    assert.equal(await idempotencyRepo.takeOver(server.core.db, reread, fresh), false, 'a renewed hold is not taken over');
    assert.equal((await keyRow(request.key))!.lock_token, holder.claim.lockToken);
  });

  it('forgets a key after 24 hours: the request runs again, and pruning deletes the row', async () => {
    const key = randomUUID();
    const name = uniqueName('expiring');
    const first = await createSecret(key, name);
    assert.equal(first.status, 201);
    const dayAgo = new Date(Date.now() - 24 * 3_600_000 - 1_000).toISOString();
    await server.core.db.updateTable('idempotency_keys').set({ created_at: dayAgo }).where('idempotency_key', '=', key).execute();
    const again = await createSecret(key, name);
    // It ran: the name now exists, so the second run is a conflict, and no replay.
    assert.equal(again.status, 409, again.text);
    assert.equal(again.body.code, 'secret_exists');
    assert.equal(again.headers.get('idempotent-replayed'), null);
    assert.ok((await keyRow(key))!.created_at > dayAgo);

    await server.core.db.updateTable('idempotency_keys').set({ created_at: dayAgo }).where('idempotency_key', '=', key).execute();
    assert.ok((await server.core.idempotency.prune()) >= 1);
    assert.equal(await keyRow(key), undefined);

    // A backlog goes in batches, to the last row, and a newer key stays.
    const subject = `prune-${randomUUID()}`;
    const row = (k: string, at: string) => ({
      subject, idempotency_key: k, method: 'POST', path: '/v1/x', fingerprint: 'f', state: 'completed' as const, lock_token: 't', locked_at: at,
      status: 201, headers: '{}', body_sealed: null, created_at: at, completed_at: at, request_id: null, committed_at: null,
    });
    await server.core.db.insertInto('idempotency_keys').values([...Array.from({ length: 7 }, (_, i) => row(`old-${i}`, dayAgo)), row('new', new Date().toISOString())]).execute();
    assert.equal(await idempotencyRepo.deleteCreatedBefore(server.core.db, new Date(Date.now() - 3_600_000).toISOString(), 3), 7);
    assert.deepEqual((await server.core.db.selectFrom('idempotency_keys').select('idempotency_key').where('subject', '=', subject).execute()).map((r) => r.idempotency_key), ['new']);
  });

  it('keeps a service-user creation replayable without its client secret in plain text', async () => {
    const key = randomUUID();
    const body = { name: uniqueName('ci'), role: 'viewer' };
    const first = await server.owner.http.post('/v1/orgs/default/service-users', body, withKey(key));
    assert.equal(first.status, 201, first.text);
    const secret = first.body.clientSecret as string;
    const replay = await server.owner.http.post('/v1/orgs/default/service-users', body, withKey(key));
    assertReplayOf(replay, first);
    assert.equal(replay.headers.get('cache-control'), 'no-store');
    assert.equal(replay.body.clientSecret, secret);
    const row = await keyRow(key);
    assert.equal(row!.state, 'completed');
    for (const bytes of await rawDatabaseBytes(server)) assert.equal(bytes.indexOf(secret), -1);
  });

  it('answers a retry the route refuses now with that refusal, fresh: no Location of the first answer, no mark of a replay', async () => {
    const key = randomUUID();
    const body = { name: uniqueName('gone'), role: 'viewer' };
    const first = await server.owner.http.post('/v1/orgs/default/service-users', body, withKey(key));
    assert.equal(first.status, 201, first.text);
    assert.equal((await server.owner.http.delete(`/v1/orgs/default/service-users/${first.body.id}`)).status, 204);
    const retry = await server.owner.http.post('/v1/orgs/default/service-users', body, withKey(key));
    assertProblem(retry, 404, 'service_user_not_found');
    assert.equal(retry.headers.get('idempotent-replayed'), null);
    assert.equal(retry.headers.get('location'), null);
  });

  it('replays an answer kept by an older Slipway, whose response had fewer fields, as it was made', async () => {
    const key = randomUUID();
    const body = { name: uniqueName('kept-by-old'), role: 'viewer' as const };
    // What a Slipway from before `baseUrl` was part of the answer kept for this key.
    const made = await server.core.serviceUsers.create(cliContext(), server.owner.orgId, body);
    const { baseUrl: _, ...older } = made;
    const admission = await server.core.idempotency.admit({ subject: server.owner.clientId, key, method: 'POST', path: '/v1/orgs/default/service-users', body, requestId: randomUUID() });
    assert.equal(admission.kind, 'execute');
    const kept = Buffer.from(JSON.stringify({ body: older, user: made.id }));
    assert.equal(await server.core.idempotency.finish(admission.claim, { status: 201, headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' }, body: kept }, { retryAfter: false }), true);

    const replay = await server.owner.http.post('/v1/orgs/default/service-users', body, withKey(key));
    assert.equal(replay.status, 201, replay.text);
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(replay.body, older);
  });

  it('does nothing for a request without the header', async () => {
    const count = async () => (await server.core.db.selectFrom('idempotency_keys').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n;
    const before = Number(await count());
    const name = uniqueName('plain');
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', oneSecret(name))).status, 201);
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', oneSecret(name))).status, 409);
    assert.equal(Number(await count()), before);
  });

  it('takes a POST with no body and the same POST with {} as one request', async () => {
    const created = await server.owner.http.post('/v1/orgs/default/webhooks', { url: 'https://hooks.example.com/idem' });
    assert.equal(created.status, 201, created.text);
    const key = randomUUID();
    const first = await server.owner.http.post(`/v1/orgs/default/webhooks/${created.body.id}/rotate-secret`, undefined, withKey(key));
    assert.equal(first.status, 200, first.text);
    assertReplayOf(await server.owner.http.post(`/v1/orgs/default/webhooks/${created.body.id}/rotate-secret`, {}, withKey(key)), first);
  });

  it('refuses a key that is not 1-255 printable ASCII characters (400)', async () => {
    for (const key of ['k'.repeat(256), 'caf\u00e9']) {
      const res = await createSecret(key, uniqueName('bad-key'));
      assert.equal(res.status, 400, res.text);
      assert.equal(res.body.code, 'invalid_request');
      assert.deepEqual(res.body.errors.map((e: { pointer: string }) => e.pointer), ['/headers/idempotency-key']);
    }
    assert.equal((await createSecret('k'.repeat(255), uniqueName('long-key'))).status, 201);
  });

  it('refuses a key sent twice (400), which a proxy or client would otherwise join into a third key', async () => {
    const name = uniqueName('twice');
    const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      // fetch joins repeated headers into one line; node:http sends an array as separate lines.
      const req = httpRequest(`${server.url}/v1/orgs/default/secrets`, {
        method: 'POST', headers: { authorization: `Bearer ${server.owner.token}`, 'content-type': 'application/json', 'idempotency-key': ['k-one', 'k-two'] },
      }, (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => { text += chunk.toString(); }).on('end', () => resolve({ status: res.statusCode!, body: text }));
      });
      req.on('error', reject).end(JSON.stringify(oneSecret(name)));
    });
    assert.equal(status, 400, body);
    assert.deepEqual((JSON.parse(body) as { errors: unknown }).errors, [{ pointer: '/headers/idempotency-key', message: 'is sent more than once' }]);
    assert.equal((await secretsNamed(name)).length, 0);
    assert.equal(await keyRow('k-one, k-two'), undefined);
  });

  it('counts If-Match and If-None-Match as part of the request: a retry on another ETag is another request (422)', async () => {
    const name = uniqueName('preconditioned');
    assert.equal((await createSecret(randomUUID(), name)).status, 201);
    assert.equal((await server.owner.http.patch(`/v1/orgs/default/secrets/${name}`, { set: { TOKEN: 'second' } })).status, 200);
    const restore = (key: string, etag: string) => server.owner.http.post(`/v1/orgs/default/secrets/${name}/restore`, { version: 1 }, { headers: { 'idempotency-key': key, 'if-match': etag } });
    // A stale ETag's 412 is kept; re-read and retried under the same key, it is a new request, not that 412 again.
    const stale = randomUUID();
    assert.equal((await restore(stale, '"1"')).status, 412);
    assert.equal((await restore(stale, '"1"')).headers.get('idempotent-replayed'), 'true');
    assert.equal((await restore(stale, '"2"')).body.code, 'idempotency_key_reused');
    const key = randomUUID();
    const first = await restore(key, '"2"');
    assert.equal(first.status, 200, first.text);
    assertReplayOf(await restore(key, '"2"'), first);
    assert.equal((await restore(key, '"3"')).status, 422);
    const versions = await server.owner.http.get(`/v1/orgs/default/secrets/${name}/versions`);
    assert.deepEqual(versions.body.versions.map((v: { version: number }) => v.version), [3, 2, 1]);
  });

  it('documents the header, 409 and 422 on every POST of the API but a runner\'s adoption, serving report and release, and nowhere else', async () => {
    const doc = (await server.http().get('/openapi.json')).body;
    // An adoption's answer hands out work (a lost answer is what the host timeout is for); a
    // serving report and a release say the same each time, and an old answer replayed would be wrong.
    const notKept = new Set(['/v1/orgs/{orgId}/runner/adopt', '/v1/orgs/{orgId}/runner/serving', '/v1/orgs/{orgId}/runner/release']);
    let posts = 0;
    for (const [path, item] of Object.entries<Record<string, any>>(doc.paths)) {
      for (const [method, op] of Object.entries<any>(item)) {
        const header = (op.parameters ?? []).find((p: any) => p.in === 'header' && p.name === 'idempotency-key');
        if (method === 'post' && path.startsWith('/v1/') && !notKept.has(path)) {
          posts++;
          assert.ok(header, `${method} ${path} lacks Idempotency-Key`);
          assert.equal(header.required, false);
          assert.ok('409' in op.responses && '422' in op.responses, `${method} ${path} lacks 409/422`);
        } else {
          assert.equal(header, undefined, `${method} ${path} should not take Idempotency-Key`);
        }
      }
    }
    assert.ok(posts >= 4);
  });

  it('replays a reveal without keeping its values: the same version again, byte for byte, one event; another body is 422', async () => {
    const name = uniqueName('revealed');
    const sentinel = `kept-nowhere-${randomUUID()}`;
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name, values: { K: sentinel } }] })).status, 201);
    const path = `/v1/orgs/default/secrets/${name}/reveal`;
    const key = randomUUID();
    const first = await server.owner.http.post(path, {}, withKey(key));
    assert.equal(first.status, 200, first.text);
    assert.deepEqual(first.body, { name, version: 1, values: { K: sentinel } });
    assert.equal(first.headers.get('idempotent-replayed'), null);
    // A newer version meanwhile: the replay still answers with the version the first reveal returned.
    assert.equal((await server.owner.http.put(`/v1/orgs/default/secrets/${name}`, { values: { K: 'second' } })).status, 200);
    const retries = await Promise.all(Array.from({ length: 20 }, () => server.owner.http.post(path, {}, withKey(key))));
    for (const retry of retries) {
      assertReplayOf(retry, first);
      assert.equal(retry.headers.get('cache-control'), 'no-store');
    }
    const other = await server.owner.http.post(path, { version: 2 }, withKey(key));
    assert.equal(other.status, 422, other.text);

    const revealed = await eventually('the reveal event', async () => {
      const events = (await server.owner.http.get('/v1/orgs/default/events?type=secret.revealed&limit=200')).body.events.filter((e: any) => e.data.name === name);
      return events.length > 0 ? events : undefined;
    });
    await sleep(200);
    assert.equal((await server.owner.http.get('/v1/orgs/default/events?type=secret.revealed&limit=200')).body.events.filter((e: any) => e.data.name === name).length, 1, JSON.stringify(revealed));
    // What is kept is the version number, sealed like every kept response; the value is nowhere in the database.
    const kept = await server.core.idempotency.admit({ subject: server.owner.clientId, key, method: 'POST', path, body: {}, requestId: randomUUID() });
    assert.equal(kept.kind, 'replay');
    assert.deepEqual(kept.kind === 'replay' && Object.keys(JSON.parse(kept.response.body.toString('utf8'))), ['secretId', 'version']);
    assert.equal(kept.kind === 'replay' && JSON.parse(kept.response.body.toString('utf8')).version, 1);
    for (const bytes of await rawDatabaseBytes(server)) assert.equal(bytes.indexOf(sentinel), -1, 'the value reached the database files in plain text');

    // Deleted since: a replay answers as any reveal of it would.
    assert.equal((await server.owner.http.delete(`/v1/orgs/default/secrets/${name}`)).status, 204);
    assert.equal((await server.owner.http.post(path, {}, withKey(key))).status, 404);
    // Deleted permanently and created again under its name: the replay does not reveal the newcomer.
    assert.equal((await server.owner.http.delete(`/v1/orgs/default/secrets/${name}?permanent=true`)).status, 204);
    assert.equal((await server.owner.http.post('/v1/orgs/default/secrets', { secrets: [{ name, values: { K: 'newcomer' } }] })).status, 201);
    const after = await server.owner.http.post(path, {}, withKey(key));
    assert.equal(after.status, 404, after.text);
    assert.ok(!after.text.includes('newcomer'));
  });

  it('still replays after a restart (all state is in the database)', async () => {
    const key = randomUUID();
    const name = uniqueName('restart');
    const first = await createSecret(key, name);
    assert.equal(first.status, 201);
    assert.deepEqual(server.undeclared, []);
    server = await server.restart();
    assertReplayOf(await createSecret(key, name), first);
    assert.equal((await secretsNamed(name)).length, 1);
  });

  it('answered no status a route did not declare', () => {
    assert.deepEqual(server.undeclared, []);
  });
});
