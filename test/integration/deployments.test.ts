// Deployments through the API: create, list, get, the frozen snapshot, cancel, rollback,
// superseded, one in progress per service and environment, and every illegal transition.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { compareAndSet } from '../../src/modules/deployments/deployment-state.js';
import { DEPLOYMENT_STATES, allowedFrom, canTransition, type DeploymentState } from '../../src/modules/deployments/deployment-states.js';
import { SYSTEM_CONTEXT } from '../../src/platform/context.js';
import { CompiledQuery, sql } from 'kysely';
import { deploymentsRepo } from '../../src/modules/deployments/deployments.repo.js';
import { TEST_DB, type Actor, type TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';
import {
  createEnvironment, createService, deploy, eventsOf, eventsSettled, holding, lockWaiters, getDeployment, newRunner, ship, startDeployFixture, unique, type DeployFixture, type RunnerClient,
} from '../support/deployments.js';

describe('deployments', () => {
  let f: DeployFixture;
  let server: TestServer;
  let orgId: string;
  let admin: Actor;
  let developer: Actor;
  let viewer: Actor;
  let runner: RunnerClient;

  before(async () => {
    f = await startDeployFixture();
    ({ server, orgId, admin, developer, viewer, runner } = f);
  });
  after(() => f.close());

  /** A fresh environment and service, so claims in one test never see another test's deployments. */
  async function pair(spec?: Record<string, unknown>) {
    const env = await createEnvironment(admin.http, orgId);
    const svc = await createService(developer.http, orgId, spec ? { spec } : {});
    return {
      env, svc,
      claim: () => runner.take({ environments: [env.id], waitSeconds: 0 }),
      ship: (body: Record<string, unknown> = {}, outcome?: 'succeeded' | 'failed') => ship(developer.http, runner, orgId, { service: svc.id, environment: env.id, ...body }, outcome),
    };
  }

  it('pages what is active in an environment by service, so a service deployed again meanwhile is listed once', async () => {
    const env = await createEnvironment(admin.http, orgId);
    const services = [];
    for (let i = 0; i < 3; i++) services.push(await createService(developer.http, orgId));
    const shipTo = (svc: { id: string }) => ship(developer.http, runner, orgId, { service: svc.id, environment: env.id });
    for (const svc of services) await shipTo(svc);
    const url = `/v1/orgs/${orgId}/environments/${env.id}/active`;
    const first = await viewer.http.get(`${url}?limit=2`);
    assert.equal(first.status, 200, first.text);
    assert.equal(first.body.deployments.length, 2);
    // Every service deployed again while the client is between pages, listed ones and the rest alike.
    for (const svc of services) await shipTo(svc);
    const second = await viewer.http.get(`${url}?limit=2&cursor=${first.body.nextCursor}`);
    assert.equal(second.status, 200, second.text);
    const seen = [...first.body.deployments, ...second.body.deployments].map((d: any) => d.service.id);
    assert.deepEqual(seen, services.map((s) => s.id).sort());
    assert.equal(second.body.nextCursor, null);
  });

  it('names a rollback by today\'s names of its service and environment, and keeps the spec and versions it rolls back to', async () => {
    const p = await pair({ command: ['v1'] });
    const first = await p.ship({ revision: 'r1' });
    assert.equal((await developer.http.patch(`/v1/orgs/${orgId}/services/${p.svc.id}`, { spec: { command: ['v2'] } })).status, 200);
    await p.ship({ revision: 'r2' });
    const envName = unique('renamed-env');
    const svcName = unique('renamed-svc');
    assert.equal((await admin.http.patch(`/v1/orgs/${orgId}/environments/${p.env.id}`, { name: envName })).status, 200);
    assert.equal((await developer.http.patch(`/v1/orgs/${orgId}/services/${p.svc.id}`, { name: svcName })).status, 200);
    const rolled = await developer.http.post(`/v1/orgs/${orgId}/deployments/${first.deployment.id}/rollback`);
    assert.equal(rolled.status, 201, rolled.text);
    assert.deepEqual([rolled.body.service, rolled.body.environment], [{ id: p.svc.id, name: svcName, version: 1 }, { id: p.env.id, name: envName }]);
    assert.deepEqual(rolled.body.spec, first.deployment.spec);
    const created = (await eventsOf(server, orgId, rolled.body.id))[0];
    assert.deepEqual([created.data.service.name, created.data.environment.name], [svcName, envName]);
    // The deployment rolled back to keeps the names it was made with.
    assert.equal((await getDeployment(viewer.http, orgId, first.deployment.id)).service.name, p.svc.name);
  });

  it('holds a service\'s variables with a deployment\'s overrides to a spec\'s bound', async () => {
    const variables = Object.fromEntries(Array.from({ length: 400 }, (_, i) => [`SVC_${i}`, 'x']));
    const p = await pair({ command: ['a'], variables });
    const overrides = Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`DEPLOY_${i}`, 'y']));
    const refused = await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: p.svc.id, environment: p.env.id, variables: overrides });
    assertProblem(refused, 400, 'limit_exceeded');
    assert.deepEqual(refused.body.limit, { name: 'variables', value: 500 });
    assert.equal(refused.body.errors[0].pointer, '/variables');
    delete overrides.DEPLOY_100;
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: p.svc.id, environment: p.env.id, variables: { ...overrides, SVC_0: 'over' } })).status, 201);
  });

  it('creates a deployment by names or ids and shows it', async () => {
    const { env, svc } = await pair({ command: ['node', 'app.js'], port: 3000, healthCheck: { path: '/health', timeoutSeconds: 5 }, variables: { MODE: 'a', KEEP: 'k' } });
    const res = await developer.http.post(`/v1/orgs/${orgId}/deployments`, {
      service: svc.name, environment: env.name, revision: 'v1.2.3', description: 'first', variables: { MODE: 'b', EXTRA: 'e' },
    });
    assert.equal(res.status, 201, res.text);
    const d = res.body;
    assert.match(d.id, /^dep_[0-9a-z]{26}$/);
    assert.deepEqual(
      { service: d.service, environment: d.environment, state: d.state, attempt: d.attempt, revision: d.revision, description: d.description, createdBy: d.createdBy },
      { service: { id: svc.id, name: svc.name, version: 1 }, environment: { id: env.id, name: env.name }, state: 'queued', attempt: 1, revision: 'v1.2.3', description: 'first', createdBy: developer.id },
    );
    assert.deepEqual(d.spec, {
      command: ['node', 'app.js'], port: 3000, healthCheck: { path: '/health', timeoutSeconds: 5 }, variables: { MODE: 'b', KEEP: 'k', EXTRA: 'e' }, secrets: [],
    });
    for (const absent of ['startedAt', 'finishedAt', 'reason', 'lease', 'rollbackOf']) assert.ok(!(absent in d), absent);
    assert.deepEqual(await getDeployment(viewer.http, orgId, d.id), d);

    const byIds = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    assert.equal(byIds.revision, null);
    // What a deployment shows can be sent back: a null revision is none.
    assert.equal((await deploy(developer.http, orgId, { service: svc.id, environment: env.id, revision: null })).revision, null);

    for (const [body, status, pointer] of [
      [{ service: 'nope', environment: env.id }, 404, '/service'],
      [{ service: svc.id, environment: 'nope' }, 404, '/environment'],
      [{ service: svc.id }, 400, '/environment'],
      [{ service: svc.id, environment: env.id, variables: { 'bad name': 'x' } }, 400, '/variables/bad name'],
      [{ service: svc.id, environment: env.id, revision: 'r'.repeat(201) }, 400, '/revision'],
    ] as const) {
      const res = await developer.http.post(`/v1/orgs/${orgId}/deployments`, body);
      assert.equal(res.status, status, res.text);
      assert.equal(res.body.errors?.[0]?.pointer, pointer, res.text);
    }
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/deployments/dep_00000000000000000000000000`)).status, 404);

    const created = (await eventsOf(server, orgId, d.id))[0];
    assert.equal(created.type, 'deployment.created');
    assert.deepEqual(created.data.environment, { id: env.id, name: env.name });
  });

  it('freezes the spec and the secret versions: later changes reach only later deployments', async () => {
    const secret = unique('db');
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { DB_URL: 'postgres://one', DB_PASSWORD: 'pw-one' } }] })).status, 201);
    const { env, svc, claim } = await pair({ command: ['run'], variables: { GREETING: 'hello' }, secrets: [{ secret, key: 'DB_URL', as: 'DATABASE_URL' }, { secret }] });
    const first = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const secretId = first.spec.secrets[0].secretId;
    assert.equal(typeof secretId, 'string');
    assert.deepEqual(first.spec.secrets, [{ secret, secretId, key: 'DB_URL', as: 'DATABASE_URL', version: 1 }, { secret, secretId, version: 1 }]);

    const changed = await developer.http.put(`/v1/orgs/${orgId}/secrets/${secret}`, { values: { DB_URL: 'postgres://two', DB_PASSWORD: 'pw-two' } });
    assert.equal(changed.status, 200, changed.text);
    assert.equal((await developer.http.patch(`/v1/orgs/${orgId}/services/${svc.id}`, { spec: { command: ['run', '--v2'], variables: { GREETING: 'bonjour' }, secrets: [{ secret }] } })).status, 200);
    const second = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });

    assert.deepEqual(await getDeployment(viewer.http, orgId, first.id), first);
    const one = await claim();
    assert.equal(one.deployment.id, first.id);
    assert.deepEqual(one.run, {
      command: ['run'], variables: { GREETING: 'hello' },
      secrets: { DATABASE_URL: 'postgres://one', DB_URL: 'postgres://one', DB_PASSWORD: 'pw-one' },
    });
    assert.equal((await runner.complete(first.id, one.lease.token)).status, 200);
    const two = await claim();
    assert.equal(two.deployment.id, second.id);
    assert.equal(two.deployment.service.version, 2);
    assert.deepEqual(two.run, { command: ['run', '--v2'], variables: { GREETING: 'bonjour' }, secrets: { DB_URL: 'postgres://two', DB_PASSWORD: 'pw-two' } });
    assert.equal((await runner.complete(second.id, two.lease.token)).status, 200);
  });

  it('refuses a variable set twice, pointing at the deployment\'s own variable, or into the service when its secret changed', async () => {
    const secret = unique('keys');
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { API_KEY: 'k' } }] })).status, 201);
    const { env, svc } = await pair({ command: ['x'], variables: { MODE: 'a' }, secrets: [{ secret }] });
    const clash = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/deployments`, {
      service: svc.id, environment: env.id, variables: { MODE: 'b', API_KEY: 'x' },
    }), 422, 'variable_conflict');
    assert.deepEqual(clash.errors, [{ pointer: '/variables/API_KEY', message: `API_KEY comes from secret "${secret}" and from the deployment's variables` }]);
    // Laid over the service's plain variables is what they are for.
    assert.deepEqual((await deploy(developer.http, orgId, { service: svc.id, environment: env.id, variables: { MODE: 'b' } })).spec.variables, { MODE: 'b' });

    // The secret now exports MODE too: the clash is the service's, whatever the request says.
    assert.equal((await developer.http.put(`/v1/orgs/${orgId}/secrets/${secret}`, { values: { API_KEY: 'k', MODE: 'm' } })).status, 200);
    const changed = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.id, environment: env.id }), 422, 'variable_conflict');
    assert.deepEqual(changed.errors, [{ pointer: '/service/spec/secrets/0', message: `MODE comes from a plain variable and from secret "${secret}"` }]);
  });

  it('refuses PORT in its own variables, from a secret that gained a PORT key since, and from a service saved with it', async () => {
    const secret = unique('cfg');
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { LOG: 'debug' } }] })).status, 201);
    const { env, svc } = await pair({ command: ['x'], secrets: [{ secret }] });
    const own = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/deployments`, {
      service: svc.id, environment: env.id, variables: { MODE: 'b', PORT: '80' },
    }), 422, 'reserved_variable');
    assert.deepEqual(own.errors, [{ pointer: '/variables/PORT', message: 'PORT is set by the deployment\'s variables' }]);

    assert.equal((await developer.http.put(`/v1/orgs/${orgId}/secrets/${secret}`, { values: { LOG: 'debug', PORT: '9000' } })).status, 200);
    const gained = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.id, environment: env.id }), 422, 'reserved_variable');
    assert.deepEqual(gained.errors, [{ pointer: '/service/spec/secrets/0', message: `PORT is set by secret "${secret}", exported whole, whose version 2 holds a key PORT` }]);

    // A spec saved before PORT was refused: the deployment would freeze it, so it is refused there.
    await server.core.db.updateTable('services').set({ spec: JSON.stringify({ command: ['x'], variables: { PORT: '3000' }, secrets: [] }) }).where('id', '=', svc.id).execute();
    const saved = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.id, environment: env.id }), 422, 'reserved_variable');
    assert.deepEqual((saved.errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/service/spec/variables/PORT']);
    assert.deepEqual((await viewer.http.get(`/v1/orgs/${orgId}/deployments?service=${svc.id}`)).body.deployments, []);
  });

  it('bounds the spec it freezes as a service\'s is: the service\'s with its variables laid over, in bytes of JSON', async () => {
    const limit = server.config.limits.specBytes;
    const base = Buffer.byteLength(JSON.stringify({ command: ['x'], variables: { FILL: '' }, secrets: [] }));
    const { env, svc } = await pair({ command: ['x'], variables: { FILL: 'x'.repeat(limit - base) } });
    // At the bound, it deploys as it is, and with variables that keep its size.
    await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    await deploy(developer.http, orgId, { service: svc.id, environment: env.id, variables: { FILL: 'y'.repeat(limit - base) } });

    const over = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.id, environment: env.id, variables: { MORE: 'z' } }), 400, 'limit_exceeded');
    assert.deepEqual(over.limit, { name: 'SLIPWAY_MAX_SPEC_BYTES', value: limit });
    assert.deepEqual((over.errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/variables']);

    // A service saved before the bound (or under a higher one) is what to change, whatever the request says.
    await server.core.db.updateTable('services').set({ spec: JSON.stringify({ command: ['x'], variables: { FILL: 'x'.repeat(limit) }, secrets: [] }) }).where('id', '=', svc.id).execute();
    const saved = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.id, environment: env.id }), 400, 'limit_exceeded');
    assert.deepEqual((saved.errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/service']);
    assert.match(String(saved.detail), /^The service's spec is \d+ bytes as JSON; the limit is \d+ \(SLIPWAY_MAX_SPEC_BYTES\)\.$/);
    assert.equal((await viewer.http.get(`/v1/orgs/${orgId}/deployments?service=${svc.id}`)).body.deployments.length, 2);
  });

  it('lists with filters by service, environment and state, newest first, with a cursor', async () => {
    const org = (await server.createOrg()).id;
    const [adm, dev, run] = [await server.actor(org, 'admin'), await server.actor(org, 'developer'), await newRunner(server, org)];
    const envs = [await createEnvironment(adm.http, org), await createEnvironment(adm.http, org)];
    const svcs = [await createService(dev.http, org), await createService(dev.http, org)];
    const made: any[] = [];
    for (const svc of svcs) for (const env of envs) made.push(await deploy(dev.http, org, { service: svc.name, environment: env.name }));
    const claimed = await run.take();
    assert.equal(claimed.deployment.id, made[0].id);
    assert.equal((await dev.http.post(`/v1/orgs/${org}/deployments/${made[3].id}/cancel`)).status, 200);

    const ids = async (query: string) => {
      const out: string[] = [];
      let cursor: string | null = null;
      do {
        const res: any = await dev.http.get(`/v1/orgs/${org}/deployments?limit=1${query}${cursor ? `&cursor=${cursor}` : ''}`);
        assert.equal(res.status, 200, res.text);
        out.push(...res.body.deployments.map((d: any) => d.id));
        cursor = res.body.nextCursor;
      } while (cursor !== null);
      return out;
    };
    const newestFirst = (list: any[]) => list.map((d) => d.id).reverse();
    assert.deepEqual(await ids(''), newestFirst(made));
    assert.deepEqual(await ids(`&service=${svcs[1].name}`), newestFirst(made.slice(2)));
    assert.deepEqual(await ids(`&environment=${envs[0].id}`), newestFirst([made[0], made[2]]));
    assert.deepEqual(await ids('&state=queued'), newestFirst([made[1], made[2]]));
    assert.deepEqual(await ids('&state=in_progress&state=cancelled'), newestFirst([made[0], made[3]]));
    assert.deepEqual(await ids(`&service=${svcs[0].id}&environment=${envs[1].name}&state=queued`), [made[1].id]);
    assert.equal((await dev.http.get(`/v1/orgs/${org}/deployments?state=running`)).status, 400);
    assert.equal((await dev.http.get(`/v1/orgs/${org}/deployments?service=unknown`)).status, 404);
  });

  it('pages a service\'s deployments through the service\'s index, in a state too, not the organization\'s deployments', async () => {
    for (const [states, after] of [[undefined, null], [['failed'], null], [['failed'], 'dep_x'], [['queued', 'in_progress'], 'dep_x']] as const) {
      const { sql: text, parameters } = deploymentsRepo.listQuery(server.core.db, TEST_DB, orgId, { serviceId: 'svc_x', states: states && [...states], after, limit: 50 }).compile();
      if (TEST_DB === 'sqlite') {
        const plan = (await server.core.db.executeQuery<{ detail: string }>(CompiledQuery.raw(`explain query plan ${text}`, [...parameters]))).rows.map((r) => r.detail).join('\n');
        assert.match(plan, /USING INDEX deployments_service \(service_id=\?/, `${String(states)}: ${plan}`);
        assert.doesNotMatch(plan, /TEMP B-TREE/);
        continue;
      }
      // PostgreSQL, on a table this small, would read it whole: told not to, it shows the index serves.
      const plan = await server.core.db.transaction().execute(async (trx) => {
        await sql`set local enable_seqscan = off`.execute(trx);
        return trx.executeQuery<{ 'QUERY PLAN': string }>(CompiledQuery.raw(`explain ${text}`, [...parameters]));
      });
      assert.match(plan.rows.map((r) => r['QUERY PLAN']).join('\n'), /deployments_service/, String(states));
    }
  });

  it('keeps one deployment in progress per service and environment; later ones wait their turn', async () => {
    const { env, svc, claim } = await pair();
    const other = await createEnvironment(admin.http, orgId);
    const first = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const second = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const elsewhere = await deploy(developer.http, orgId, { service: svc.id, environment: other.id });

    const a = await claim();
    assert.equal(a.deployment.id, first.id);
    assert.equal((await runner.claim({ environments: [env.id], waitSeconds: 0 })).status, 204);
    const b = await runner.take({ environments: [other.id], waitSeconds: 0 });
    assert.equal(b.deployment.id, elsewhere.id);

    // The database refuses a second one too, whoever asks.
    await assert.rejects(server.core.db.transaction().execute((trx) => compareAndSet(trx, SYSTEM_CONTEXT, {
      orgId, id: second.id, from: 'queued', to: 'in_progress',
    })), (error: any) => /unique|UNIQUE/.test(String(error.message)) || error.code === '23505');
    assert.equal((await getDeployment(viewer.http, orgId, second.id)).state, 'queued');

    assert.equal((await runner.complete(first.id, a.lease.token, 'failed', 'boom')).status, 200);
    assert.equal((await claim()).deployment.id, second.id);
  });

  it('cancels a queued and an in-progress deployment; the runner is told to stop and changes nothing', async () => {
    const { env, svc, claim } = await pair();
    const queued = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const cancelled = await developer.http.post(`/v1/orgs/${orgId}/deployments/${queued.id}/cancel`);
    assert.equal(cancelled.status, 200, cancelled.text);
    assert.equal(cancelled.body.state, 'cancelled');
    assert.equal(cancelled.body.reason, `Cancelled by ${developer.id}.`);
    assert.ok(cancelled.body.finishedAt);

    const running = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const c = await claim();
    assert.equal(c.deployment.id, running.id);
    assert.equal((await runner.logs(running.id, { leaseToken: c.lease.token, lines: [{ line: 'starting' }] })).status, 200);
    const stop = await developer.http.post(`/v1/orgs/${orgId}/deployments/${running.id}/cancel`, { reason: 'wrong revision' });
    assert.equal(stop.status, 200);
    assert.equal(stop.body.reason, 'wrong revision');
    for (const res of [
      await runner.heartbeat(running.id, c.lease.token),
      await runner.logs(running.id, { leaseToken: c.lease.token, lines: [{ line: 'still going' }] }),
      await runner.complete(running.id, c.lease.token),
    ]) {
      assert.equal(res.status, 409);
      assert.equal(res.body.code, 'deployment_cancelled');
    }
    const after = await getDeployment(viewer.http, orgId, running.id);
    assert.equal(after.state, 'cancelled');
    const logs = await viewer.http.get(`/v1/orgs/${orgId}/deployments/${running.id}/logs`);
    assert.deepEqual(logs.body.lines.map((l: any) => l.line), ['starting']);
    assert.deepEqual((await eventsOf(server, orgId, running.id)).filter((e) => e.type === 'deployment.state_changed').map((e) => [e.data.from, e.data.to]),
      [['queued', 'in_progress'], ['in_progress', 'cancelled']]);
  });

  it('keeps another organization\'s real deployments, services and environments out of reach: 404, and nothing changes', async () => {
    const p = await pair();
    const served = await p.ship();
    const queued = await deploy(developer.http, orgId, { service: p.svc.id, environment: p.env.id, revision: 'waiting' });
    const other = (await server.createOrg()).id;
    const [outsider, outsiderRunner] = [await server.actor(other, 'owner'), await newRunner(server, other)];
    const theirs = `/v1/orgs/${other}`;
    const refused = [
      await outsider.http.get(`${theirs}/deployments/${queued.id}`),
      await outsider.http.get(`${theirs}/deployments/${served.deployment.id}/logs`),
      await outsider.http.post(`${theirs}/deployments/${queued.id}/cancel`, {}),
      await outsider.http.post(`${theirs}/deployments/${served.deployment.id}/rollback`),
      await outsider.http.post(`${theirs}/deployments`, { service: p.svc.id, environment: p.env.id }),
      await outsider.http.get(`${theirs}/deployments?service=${p.svc.id}`),
      await outsider.http.get(`${theirs}/environments/${p.env.id}/active`),
    ];
    for (const res of refused) assert.equal(res.status, 404, res.text);
    // Their runner neither claims ours nor reaches one it was never handed.
    assert.equal((await outsiderRunner.claim({ environments: [p.env.id], waitSeconds: 0 })).status, 404);
    assert.equal((await outsiderRunner.claim({ waitSeconds: 0 })).status, 204);
    for (const res of [
      await outsiderRunner.heartbeat(queued.id, 'no-such-lease'),
      await outsiderRunner.logs(queued.id, { leaseToken: 'no-such-lease', lines: [{ stream: 'stdout', line: 'x' }] }),
      await outsiderRunner.complete(queued.id, 'no-such-lease'),
    ]) assert.equal(res.status, 404, res.text);

    assert.equal((await getDeployment(developer.http, orgId, queued.id)).state, 'queued');
    assert.equal((await getDeployment(developer.http, orgId, served.deployment.id)).state, 'succeeded');
    assert.deepEqual((await outsider.http.get(`${theirs}/deployments`)).body.deployments, []);
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments/${queued.id}/cancel`, {})).status, 200);
  });

  it('answers every 201 of a single resource with its Location, by id, which reads it back', async () => {
    const read = async (res: { status: number; headers: Headers; body: any; text: string }, pattern: RegExp) => {
      assert.equal(res.status, 201, res.text);
      const location = res.headers.get('location');
      assert.ok(location !== null && location.startsWith(`${server.config.baseUrl}/v1/`), `Location ${location} should be under ${server.config.baseUrl}`);
      const path = new URL(location).pathname;
      assert.ok(pattern.test(path), `Location ${location} should match ${pattern}`);
      assert.ok(path.endsWith(`/${res.body.id}`), location);
      const back = await server.owner.http.get(path);
      assert.equal(back.status, 200, back.text);
      assert.equal(back.body.id, res.body.id);
    };
    const id = (prefix: string) => `${prefix}_[0-9a-z]+`;
    const org = await server.owner.http.post('/v1/orgs', { slug: unique('loc'), name: 'Location' });
    await read(org, new RegExp(`^/v1/orgs/${id('org')}$`));
    const env = await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: unique('env') });
    await read(env, new RegExp(`^/v1/orgs/${orgId}/environments/${id('env')}$`));
    const svc = await developer.http.post(`/v1/orgs/${orgId}/services`, { name: unique('svc'), spec: { command: ['v1'] } });
    await read(svc, new RegExp(`^/v1/orgs/${orgId}/services/${id('svc')}$`));
    const su = await admin.http.post(`/v1/orgs/${orgId}/service-users`, { name: unique('su'), role: 'viewer' });
    await read(su, new RegExp(`^/v1/orgs/${orgId}/service-users/${id('su')}$`));
    const shipped = await ship(developer.http, runner, orgId, { service: svc.body.id, environment: env.body.id });
    const rollback = await developer.http.post(`/v1/orgs/${orgId}/deployments/${shipped.deployment.id}/rollback`, {});
    await read(rollback, new RegExp(`^/v1/orgs/${orgId}/deployments/${id('dep')}$`));
    const made = await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.body.name, environment: env.body.name });
    await read(made, new RegExp(`^/v1/orgs/${orgId}/deployments/${id('dep')}$`));
  });


  it('never loses a deployment created while its environment or service is being deleted, nor answers 500', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    // Another session holds a row lock that stops the deletion at a chosen step while a deployment
    // is created, then lets go. Whatever order the two end in, the deployment is not deleted
    // behind its creator's back: either the deletion is 409 and the deployment stays, or the
    // deletion goes through and the creation is 404.
    for (const [kind, step] of [['environment', 'logs'], ['environment', 'row'], ['service', 'logs'], ['service', 'row']] as const) {
      const { env, svc } = await pair();
      // A finished deployment with a log line, which the deletion removes first.
      const made = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
      const claim = await runner.take({ environments: [env.id], waitSeconds: 0 });
      assert.equal((await runner.logs(made.id, { leaseToken: claim.lease.token, lines: [{ line: 'x' }] })).status, 200);
      assert.equal((await runner.complete(made.id, claim.lease.token)).status, 200);
      const [table, id] = step === 'logs' ? ['deployment_logs', made.id] : kind === 'environment' ? ['environments', env.id] : ['services', svc.id];
      const column = step === 'logs' ? 'deployment_id' : 'id';

      const commit = await holding(server, (trx) => sql`select 1 from ${sql.table(table)} where ${sql.ref(column)} = ${id} for update`.execute(trx));
      const deletion = admin.http.delete(kind === 'environment' ? `/v1/orgs/${orgId}/environments/${env.id}?force=true` : `/v1/orgs/${orgId}/services/${svc.id}?force=true`);
      await lockWaiters(server, 1);
      const creation = developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.id, environment: env.id });
      // Held at its logs, the deletion has passed its check and the creation goes through now;
      // held at the row, the creation waits for it too (its foreign key).
      if (step === 'logs') await creation;
      else await lockWaiters(server, 2);
      await commit();
      const [deleted, created] = await Promise.all([deletion, creation]);

      const what = `${kind}, held at its ${step}: DELETE ${deleted.status} ${deleted.text}; POST ${created.status} ${created.text}`;
      if (deleted.status === 204) {
        assert.equal(created.status, 404, what);
        assert.equal(created.body.code, `${kind}_not_found`, what);
      } else {
        assert.equal(deleted.status, 409, what);
        assert.equal(deleted.body.code, `${kind}_in_use`, what);
        assert.equal(created.status, 201, what);
        assert.equal((await getDeployment(viewer.http, orgId, created.body.id)).state, 'queued', what);
        assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments/${created.body.id}/cancel`, {})).status, 200);
      }
    }
  });

  it('answers 404, not 500, to a change of an environment or service that a concurrent request deleted', { skip: TEST_DB !== 'postgres' && 'SQLite runs one writer at a time' }, async () => {
    for (const kind of ['environment', 'service'] as const) {
      const { env, svc } = await pair();
      const [table, id, path] = kind === 'environment' ? ['environments', env.id, `/v1/orgs/${orgId}/environments/${env.id}`] : ['services', svc.id, `/v1/orgs/${orgId}/services/${svc.id}`];
      const commit = await holding(server, (trx) => sql`select 1 from ${sql.table(table)} where id = ${id} for update`.execute(trx));
      const deletion = admin.http.delete(path);
      await lockWaiters(server, 1);
      const change = admin.http.patch(path, { description: 'changed' });
      await lockWaiters(server, 2);
      await commit();
      const [deleted, changed] = await Promise.all([deletion, change]);
      assert.equal(deleted.status, 204, deleted.text);
      assert.equal(changed.status, 404, changed.text);
      assert.equal(changed.body.code, `${kind}_not_found`);
    }
  });

  it('rolls back to an earlier succeeded deployment with its exact snapshot, superseding what serves', async () => {
    const secret = unique('api-key');
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { KEY: 'one' } }] })).status, 201);
    const p = await pair({ command: ['v1'], secrets: [{ secret }] });
    const { env, svc, claim } = p;
    const a = await p.ship({ revision: 'r1' });
    assert.equal((await developer.http.put(`/v1/orgs/${orgId}/secrets/${secret}`, { values: { KEY: 'two' } })).status, 200);
    assert.equal((await developer.http.patch(`/v1/orgs/${orgId}/services/${svc.id}`, { spec: { command: ['v2'], secrets: [{ secret }] } })).status, 200);
    const b = await p.ship({ revision: 'r2' });
    assert.equal((await getDeployment(viewer.http, orgId, a.deployment.id)).state, 'superseded');
    assert.equal((await getDeployment(viewer.http, orgId, a.deployment.id)).reason, `Superseded by ${b.deployment.id}.`);

    const rolled = await developer.http.post(`/v1/orgs/${orgId}/deployments/${a.deployment.id}/rollback`);
    assert.equal(rolled.status, 201, rolled.text);
    assert.deepEqual({ state: rolled.body.state, rollbackOf: rolled.body.rollbackOf, revision: rolled.body.revision, spec: rolled.body.spec },
      { state: 'queued', rollbackOf: a.deployment.id, revision: 'r1', spec: a.deployment.spec });
    const c = await claim();
    assert.equal(c.deployment.id, rolled.body.id);
    assert.deepEqual(c.run, a.claim.run);
    assert.deepEqual(c.run.secrets, { KEY: 'one' });
    assert.equal((await runner.complete(rolled.body.id, c.lease.token)).status, 200);
    assert.equal((await getDeployment(viewer.http, orgId, b.deployment.id)).state, 'superseded');
    const active = await viewer.http.get(`/v1/orgs/${orgId}/environments/${env.id}/active`);
    assert.deepEqual(active.body.deployments.map((d: any) => d.id), [rolled.body.id]);
    assert.equal((await eventsOf(server, orgId, rolled.body.id))[0].data.rollbackOf, a.deployment.id);

    const failed = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const f = await claim();
    assert.equal((await runner.complete(failed.id, f.lease.token, 'failed', 'health check failed')).status, 200);
    for (const id of [failed.id, (await deploy(developer.http, orgId, { service: svc.id, environment: env.id })).id]) {
      const refused = await developer.http.post(`/v1/orgs/${orgId}/deployments/${id}/rollback`, { description: 'try' });
      assert.equal(refused.status, 409);
      assert.equal(refused.body.code, 'not_rollbackable');
    }
  });

  it('refuses a rollback whose pinned secret versions were deleted permanently, writing nothing; a soft delete keeps it', async () => {
    // An organization of its own, so that its deployments and events are this test's alone.
    const org = (await server.createOrg()).id;
    const [adm, dev, run] = [await server.actor(org, 'admin'), await server.actor(org, 'developer'), await newRunner(server, org)];
    const [gone, alsoGone, kept] = [unique('gone'), unique('also-gone'), unique('kept')];
    // Keys of their own: each secret exports every key, and no variable may come from two.
    const secrets = [gone, alsoGone, kept].map((name, i) => ({ name, values: { [`K_${i}`]: name } }));
    assert.equal((await dev.http.post(`/v1/orgs/${org}/secrets`, { secrets })).status, 201);
    assert.equal((await dev.http.put(`/v1/orgs/${org}/secrets/${gone}`, { values: { K_0: 'two' } })).status, 200);
    const env = await createEnvironment(adm.http, org);
    const svc = await createService(dev.http, org, { spec: { command: ['x'], secrets: [{ secret: gone }, { secret: alsoGone }, { secret: kept }] } });
    const shipped = await ship(dev.http, run, org, { service: svc.id, environment: env.id });
    for (const name of [gone, alsoGone]) assert.equal((await adm.http.delete(`/v1/orgs/${org}/secrets/${name}?permanent=true`)).status, 204);

    const refused = assertProblem(await dev.http.post(`/v1/orgs/${org}/deployments/${shipped.deployment.id}/rollback`, {}), 422, 'secret_versions_gone');
    assert.deepEqual(refused.missing, [`${gone}@2`, `${alsoGone}@1`]);
    assert.match(String(refused.detail), new RegExp(`^Deployment ${shipped.deployment.id} cannot be rolled back to: .*${gone}@2, ${alsoGone}@1 .*Deploy the service again instead`));
    const listed = await dev.http.get(`/v1/orgs/${org}/deployments`);
    assert.deepEqual(listed.body.deployments.map((d: any) => d.id), [shipped.deployment.id]);
    await eventsSettled(server);
    const created = await server.owner.http.get(`/v1/orgs/${org}/events?type=deployment.created`);
    assert.deepEqual(created.body.events.map((e: any) => e.subject.id), [shipped.deployment.id]);

    // Soft-deleted, the secret keeps its versions: the rollback is queued and gets the values it pinned.
    const svc2 = await createService(dev.http, org, { spec: { command: ['x'], secrets: [{ secret: kept }] } });
    const kept1 = await ship(dev.http, run, org, { service: svc2.id, environment: env.id });
    assert.equal((await dev.http.delete(`/v1/orgs/${org}/secrets/${kept}`)).status, 204);
    const rolled = await dev.http.post(`/v1/orgs/${org}/deployments/${kept1.deployment.id}/rollback`, {});
    assert.equal(rolled.status, 201, rolled.text);
    const c = await run.take({ environments: [env.id], waitSeconds: 0 });
    assert.equal(c.deployment.id, rolled.body.id);
    assert.deepEqual(c.run.secrets, { K_2: kept });
    assert.equal((await run.complete(rolled.body.id, c.lease.token)).status, 200);

    // Queued before the permanent delete, a rollback fails at the claim, saying why.
    const queued = await dev.http.post(`/v1/orgs/${org}/deployments/${kept1.deployment.id}/rollback`, {});
    assert.equal(queued.status, 201, queued.text);
    assert.equal((await adm.http.delete(`/v1/orgs/${org}/secrets/${kept}?permanent=true`)).status, 204);
    assert.equal((await run.claim({ environments: [env.id], waitSeconds: 0 })).status, 204);
    const failed = await getDeployment(dev.http, org, queued.body.id);
    assert.equal(failed.state, 'failed');
    assert.match(failed.reason, new RegExp(`The pinned secret version ${kept}@1 no longer exists .*Deploy the service again instead`));
  });

  it('answers every illegal transition with 409 and the allowed ones, through the API and the state module', async () => {
    const p = await pair();
    const { env, svc, claim } = p;
    const inState: Partial<Record<DeploymentState, { id: string; token?: string }>> = {};
    const [first, second, third] = [await p.ship(), await p.ship(), await p.ship({}, 'failed')];
    inState.superseded = { id: first.deployment.id, token: first.claim.lease.token };
    inState.succeeded = { id: second.deployment.id, token: second.claim.lease.token };
    inState.failed = { id: third.deployment.id, token: third.claim.lease.token };
    const d4 = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments/${d4.id}/cancel`)).status, 200);
    inState.cancelled = { id: d4.id };
    const d5 = await deploy(developer.http, orgId, { service: svc.id, environment: env.id });
    const c5 = await claim();
    inState.in_progress = { id: d5.id, token: c5.lease.token };
    inState.queued = { id: (await deploy(developer.http, orgId, { service: svc.id, environment: env.id })).id };

    const expectConflict = (res: any, state: DeploymentState, requested: DeploymentState) => {
      assert.equal(res.status, 409, res.text);
      assert.equal(res.body.code, 'invalid_transition');
      assert.deepEqual({ state: res.body.state, requested: res.body.requested, allowed: res.body.allowedTransitions }, { state, requested, allowed: allowedFrom(state) });
    };
    // Through the API: cancel from every state that has no edge to cancelled; complete from every finished state under its own lease.
    for (const state of DEPLOYMENT_STATES.filter((s) => !canTransition(s, 'cancelled'))) {
      const res = await developer.http.post(`/v1/orgs/${orgId}/deployments/${inState[state]!.id}/cancel`);
      expectConflict(res, state, 'cancelled');
      // What serves cannot be cancelled: the refusal says how to stop it serving.
      if (state === 'succeeded') assert.match(res.body.detail, /roll back .*rollback.*deploy another.*force=true/);
    }
    for (const state of ['succeeded', 'failed', 'superseded'] as const) {
      const { id, token } = inState[state]!;
      for (const outcome of ['succeeded', 'failed'] as const) {
        if (state === outcome || (state === 'superseded' && outcome === 'succeeded')) continue;
        expectConflict(await runner.complete(id, token!, outcome), state, outcome);
      }
      const beat = await runner.heartbeat(id, token!);
      assert.equal(beat.status, 409);
      assert.equal(beat.body.code, 'deployment_finished');
    }
    // The state module, for every pair off the graph: refused, nothing changed.
    for (const from of DEPLOYMENT_STATES) {
      const { id } = inState[from]!;
      const before = await getDeployment(viewer.http, orgId, id);
      for (const to of DEPLOYMENT_STATES.filter((t) => !canTransition(from, t))) {
        await assert.rejects(server.core.db.transaction().execute((trx) => compareAndSet(trx, SYSTEM_CONTEXT, { orgId, id, from, to })),
          (error: any) => error.status === 409 && error.code === 'invalid_transition' && JSON.stringify(error.extras.allowedTransitions) === JSON.stringify(allowedFrom(from)));
      }
      // An edge from a state the deployment is not in matches nothing.
      const wrongFrom = DEPLOYMENT_STATES.find((s) => s !== from && allowedFrom(s).length > 0)!;
      const none = await server.core.db.transaction().execute((trx) => compareAndSet(trx, SYSTEM_CONTEXT, { orgId, id, from: wrongFrom, to: allowedFrom(wrongFrom)[0]! }));
      assert.equal(none, null);
      assert.deepEqual(await getDeployment(viewer.http, orgId, id), before);
    }
    assert.equal((await runner.complete(d5.id, c5.lease.token)).status, 200);
  });

  it('records an event for every transition, without secret values', async () => {
    const secret = unique('tok');
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: secret, values: { TOKEN: 'value-that-must-not-leak' } }] })).status, 201);
    const p = await pair({ command: ['x'], secrets: [{ secret }] });
    const first = (await p.ship()).deployment;
    const second = (await p.ship()).deployment;

    const events = await eventsOf(server, orgId, first.id);
    assert.deepEqual(events.map((e) => [e.type, e.data.from, e.data.to]), [
      ['deployment.created', undefined, undefined],
      ['deployment.state_changed', 'queued', 'in_progress'],
      ['deployment.state_changed', 'in_progress', 'succeeded'],
      ['deployment.state_changed', 'succeeded', 'superseded'],
    ]);
    assert.deepEqual(events[0].data.secretVersions, [{ secret, version: 1 }]);
    assert.equal(events[1].data.runner, runner.actor.id);
    assert.equal(events[1].actor, runner.actor.id);
    assert.equal(events[3].data.by, second.id);
    assert.ok(events.every((e) => e.data.attempt === undefined || e.data.attempt === 1));
    const all = await server.owner.http.get(`/v1/orgs/${orgId}/events?limit=200&type=deployment.*`);
    assert.ok(!all.text.includes('value-that-must-not-leak'));
    assert.ok(!server.logs.some((line) => line.includes('value-that-must-not-leak')));
  });
});
