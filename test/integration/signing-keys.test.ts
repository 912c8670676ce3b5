// One key signs at a time, whatever several nodes do at once: nodes that start together on a
// database without an active key make one between them, and a database where an earlier race left
// more than one signing is put right (the newest keeps signing) by the next start.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createSigningKeys, generateSigningKeyRow } from '../../src/modules/auth/signing-keys.js';
import { signingKeysRepo } from '../../src/modules/auth/signing-keys.repo.js';
import { generateMasterKey, keyringOf } from '../../src/platform/crypto/master-key.js';
import { openDatabase, type Database } from '../../src/platform/db/database.js';
import { startServer, type TestServer } from '../support/harness.js';
import { requestToken } from '../support/tokens.js';

describe('signing keys across nodes', () => {
  let server: TestServer;
  const nodes: Database[] = [];
  before(async () => {
    server = await startServer();
    // On PostgreSQL each its own connections, as separate processes would have. SQLite has one
    // writer at a time anyway, and connections in one process would wait for each other's commits
    // inside the busy handler, which blocks the event loop they commit on: they share the server's.
    if (server.core.database.dialect === 'postgres') {
      for (let i = 0; i < 4; i++) nodes.push(openDatabase({ databaseUrl: server.config.databaseUrl, dataDir: server.config.dataDir }));
    }
  });
  const node = (i: number) => nodes[i] ?? server.core.database;
  after(async () => {
    for (const node of nodes) await node.close();
    await server.close();
  });

  const active = async () => (await server.core.db.selectFrom('signing_keys').select(['kid', 'activated_at']).where('retired_at', 'is', null).where('activated_at', 'is not', null).execute());
  const keysOf = (node: Database) => createSigningKeys({ db: node.db, ring: server.core.ring, tokenTtlSeconds: 3600 });

  it('makes one key between nodes that find none at the same moment', async () => {
    for (let round = 0; round < 5; round++) {
      await server.core.db.updateTable('signing_keys').set({ retired_at: new Date().toISOString() }).where('retired_at', 'is', null).execute();
      await Promise.all([0, 1, 2, 3].map((i) => keysOf(node(i)).ensureActiveKey()));
      assert.equal((await active()).length, 1, `round ${round}`);
      // And one next key, published ahead, however many nodes looked.
      assert.equal((await server.core.db.selectFrom('signing_keys').select('kid').where('activated_at', 'is', null).where('revoked_at', 'is', null).execute()).length, 1, `round ${round}`);
    }
  });

  it('leaves the newest key signing where an earlier race left two, and keeps the other published', async () => {
    const [current] = await active();
    const later = await generateSigningKeyRow(server.core.ring, new Date(Date.parse(current!.activated_at!) + 1).toISOString());
    await server.core.db.insertInto('signing_keys').values(later).execute();
    assert.equal((await active()).length, 2);
    await keysOf(node(0)).ensureActiveKey();
    assert.deepEqual((await active()).map((k) => k.kid), [later.kid]);
    // Retired, not revoked: tokens it signed stay valid until they expire.
    const set = await keysOf(node(1)).current();
    assert.equal((await keysOf(node(1)).signer()).kid, later.kid);
    assert.deepEqual(set.publicJwks.map((k) => k.kid).filter((kid) => kid === current!.kid || kid === later.kid).sort(), [current!.kid, later.kid].sort());
  });

  it('a signing key wrapped under a master key this node lacks stops its tokens being issued (503 naming the key), not their verification or the JWKS', async () => {
    const unused = (await requestToken(server, server.bootstrap)).body.access_token as string;
    const now = new Date().toISOString();
    const stranger = await generateSigningKeyRow(keyringOf([generateMasterKey()]), now);
    await server.core.db.transaction().execute(async (trx) => {
      await signingKeysRepo.insert(trx, stranger);
      await signingKeysRepo.retireActive(trx, stranger.kid, now);
    });
    try {
      await server.core.keys.reload();
      const jwks = await server.http().get('/oauth/v2/keys');
      assert.equal(jwks.status, 200, jwks.text);
      assert.ok(jwks.body.keys.some((k: { kid: string }) => k.kid === stranger.kid));
      // A token signed before, verified here for the first time.
      assert.equal((await server.http(unused).get('/v1/orgs')).status, 200);
      const refused = await requestToken(server, server.bootstrap);
      assert.equal(refused.status, 503, refused.text);
      assert.match(JSON.stringify(refused.body), new RegExp(stranger.master_key_id));
    } finally {
      await server.core.keys.rotate();
    }
  });
});
