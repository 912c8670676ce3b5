// One key signs at a time, whatever several nodes do at once: nodes that start together on a
// database without an active key make one between them, and a database where an earlier race left
// more than one signing is put right (the newest keeps signing) by the next start.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createSigningKeys, generateSigningKeyRow } from '../../src/modules/auth/signing-keys.js';
import { openDatabase, type Database } from '../../src/platform/db/database.js';
import { startServer, type TestServer } from '../support/harness.js';

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
    assert.equal(set.signer.kid, later.kid);
    assert.deepEqual(set.publicJwks.map((k) => k.kid).filter((kid) => kid === current!.kid || kid === later.kid).sort(), [current!.kid, later.kid].sort());
  });
});
