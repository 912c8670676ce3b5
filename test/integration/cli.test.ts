// The real `slipway` command, run as child processes against the same data dir and database as a
// server that is running meanwhile: what the CLI creates works at once at the server's token
// endpoint, and what it rotates or disables stops working there within the server's cache window.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { CLIENT_CACHE_MS } from '../../src/modules/auth/token.service.js';
import { clientCredentialsGrant, startServer, tempDir, testDatabase, type TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';
import { cliJson, runCli } from '../support/processes.js';

interface Printed {
  orgId: string;
  clientId: string;
  clientSecret: string;
  tokenUrl: string;
  scope: string;
}

describe('slipway CLI', () => {
  let env: Record<string, string>;
  let database: Awaited<ReturnType<typeof testDatabase>>;
  let dataDir: string;
  let server: TestServer | undefined;

  before(async () => {
    dataDir = tempDir('slipway-cli-');
    database = await testDatabase();
    env = { SLIPWAY_DATA_DIR: dataDir, ...(database.url ? { SLIPWAY_DATABASE_URL: database.url } : {}) };
  });
  after(async () => {
    // The server took the data dir and database over and removes them; without one, do it here.
    if (server) await server.close();
    else {
      await database.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  /** The token endpoint's answer for these credentials, as a status code. */
  async function tokenStatus(creds: { clientId: string; clientSecret: string }): Promise<number> {
    const res = await clientCredentialsGrant(`${server!.url}/oauth/v2/token`, creds, server!.bootstrap.scope);
    await res.arrayBuffer();
    return res.status;
  }

  /**
   * The token endpoint's answer once it has noticed a change the CLI made: the server remembers a
   * client it has just accepted for up to CLIENT_CACHE_MS, so poll (bounded) past that window.
   */
  async function tokenStatusAfterWindow(creds: { clientId: string; clientSecret: string }, expected: number): Promise<number> {
    const deadline = Date.now() + CLIENT_CACHE_MS + 2_000;
    let status = await tokenStatus(creds);
    while (status !== expected && Date.now() < deadline) {
      await sleep(100);
      status = await tokenStatus(creds);
    }
    return status;
  }

  it('migrates an empty database, and again without harm', async () => {
    const first = await cliJson(['migrate'], env);
    assert.equal(first.ok, true);
    assert.equal(first.database, database.url ? 'postgres' : 'sqlite');
    assert.ok(first.applied.length > 0);
    assert.deepEqual(await cliJson(['migrate'], env), { ...first, applied: [] });
  });

  it('creates and lists organizations while a server runs on the same database', async () => {
    server = await startServer({ reuse: { dataDir, database } });
    // The same configuration as the server's, as an operator would have it: the port makes the token URL.
    env.SLIPWAY_PORT = String(server.config.port);
    const org = await cliJson(['org', 'create', '--slug', 'cli-org', '--name', 'CLI Org'], env);
    assert.match(org.id, /^org_/);
    assert.deepEqual([org.slug, org.name], ['cli-org', 'CLI Org']);
    const { orgs } = await cliJson(['org', 'list'], env);
    assert.deepEqual(orgs.map((o: { slug: string }) => o.slug).sort(), ['cli-org', 'default']);
    // Listed with the fields `org create` printed, an unlinked one's externalId null as there.
    assert.deepEqual(orgs.find((o: { slug: string }) => o.slug === 'cli-org'), org);
    // The server sees it at once.
    assert.equal((await server.owner.http.get('/v1/orgs/cli-org')).body.id, org.id);
    const taken = await runCli(['org', 'create', '--slug', 'cli-org', '--name', 'Again'], env);
    assert.equal(taken.code, 1);
    assert.equal(taken.stderr.trim().split('\n').length, 1, taken.stderr);
  });

  let creds: Printed;

  it('creates a service user whose printed credentials work at the server\'s token endpoint', async () => {
    const printed = await cliJson(['service-user', 'create', '--org', 'cli-org', '--name', 'ci', '--role', 'developer'], env);
    for (const field of ['clientId', 'clientSecret', 'tokenUrl', 'scope', 'orgId', 'baseUrl']) assert.equal(typeof printed[field], 'string', field);
    assert.equal(printed.tokenUrl, `${server!.url}/oauth/v2/token`);
    assert.equal(printed.baseUrl, server!.url);
    assert.equal(printed.scope, server!.bootstrap.scope);
    assert.equal(printed.role, 'developer');
    creds = printed;
    const token = await server!.token(creds, creds.scope);
    const org = await server!.http(token).get('/v1/orgs/cli-org');
    assert.deepEqual([org.status, org.body.id], [200, creds.orgId]);

    const { serviceUsers } = await cliJson(['service-user', 'list', '--org', 'cli-org'], env);
    assert.deepEqual(serviceUsers.map((u: { name: string; role: string }) => [u.name, u.role]), [['ci', 'developer']]);
    assert.ok(!JSON.stringify(serviceUsers).includes(creds.clientSecret), 'list shows no secret');
  });

  it('rotates a client secret: the new one works at once, the old one stops working, unless --keep-old', async () => {
    const rotated = await cliJson<Printed>(['service-user', 'rotate-secret', '--org', 'cli-org', '--user', 'ci'], env);
    assert.equal(rotated.clientId, creds.clientId);
    assert.notEqual(rotated.clientSecret, creds.clientSecret);
    assert.equal(await tokenStatus(rotated), 200);
    assert.equal(await tokenStatusAfterWindow(creds, 401), 401);

    // --id is an alias of --user, and takes the id as well as the name.
    const second = await cliJson<Printed>(['service-user', 'rotate-secret', '--org', 'cli-org', '--id', creds.clientId, '--keep-old'], env);
    assert.equal(await tokenStatus(rotated), 200);
    assert.equal(await tokenStatus(second), 200);

    // The old one goes with remove-secret; a third live secret is refused until then.
    const third = await runCli(['service-user', 'rotate-secret', '--org', 'cli-org', '--user', 'ci', '--keep-old'], env);
    assert.equal(third.code, 1);
    assert.match(third.stderr, /at most 2/);
    const { serviceUsers } = await cliJson(['service-user', 'list', '--org', 'cli-org'], env);
    const secrets = serviceUsers.find((u: { name: string }) => u.name === 'ci').secrets as Array<{ id: string; createdAt: string }>;
    assert.equal(secrets.length, 2);
    const oldest = [...secrets].sort((x, y) => x.createdAt.localeCompare(y.createdAt))[0]!;
    // Each rotation names the secret it made, so the other is the one to remove.
    const [rotatedId, secondId] = [(rotated as Printed & { secretId: string }).secretId, (second as Printed & { secretId: string }).secretId];
    assert.deepEqual(secrets.map((x) => x.id).sort(), [rotatedId, secondId].sort());
    assert.equal(oldest.id, rotatedId);
    assert.deepEqual(await cliJson(['service-user', 'remove-secret', '--org', 'cli-org', '--user', 'ci', '--secret', oldest.id], env), { removed: oldest.id });
    assert.equal(await tokenStatusAfterWindow(rotated, 401), 401);
    assert.equal(await tokenStatus(second), 200);
    creds = second;
  });

  it('disables a service user: new tokens and live ones are refused within the cache lifetime', async () => {
    const token = await server!.token(creds, creds.scope);
    const api = server!.http(token);
    assert.equal((await api.get('/v1/orgs/cli-org')).status, 200);
    const disabled = await cliJson(['service-user', 'disable', '--org', 'cli-org', '--user', 'ci'], env);
    assert.equal(disabled.disabled, true);
    assert.equal(await tokenStatusAfterWindow(creds, 401), 401);
    // The server caches a subject's state for up to 5 s; poll (bounded) until it has noticed.
    let res = await api.get('/v1/orgs/cli-org');
    for (let attempt = 0; attempt < 100 && res.status === 200; attempt++) {
      await sleep(100);
      res = await api.get('/v1/orgs/cli-org');
    }
    assert.match(String(assertProblem(res, 401, 'invalid_token').detail), /disabled/);

    // Enabled again from the CLI: a new token works at once, though this server still remembers it
    // disabled; the old one stays refused.
    assert.equal((await cliJson(['service-user', 'enable', '--org', 'cli-org', '--user', 'ci'], env)).disabled, false);
    const fresh = server!.http(await server!.token(creds, creds.scope));
    assert.equal((await fresh.get('/v1/orgs/cli-org')).status, 200);
    assertProblem(await api.get('/v1/orgs/cli-org'), 401, 'invalid_token');
    assert.deepEqual(server!.undeclared, []);
  });

  it('shows, updates and deletes a service user; the last owner is neither demoted nor deleted', async () => {
    const made = await cliJson<Printed>(['service-user', 'create', '--org', 'cli-org', '--name', 'deployer', '--role', 'viewer'], env);
    const shown = await cliJson(['service-user', 'show', '--org', 'cli-org', '--user', 'deployer'], env);
    assert.deepEqual([shown.id, shown.role, shown.secrets.length], [made.clientId, 'viewer', 1]);
    assert.equal(JSON.stringify(shown).includes(made.clientSecret), false, 'never the client secret again');
    const plain = await runCli(['service-user', 'show', '--org', 'cli-org', '--id', made.clientId], env);
    assert.equal(plain.code, 0, plain.stderr);
    assert.match(plain.stdout, /^id\s+su_\w+\nname\s+deployer\nrole\s+viewer\n/);
    assert.match(plain.stdout, /^secrets\s+cs_\w+ \(sws_[\w-]+…, last used never\)$/m);

    const updated = await cliJson(['service-user', 'update', '--org', 'cli-org', '--user', 'deployer', '--role', 'developer', '--name', 'deploy-bot', '--description', 'CI'], env);
    assert.deepEqual([updated.name, updated.role, updated.description], ['deploy-bot', 'developer', 'CI']);
    const token = await server!.token(made, made.scope);
    const api = server!.http(token);
    assert.equal((await api.get('/v1/orgs/cli-org/secrets')).status, 200);

    for (const [args, message] of [
      [['update', '--org', 'cli-org', '--user', 'deploy-bot'], /nothing to change/],
      [['update', '--org', 'cli-org', '--user', 'deploy-bot', '--role', 'boss'], /--role must be one of/],
      [['update', '--org', 'cli-org', '--user', 'deploy-bot', '--name', ' spaced'], /^slipway: --name /],
      [['update', '--org', 'cli-org', '--user', 'deploy-bot', '--name', ''], /^slipway: --name must not be empty/],
      [['delete', '--org', 'cli-org'], /--user ID\|NAME is required/],
    ] as const) {
      const result = await runCli(['service-user', ...args], env);
      assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`);
      assert.match(result.stderr, message);
    }
    // An organization of its own, whose one owner is its last.
    await cliJson(['org', 'create', '--slug', 'one-owner', '--name', 'One owner'], env);
    const owner = await cliJson<Printed>(['service-user', 'create', '--org', 'one-owner', '--name', 'boss', '--role', 'owner'], env);
    for (const args of [['update', '--role', 'admin'], ['delete']]) {
      const refused = await runCli(['service-user', args[0]!, '--org', 'one-owner', '--user', owner.clientId, ...args.slice(1), '--json'], env);
      assert.equal(refused.code, 1, args.join(' '));
      assert.equal(JSON.parse(refused.stderr).error.code, 'last_owner');
    }
    assert.equal((await cliJson(['service-user', 'show', '--org', 'one-owner', '--user', 'boss'], env)).role, 'owner');

    assert.deepEqual(await cliJson(['service-user', 'delete', '--org', 'cli-org', '--user', 'deploy-bot'], env), { deleted: made.clientId, name: 'deploy-bot' });
    const gone = await runCli(['service-user', 'show', '--org', 'cli-org', '--user', 'deploy-bot', '--json'], env);
    assert.equal(gone.code, 1);
    assert.equal(JSON.parse(gone.stderr).error.code, 'service_user_not_found');
    assert.equal(await tokenStatusAfterWindow(made, 401), 401);
  });
});
