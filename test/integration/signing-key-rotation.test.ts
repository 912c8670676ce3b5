// `slipway keys rotate-signing` and `revoke-signing` as real child processes against the data dir
// and database of a server that keeps serving meanwhile.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import path from 'node:path';
import { generateMasterKey, KEY_FILE, masterKeyId, readKeyFile } from '../../src/platform/crypto/master-key.js';
import { startSecondNode, startServer, type TestServer } from '../support/harness.js';
import { cliEnv, cliJson, runCli } from '../support/processes.js';

describe('signing key rotation', () => {
  let server: TestServer;
  before(async () => { server = await startServer(); });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  const kidOf = (token: string) => (JSON.parse(Buffer.from(token.split('.')[0]!, 'base64url').toString('utf8')) as { kid: string }).kid;

  it('signs new tokens with the next key, published ahead, while tokens signed with the old one stay valid; the JWKS lists them all', async () => {
    const before = server.owner.token;
    const oldKid = kidOf(before);
    // The next key is published before it signs anything.
    const ahead = (await server.http().get('/oauth/v2/keys')).body.keys.map((k: any) => k.kid);
    const staged = (await cliJson(['keys', 'status'], cliEnv(server))).signingKeys.filter((k: any) => k.state === 'staged').map((k: any) => k.kid);
    assert.equal(staged.length, 1);
    assert.deepEqual(ahead.sort(), [oldKid, staged[0]].sort());
    const rotated = await cliJson(['keys', 'rotate-signing'], cliEnv(server));
    assert.equal(rotated.active.kid, staged[0]);
    assert.equal(rotated.next.state, 'staged');
    assert.equal(rotated.active.state, 'active');
    assert.deepEqual(rotated.retired.map((k: any) => [k.kid, k.state]), [[oldKid, 'retired']]);
    const ttlMs = server.config.tokenTtlSeconds * 1000;
    assert.ok(Date.parse(rotated.retired[0].publishedUntil) - Date.parse(rotated.retired[0].retiredAt) > ttlMs);

    // The running server notices within its cache period; reload stands in for waiting.
    await server.core.keys.reload();
    const after = await server.token(server.bootstrap);
    assert.equal(kidOf(after), rotated.active.kid);
    for (const token of [before, after]) {
      const res = await server.http(token).get('/v1/orgs/default');
      assert.equal(res.status, 200, res.text);
    }
    const jwks = await server.http().get('/oauth/v2/keys');
    assert.deepEqual(jwks.body.keys.map((k: any) => k.kid), [rotated.next.kid, rotated.active.kid, oldKid]);

    const status = await cliJson(['keys', 'status'], cliEnv(server));
    assert.deepEqual(status.signingKeys.map((k: any) => [k.kid, k.state]), [[oldKid, 'retired'], [rotated.active.kid, 'active'], [rotated.next.kid, 'staged']]);
    assert.match((await runCli(['keys', 'rotate-signing'], cliEnv(server))).stderr, /signing key rotated/);
  });

  it('keeps a retired key published while the tokens it signed live, on a node whose own tokens live shorter', async () => {
    // Signed by a node whose tokens live 12 hours (the default)...
    const longLived = await server.token(server.bootstrap);
    const oldKid = kidOf(longLived);
    await server.core.keys.rotate();
    // ...by a key retired two hours ago: past an hour's token, well within this one's 12 hours.
    await server.core.db.updateTable('signing_keys').set({ retired_at: new Date(Date.now() - 2 * 3_600_000).toISOString() }).where('kid', '=', oldKid).execute();
    await server.core.keys.reload();
    // A node that issues one-hour tokens (SLIPWAY_TOKEN_TTL lowered, or not yet raised there).
    const shorter = await startSecondNode(server, { SLIPWAY_TOKEN_TTL: '3600' });
    try {
      for (const node of [server, shorter]) {
        assert.ok((await node.http().get('/oauth/v2/keys')).body.keys.some((k: any) => k.kid === oldKid), `${node.url} publishes ${oldKid}`);
        const res = await node.http(longLived).get('/v1/orgs/default');
        assert.equal(res.status, 200, res.text);
      }
      // What `keys status` shows there.
      assert.deepEqual((await shorter.core.keys.list()).filter((k) => k.kid === oldKid).map((k) => k.state), ['retired']);
    } finally {
      await shorter.close();
    }
  });

  it('revokes the previous keys on request (a key that leaked): gone from the JWKS, their tokens refused, even ones already verified', async () => {
    const before = await server.token(server.bootstrap);
    const oldKid = kidOf(before);
    assert.equal((await server.http(before).get('/v1/orgs/default')).status, 200);
    const rotated = await cliJson(['keys', 'rotate-signing', '--revoke-previous'], cliEnv(server));
    assert.notEqual(rotated.active.kid, oldKid);
    assert.deepEqual(rotated.retired, []);
    assert.ok(rotated.revoked.some((k: any) => k.kid === oldKid && k.state === 'revoked' && k.revokedAt === k.publishedUntil));

    // The running server notices within its cache period (a minute); reload stands in for waiting.
    await server.core.keys.reload();
    const refused = await server.http(before).get('/v1/orgs/default');
    assert.equal(refused.status, 401, refused.text);
    assert.match(refused.headers.get('www-authenticate') ?? '', /^Bearer /);
    // The next key, kept as the leaked one was, is revoked too: a new one signs, and a new one is next.
    const jwks = (await server.http().get('/oauth/v2/keys')).body.keys.map((k: any) => k.kid);
    assert.deepEqual(jwks, [rotated.next.kid, rotated.active.kid]);
    const after = await server.token(server.bootstrap);
    assert.equal(kidOf(after), rotated.active.kid);
    assert.equal((await server.http(after).get('/v1/orgs/default')).status, 200);

    const status = await cliJson(['keys', 'status'], cliEnv(server));
    assert.deepEqual(status.signingKeys.filter((k: any) => k.state !== 'revoked').map((k: any) => k.kid).sort(), [rotated.active.kid, rotated.next.kid].sort());
  });

  it('revokes one retired key by its kid, and refuses to revoke the key that signs or one it does not know', async () => {
    const old = kidOf(await server.token(server.bootstrap));
    const rotated = await cliJson(['keys', 'rotate-signing'], cliEnv(server));
    await server.core.keys.reload();
    assert.ok((await server.http().get('/oauth/v2/keys')).body.keys.some((k: any) => k.kid === old));

    // A kid may begin with a dash: it goes after =.
    const active = await runCli(['keys', 'revoke-signing', `--kid=${rotated.active.kid}`, '--json'], cliEnv(server));
    assert.equal(active.code, 1, active.stderr);
    assert.equal(JSON.parse(active.stderr.trim().split('\n').at(-1)!).error.code, 'signing_key_active');
    assert.match(active.stderr, /rotate-signing --revoke-previous/);
    const unknown = await runCli(['keys', 'revoke-signing', '--kid', 'no-such-kid'], cliEnv(server));
    assert.equal(unknown.code, 1, unknown.stderr);
    assert.equal((await runCli(['keys', 'revoke-signing'], cliEnv(server))).code, 2);

    const revoked = await cliJson(['keys', 'revoke-signing', `--kid=${old}`], cliEnv(server));
    assert.deepEqual([revoked.key.kid, revoked.key.state, revoked.result], [old, 'revoked', 'revoked']);
    assert.equal((await cliJson(['keys', 'revoke-signing', `--kid=${old}`], cliEnv(server))).result, 'already revoked');
    const dash = await runCli(['keys', 'revoke-signing', '--kid', '-AbC'], cliEnv(server));
    assert.equal(dash.code, 2);
    assert.match(dash.stderr, /--kid needs a value; one that begins with a dash goes after =, as in --kid=-XYZ/);
    await server.core.keys.reload();
    assert.deepEqual((await server.http().get('/oauth/v2/keys')).body.keys.map((k: any) => k.kid), [rotated.next.kid, rotated.active.kid]);
  });

  it('refuses to wrap a new key under a master key no row is under (one retired, or not given to the servers yet), changing nothing', async () => {
    const [current] = readKeyFile(path.join(server.dataDir, KEY_FILE));
    const before = (await server.core.keys.list()).length;
    const env = { ...cliEnv(server), SLIPWAY_MASTER_KEY: generateMasterKey().toString('base64'), SLIPWAY_MASTER_KEY_PREVIOUS: current!.toString('base64') };
    const refused = await runCli(['keys', 'rotate-signing', '--json'], env);
    assert.equal(refused.code, 1, refused.stderr);
    const error = JSON.parse(refused.stderr.trim().split('\n').at(-1)!).error;
    assert.equal(error.code, 'master_key_not_in_use');
    assert.match(error.message, new RegExp(`the data is under ${masterKeyId(current!)}.*nothing was changed`));
    assert.equal((await server.core.keys.list()).length, before);
  });

  it('stops accepting a key whose publication ended, on a node that has been running all along', async () => {
    // Issued now, first shown to the API only after its key has left the JWKS.
    const unseen = await server.token(server.bootstrap);
    const oldKid = kidOf(unseen);
    await cliJson(['keys', 'rotate-signing'], cliEnv(server));
    await server.core.keys.reload();
    // The node verifies with both keys meanwhile.
    assert.equal((await server.http(await server.token(server.bootstrap)).get('/v1/orgs/default')).status, 200);
    // Its publication ends (retired longer ago than a token lives): as an operator removing it would.
    await server.core.db.updateTable('signing_keys').set({ retired_at: new Date(Date.now() - 30 * 86_400_000).toISOString() }).where('kid', '=', oldKid).execute();
    await server.core.keys.reload();
    const refused = await server.http(unseen).get('/v1/orgs/default');
    assert.equal(refused.status, 401, refused.text);
    assert.ok(!(await server.http().get('/oauth/v2/keys')).body.keys.some((k: any) => k.kid === oldKid));
    assert.equal((await server.http(await server.token(server.bootstrap)).get('/v1/orgs/default')).status, 200);
  });
});
