// An environment's variables and secret references: checked when saved as a service's are, laid
// over the service's in every deployment into it (the deployment's own variables over both), pinned
// at creation like the service's, resolved in the runner's claim, and named but never valued in
// events. What staging and production need to differ in is said once per environment.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Actor, TestServer } from '../support/harness.js';
import {
  createEnvironment, createSecret, createService, deploy, eventsOf, ship, startDeployFixture, unique, type DeployFixture, type RunnerClient,
} from '../support/deployments.js';
import { assertProblem } from '../support/problems.js';

describe('environment configuration', () => {
  let f: DeployFixture;
  let server: TestServer;
  let orgId: string;
  let admin: Actor;
  let developer: Actor;
  let runner: RunnerClient;
  const VALUE = 'env-config-value-only-in-claims';

  const secret = (values: Record<string, string>) => createSecret(admin.http, orgId, values);

  before(async () => {
    f = await startDeployFixture();
    ({ server, orgId, admin, developer, runner } = f);
  });
  after(() => f.close());

  it('saves variables and secret references with the environment, and checks them as a service\'s', async () => {
    const db = await secret({ DATABASE_URL: `postgres://staging/${VALUE}`, PASSWORD: VALUE });
    const env = await createEnvironment(admin.http, orgId, { variables: { LOG_LEVEL: 'debug' }, secrets: [{ secret: db, key: 'DATABASE_URL' }] });
    assert.deepEqual([env.variables, env.secrets], [{ LOG_LEVEL: 'debug' }, [{ secret: db, key: 'DATABASE_URL' }]]);
    assert.deepEqual((await developer.http.get(`/v1/orgs/${orgId}/environments/${env.name}`)).body, env);
    // An environment made without them has none.
    const plain = await createEnvironment(admin.http, orgId);
    assert.deepEqual([plain.variables, plain.secrets], [{}, []]);

    const refused = [
      [{ secrets: [{ secret: 'no-such-secret' }] }, 422, 'unknown_secrets', '/secrets/0/secret'],
      [{ secrets: [{ secret: db, key: 'NOPE' }] }, 422, 'unknown_secret_reference', '/secrets/0/key'],
      [{ secrets: [{ secret: db, as: 'X' }] }, 400, 'invalid_request', '/secrets/0/as'],
      [{ variables: { PORT: '80' } }, 422, 'reserved_variable', '/variables/PORT'],
      [{ variables: { PASSWORD: 'x' }, secrets: [{ secret: db }] }, 422, 'variable_conflict', '/secrets/0'],
      [{ secrets: [{ secret: db, key: 'PASSWORD' }, { secret: db, key: 'DATABASE_URL', as: 'PASSWORD' }] }, 422, 'variable_conflict', '/secrets/1'],
    ] as const;
    for (const [body, status, code, pointer] of refused) {
      const res = await admin.http.patch(`/v1/orgs/${orgId}/environments/${env.id}`, body);
      const problem = assertProblem(res, status, code);
      assert.ok((problem.errors as Array<{ pointer: string }>).some((e) => e.pointer === pointer), `${JSON.stringify(body)}: ${res.text}`);
      const made = await admin.http.post(`/v1/orgs/${orgId}/environments`, { name: unique('refused'), ...body });
      assertProblem(made, status, code);
    }
    assert.deepEqual((await admin.http.get(`/v1/orgs/${orgId}/environments/${env.id}`)).body, env, 'nothing changed');
    assert.equal((await developer.http.patch(`/v1/orgs/${orgId}/environments/${env.id}`, { variables: {} })).status, 403);
  });

  it('lays the environment over the service and the deployment over both, pins its secrets, and resolves them in the claim', async () => {
    const shared = await secret({ API_KEY: 'shared-key' });
    const stagingDb = await secret({ DATABASE_URL: `postgres://staging/${VALUE}` });
    const productionDb = await secret({ DATABASE_URL: 'postgres://production/app' });
    const svc = await createService(developer.http, orgId, {
      spec: { command: ['serve'], variables: { LOG_LEVEL: 'info', REGION: 'eu' }, secrets: [{ secret: shared }] },
    });
    const staging = await createEnvironment(admin.http, orgId, { variables: { LOG_LEVEL: 'debug' }, secrets: [{ secret: stagingDb }] });
    const production = await createEnvironment(admin.http, orgId, { secrets: [{ secret: productionDb, key: 'DATABASE_URL', as: 'DB' }] });

    const toStaging = await deploy(developer.http, orgId, { service: svc.name, environment: staging.name, variables: { REGION: 'us' } });
    assert.deepEqual(toStaging.spec.variables, { LOG_LEVEL: 'debug', REGION: 'us' });
    assert.deepEqual(toStaging.spec.secrets.map((r: { secret: string; version: number }) => [r.secret, r.version]), [[shared, 1], [stagingDb, 1]]);
    const claim = await runner.take({ environments: [staging.name], waitSeconds: 0 });
    assert.equal(claim.deployment.id, toStaging.id);
    assert.deepEqual(claim.run.variables, { LOG_LEVEL: 'debug', REGION: 'us' });
    assert.deepEqual(claim.run.secrets, { API_KEY: 'shared-key', DATABASE_URL: `postgres://staging/${VALUE}` });
    assert.equal((await runner.complete(toStaging.id, claim.lease.token)).status, 200);

    const { claim: prodClaim } = await ship(developer.http, runner, orgId, { service: svc.name, environment: production.name });
    assert.deepEqual(prodClaim.run.variables, { LOG_LEVEL: 'info', REGION: 'eu' });
    assert.deepEqual(prodClaim.run.secrets, { API_KEY: 'shared-key', DB: 'postgres://production/app' });

    // Later changes to the environment or its secret leave the deployment as it was; the next one takes them.
    assert.equal((await admin.http.put(`/v1/orgs/${orgId}/secrets/${stagingDb}`, { values: { DATABASE_URL: 'postgres://staging/v2' } })).status, 200);
    assert.equal((await admin.http.patch(`/v1/orgs/${orgId}/environments/${staging.id}`, { variables: { LOG_LEVEL: 'trace' } })).status, 200);
    assert.deepEqual((await developer.http.get(`/v1/orgs/${orgId}/deployments/${toStaging.id}`)).body.spec.variables, { LOG_LEVEL: 'debug', REGION: 'us' });
    const rollback = await developer.http.post(`/v1/orgs/${orgId}/deployments/${toStaging.id}/rollback`, {});
    assert.equal(rollback.status, 201, rollback.text);
    const again = await runner.take({ environments: [staging.name], waitSeconds: 0 });
    assert.equal(again.deployment.id, rollback.body.id);
    assert.deepEqual([again.run.variables.LOG_LEVEL, again.run.secrets.DATABASE_URL], ['debug', `postgres://staging/${VALUE}`], 'a rollback is exact');
    assert.equal((await runner.complete(again.deployment.id, again.lease.token)).status, 200);
    const next = await deploy(developer.http, orgId, { service: svc.name, environment: staging.name });
    assert.deepEqual([next.spec.variables.LOG_LEVEL, next.spec.secrets[1].version], ['trace', 2]);
    assert.equal((await developer.http.post(`/v1/orgs/${orgId}/deployments/${next.id}/cancel`, {})).status, 200);
  });

  it('refuses a deployment whose service and environment would set one variable twice, saying where', async () => {
    const shared = await secret({ TOKEN: 't', OTHER: 'o' });
    const svc = await createService(developer.http, orgId, { spec: { command: ['serve'], variables: { MODE: 'a' }, secrets: [{ secret: shared, key: 'TOKEN' }] } });
    const cases = [
      [{ secrets: [{ secret: shared, key: 'OTHER', as: 'TOKEN' }] }, {}, '/environment/secrets/0', /TOKEN comes from secret "[^"]+" key "TOKEN" and from secret "[^"]+" key "OTHER" of the environment/],
      [{ variables: { TOKEN: 'plain' } }, {}, '/environment/variables/TOKEN', /TOKEN comes from secret "[^"]+" key "TOKEN" and from the environment's variables/],
      [{ secrets: [{ secret: shared, key: 'OTHER', as: 'MODE' }] }, {}, '/environment/secrets/0', /MODE comes from a plain variable and from secret/],
      [{ secrets: [{ secret: shared, key: 'OTHER' }] }, { variables: { OTHER: 'x' } }, '/variables/OTHER', /OTHER comes from secret "[^"]+" key "OTHER" of the environment and from the deployment's variables/],
    ] as const;
    const before = (await developer.http.get(`/v1/orgs/${orgId}/deployments?service=${svc.name}`)).body.deployments.length;
    for (const [config, body, pointer, message] of cases) {
      const env = await createEnvironment(admin.http, orgId, config);
      const problem = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.name, environment: env.name, ...body }), 422, 'variable_conflict');
      const errors = problem.errors as Array<{ pointer: string; message: string }>;
      assert.deepEqual(errors.map((e) => e.pointer), [pointer], JSON.stringify(errors));
      assert.match(errors[0]!.message, message);
    }
    // A secret the environment names, deleted since it was saved, is found at the deployment.
    const doomed = await secret({ GONE: 'g' });
    const env = await createEnvironment(admin.http, orgId, { secrets: [{ secret: doomed }] });
    assert.equal((await admin.http.delete(`/v1/orgs/${orgId}/secrets/${doomed}`)).status, 204);
    const gone = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.name, environment: env.name }), 422, 'unknown_secrets');
    assert.deepEqual((gone.errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/environment/secrets/0/secret']);
    // The environment can still be renamed; a change to its references is checked again.
    assert.equal((await admin.http.patch(`/v1/orgs/${orgId}/environments/${env.id}`, { description: 'still here' })).status, 200);
    assertProblem(await admin.http.patch(`/v1/orgs/${orgId}/environments/${env.id}`, { secrets: [{ secret: doomed }] }), 422, 'unknown_secrets');
    assert.equal((await developer.http.get(`/v1/orgs/${orgId}/deployments?service=${svc.name}`)).body.deployments.length, before, 'nothing was queued');
  });

  it('names what changed and the names it holds in events, never a value', async () => {
    const db = await secret({ URL: VALUE });
    const env = await createEnvironment(admin.http, orgId, { variables: { SETTING: VALUE } });
    assert.equal((await admin.http.patch(`/v1/orgs/${orgId}/environments/${env.id}`, { variables: { SETTING: VALUE } })).status, 200);
    assert.equal((await admin.http.patch(`/v1/orgs/${orgId}/environments/${env.id}`, { secrets: [{ secret: db }], variables: { SETTING: 'other', MORE: '1' } })).status, 200);
    // The same variables in another order are no change either.
    assert.equal((await admin.http.patch(`/v1/orgs/${orgId}/environments/${env.id}`, { variables: { MORE: '1', SETTING: 'other' } })).status, 200);
    const events = await eventsOf(server, orgId, env.id);
    assert.deepEqual(events.map((e) => e.type), ['environment.created', 'environment.updated'], 'an unchanged configuration makes no event');
    assert.deepEqual([events[0].data.variables, events[0].data.secrets], [['SETTING'], []]);
    assert.deepEqual([events[1].data.changed, events[1].data.variables, events[1].data.secrets], [['variables', 'secrets'], ['MORE', 'SETTING'], [db]]);
    assert.deepEqual(events[1].data.variableChanges, { added: ['MORE'], removed: [], changed: ['SETTING'] });
    assert.deepEqual(events[1].data.secretChanges, { added: [{ secret: db }], removed: [] });
    assert.equal(JSON.stringify(events).includes(VALUE), false);
    for (const line of server.logs) assert.equal(line.includes(VALUE), false, line);
  });

  it('says the environment is what puts a deployment over the bounds when it is, not the request\'s variables', async () => {
    const limit = server.config.limits.specBytes;
    const half = Math.floor(limit / 2);
    const svc = await createService(developer.http, orgId, { spec: { command: ['x'], variables: { FILL: 'x'.repeat(half) } } });
    const env = await createEnvironment(admin.http, orgId, { variables: { MORE: 'y'.repeat(half) } });
    const big = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: svc.name, environment: env.name }), 400, 'limit_exceeded');
    assert.deepEqual((big.errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/environment']);
    assert.match(String(big.detail), /environment/);

    const many = Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`S${i}`, '1']));
    const counted = await createService(developer.http, orgId, { spec: { command: ['x'], variables: many } });
    const crowded = await createEnvironment(admin.http, orgId, { variables: Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`E${i}`, '1'])) });
    const refused = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: counted.name, environment: crowded.name }), 400, 'limit_exceeded');
    assert.deepEqual((refused.errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/environment']);
    // With the request's own variables the ones to blame, they are pointed at.
    const plain = await createEnvironment(admin.http, orgId);
    const extra = Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`D${i}`, '1']));
    const own = assertProblem(await developer.http.post(`/v1/orgs/${orgId}/deployments`, { service: counted.name, environment: plain.name, variables: extra }), 400, 'limit_exceeded');
    assert.deepEqual((own.errors as Array<{ pointer: string }>).map((e) => e.pointer), ['/variables']);
  });

  it('is what the API reference says a deployment is made of, and where its refusals point', async () => {
    const doc = (await server.http().get('/openapi.json')).body;
    const create = doc.paths['/v1/orgs/{orgId}/deployments'].post;
    assert.match(create.description, /environment's `variables` and `secrets`/);
    assert.match(create.description, /`\/environment\/…`/);
    const body = create.requestBody.content['application/json'].schema;
    assert.match(body.properties.variables.description, /environment's/);
  });
});
