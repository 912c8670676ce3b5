// What the token endpoint remembers between requests. The client records it read, for
// CLIENT_CACHE_MS: a change made through this server's API or domain service (disable, delete,
// remove or rotate a secret) is refused by the very next token request; a change made by another
// process on the same database (the CLI, another node) within the window; and the cache never
// refuses anything by itself, so a secret or an enablement made anywhere works at once. And the
// signer of the active key, made once per key.
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { CLIENT_CACHE_MS } from '../../src/modules/auth/token.service.js';
import { serviceUsersRepo } from '../../src/modules/service-users/service-users.repo.js';
import { cliContext } from '../../src/platform/context.js';
import { startSecondNode, startServer, type TestServer } from '../support/harness.js';
import { cliJson } from '../support/processes.js';
import { plantClientSecret, requestToken } from '../support/tokens.js';

type Creds = { clientId: string; clientSecret: string };

/** Slack over the window for the polling step, a request's own time and a busy test machine. */
const SLACK_MS = 3_000;

/** Polls the token endpoint until it answers `status`; how long that took after `since`, ms. */
async function untilStatus(server: TestServer, creds: Creds, status: number, since: number): Promise<number> {
  const deadline = since + CLIENT_CACHE_MS + 10_000;
  for (;;) {
    const res = await requestToken(server, creds);
    if (res.status === status) return Date.now() - since;
    assert.ok(Date.now() < deadline, `still ${res.status} ${Date.now() - since} ms after the change: ${res.text}`);
    await sleep(50);
  }
}

describe('token endpoint client cache', () => {
  let server: TestServer;
  let orgId: string;
  let admin: TestServer['owner'];
  before(async () => {
    server = await startServer();
    orgId = server.bootstrap.orgId;
    admin = server.owner;
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  /** A new service user whose record the token endpoint has just read and remembered. */
  async function cachedClient(name: string): Promise<Creds & { id: string; secretId: string }> {
    const created = await server.core.serviceUsers.create(cliContext(), orgId, { name, role: 'developer' });
    assert.equal((await requestToken(server, created)).status, 200);
    return { id: created.id, clientId: created.clientId, clientSecret: created.clientSecret, secretId: created.secrets[0]!.id };
  }

  describe('changes made through this server take effect on the very next request', () => {
    it('disabling through the API', async () => {
      const client = await cachedClient('api-disabled');
      assert.equal((await requestToken(server, client)).status, 200);
      assert.equal((await admin.http.patch(`/v1/orgs/default/service-users/${client.id}`, { disabled: true })).status, 200);
      const refused = await requestToken(server, client);
      assert.equal(refused.status, 401, refused.text);
      assert.equal(refused.body.error, 'invalid_client');
      // Enabled again, it gets tokens again at once.
      assert.equal((await admin.http.patch(`/v1/orgs/default/service-users/${client.id}`, { disabled: false })).status, 200);
      assert.equal((await requestToken(server, client)).status, 200);
    });

    it('removing a secret through the API, while the other keeps working', async () => {
      const client = await cachedClient('api-secret-removed');
      const added = await admin.http.post(`/v1/orgs/default/service-users/${client.id}/secrets`);
      assert.equal(added.status, 201, added.text);
      const second = { clientId: client.clientId, clientSecret: added.body.clientSecret as string };
      assert.equal((await requestToken(server, second)).status, 200);
      assert.equal((await requestToken(server, client)).status, 200);
      assert.equal((await admin.http.delete(`/v1/orgs/default/service-users/${client.id}/secrets/${client.secretId}`)).status, 204);
      assert.equal((await requestToken(server, client)).status, 401);
      assert.equal((await requestToken(server, second)).status, 200);
    });

    it('deleting through the API', async () => {
      const client = await cachedClient('api-deleted');
      assert.equal((await admin.http.delete(`/v1/orgs/default/service-users/${client.id}`)).status, 204);
      assert.equal((await requestToken(server, client)).status, 401);
    });

    it('does not keep a read that was under way when a change committed', async () => {
      const { tokens } = server.core;
      const created = await server.core.serviceUsers.create(cliContext(), orgId, { name: 'raced', role: 'developer' });
      const creds = { clientId: created.clientId, clientSecret: created.clientSecret };
      // The read starts, the change commits and is announced, then the read ends: what it saw may be old.
      const reading = tokens.authenticate(creds);
      tokens.forgetClient(created.id);
      await reading;
      assert.ok(await serviceUsersRepo.deleteSecret(server.core.db, created.id, created.secrets[0]!.id));
      await assert.rejects(tokens.authenticate(creds), { code: 'invalid_client' });

      // The same sequence without the change in between is remembered (and so accepted here for the window).
      const control = await server.core.serviceUsers.create(cliContext(), orgId, { name: 'raced-control', role: 'developer' });
      const controlCreds = { clientId: control.clientId, clientSecret: control.clientSecret };
      const readAt = Date.now();
      await tokens.authenticate(controlCreds);
      assert.ok(await serviceUsersRepo.deleteSecret(server.core.db, control.id, control.secrets[0]!.id));
      const again = await tokens.authenticate(controlCreds).then(() => 'accepted', () => 'refused');
      if (Date.now() - readAt < CLIENT_CACHE_MS - SLACK_MS) assert.equal(again, 'accepted');
    });

    it('rotating through the domain service (what `rotate-secret` runs)', async () => {
      const client = await cachedClient('service-rotated');
      const rotated = await server.core.serviceUsers.replaceSecrets(cliContext(), orgId, client.id);
      assert.equal((await requestToken(server, client)).status, 401);
      assert.equal((await requestToken(server, rotated)).status, 200);
    });
  });

  describe('changes made elsewhere on the same database', () => {
    it('a secret removed by another node stops working within the window, not later', async () => {
      const client = await cachedClient('elsewhere-secret-removed');
      const cachedAt = Date.now();
      assert.ok(await serviceUsersRepo.deleteSecret(server.core.db, client.id, client.secretId));
      const removedAt = Date.now();
      // Still remembered: this node has not read the client since the change (the point of the cache).
      const soon = await requestToken(server, client);
      if (Date.now() - cachedAt < CLIENT_CACHE_MS - SLACK_MS) assert.equal(soon.status, 200, soon.text);
      const took = await untilStatus(server, client, 401, removedAt);
      assert.ok(took <= CLIENT_CACHE_MS + SLACK_MS, `refused only ${took} ms after the change`);
    });

    it('a secret added by another node works at once, although the client is remembered', async () => {
      const client = await cachedClient('elsewhere-secret-added');
      const secret = 'planted+secret/for the cache test';
      await plantClientSecret(server, client.id, secret);
      assert.equal((await requestToken(server, { clientId: client.clientId, clientSecret: secret })).status, 200);
      assert.equal((await requestToken(server, client)).status, 200);
    });

    it('a client enabled by another node gets tokens at once; a wrong secret is refused all along', async () => {
      const client = await cachedClient('elsewhere-enabled');
      const wrong = { clientId: client.clientId, clientSecret: `${client.clientSecret}x` };
      assert.equal((await requestToken(server, wrong)).status, 401);
      await serviceUsersRepo.update(server.core.db, client.id, { disabled_at: new Date().toISOString() });
      const disabledAt = Date.now();
      await untilStatus(server, client, 401, disabledAt);
      assert.equal((await requestToken(server, wrong)).status, 401);
      await serviceUsersRepo.update(server.core.db, client.id, { disabled_at: null });
      assert.equal((await requestToken(server, client)).status, 200);
      assert.equal((await requestToken(server, wrong)).status, 401);
    });
  });

  it('keeps one signer per signing key across re-reads, and makes a new one for a new key', async () => {
    const first = await server.core.keys.reload();
    const again = await server.core.keys.reload();
    assert.equal(again.signer, first.signer);
    const { kid } = await server.core.keys.rotate();
    const rotated = await server.core.keys.signer();
    assert.equal(rotated.kid, kid);
    assert.notEqual(rotated, first.signer);
    const res = await requestToken(server, server.bootstrap);
    assert.equal(res.status, 200, res.text);
    assert.equal(JSON.parse(Buffer.from(res.body.access_token.split('.')[0], 'base64url').toString('utf8')).kid, kid);
    assert.equal((await server.http(res.body.access_token).get('/v1/orgs')).status, 200);
  });
});

describe('token endpoint client cache and the CLI on the same database', () => {
  let server: TestServer;
  let env: Record<string, string>;
  before(async () => {
    server = await startServer();
    // The server's own configuration, as an operator would run the CLI beside it.
    const { dataDir, port, databaseUrl } = server.config;
    env = { SLIPWAY_DATA_DIR: dataDir, SLIPWAY_PORT: String(port), ...(databaseUrl ? { SLIPWAY_DATABASE_URL: databaseUrl } : {}) };
  });
  after(async () => {
    await server.close();
  });

  it('`service-user disable` run while the server runs: refused there within the window', async () => {
    const created = await cliJson(['service-user', 'create', '--org', 'default', '--name', 'cli-disabled', '--role', 'developer'], env);
    assert.equal((await requestToken(server, created)).status, 200);
    const disabled = await cliJson(['service-user', 'disable', '--org', 'default', '--user', 'cli-disabled'], env);
    assert.equal(disabled.disabled, true);
    const took = await untilStatus(server, created, 401, Date.now());
    assert.ok(took <= CLIENT_CACHE_MS + SLACK_MS, `refused only ${took} ms after the CLI finished`);
  });

  it('`service-user rotate-secret` run while the server runs: the old secret is refused within the window, the new one works at once', async () => {
    const created = await cliJson(['service-user', 'create', '--org', 'default', '--name', 'cli-rotated', '--role', 'developer'], env);
    assert.equal((await requestToken(server, created)).status, 200);
    const rotated = await cliJson(['service-user', 'rotate-secret', '--org', 'default', '--user', 'cli-rotated'], env);
    const rotatedAt = Date.now();
    assert.equal((await requestToken(server, rotated)).status, 200);
    const took = await untilStatus(server, created, 401, rotatedAt);
    assert.ok(took <= CLIENT_CACHE_MS + SLACK_MS, `refused only ${took} ms after the CLI finished`);
  });
});

describe('token endpoint client cache with another node on the same database', () => {
  let server: TestServer;
  let other: TestServer;
  before(async () => {
    server = await startServer();
    other = await startSecondNode(server);
  });
  after(async () => {
    assert.deepEqual([...server.undeclared, ...other.undeclared], []);
    await other.close();
    await server.close();
  });

  it('a service user disabled and enabled again on the other node gets tokens here that the API accepts', async () => {
    const orgId = (await server.createOrg()).id;
    const owner = await server.actor(orgId, 'owner');
    const developer = await server.actor(orgId, 'developer');
    // Remembered here: the token endpoint has just read the client.
    assert.equal((await requestToken(server, developer)).status, 200);
    const there = other.http(owner.token);
    assert.equal((await there.patch(`/v1/orgs/${orgId}/service-users/${developer.id}`, { disabled: true })).status, 200);
    // Disabled over there: no token here either.
    assert.equal((await requestToken(server, developer)).status, 401);
    assert.equal((await there.patch(`/v1/orgs/${orgId}/service-users/${developer.id}`, { disabled: false })).status, 200);
    const issued = await requestToken(server, developer);
    assert.equal(issued.status, 200, issued.text);
    // Issued after the enable: the API takes it, on the node that made the change as on this one.
    for (const node of [other, server]) {
      const res = await node.http(issued.body.access_token).get(`/v1/orgs/${orgId}/services`);
      assert.equal(res.status, 200, `${res.status} ${res.headers.get('www-authenticate')}`);
    }
  });
});
