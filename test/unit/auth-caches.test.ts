// What a node remembers about tokens and their subjects, against a real SQLite database: it never
// misses a revocation because another node's clock is behind, and a read that raced a change on
// this node does not bring the state from before the change back.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createPrincipalDirectory } from '../../src/modules/auth/principal-directory.js';
import { createRevocationList } from '../../src/modules/auth/revocations.js';
import { createOrgsService } from '../../src/modules/orgs/orgs.service.js';
import { openDatabase, type Database } from '../../src/platform/db/database.js';
import { migrateToLatest } from '../../src/platform/db/migrations/index.js';

const iso = (offsetMs: number) => new Date(Date.now() + offsetMs).toISOString();

describe('auth caches', () => {
  let database: Database;
  before(async () => {
    database = openDatabase({ databaseUrl: null, dataDir: fs.mkdtempSync(path.join(os.tmpdir(), 'slipway-caches-')) });
    await migrateToLatest(database);
    await database.db.insertInto('organizations').values({ id: 'org_a', slug: 'a', name: 'A', created_at: iso(0), updated_at: iso(0) }).execute();
    await database.db.insertInto('service_users').values({
      id: 'su_a', org_id: 'org_a', name: 'ci', description: '', role: 'developer', instance_admin: 0, disabled_at: null, token_generation: 0,
      created_at: iso(0), updated_at: iso(0),
    }).execute();
  });
  after(async () => { await database.close(); });

  it('picks up a revocation written by a node whose clock is an hour behind', async () => {
    const list = createRevocationList({ db: database.db, refreshMs: 1 });
    assert.equal(await list.isRevoked('tok_late'), false);
    await database.db.insertInto('revoked_tokens').values({ jti: 'tok_late', service_user_id: 'su_a', expires_at: iso(3_600_000), revoked_at: iso(-3_600_000) }).execute();
    await sleep(5);
    assert.equal(await list.isRevoked('tok_late'), true);
  });

  it('keeps a revocation past its token\'s expiry, while the verifier\'s clock tolerance could still accept the token', async () => {
    const list = createRevocationList({ db: database.db, refreshMs: 1 });
    await database.db.insertInto('revoked_tokens').values({ jti: 'tok_just_expired', service_user_id: 'su_a', expires_at: iso(-3_000), revoked_at: iso(-60_000) }).execute();
    await sleep(5);
    assert.equal(await list.isRevoked('tok_just_expired'), true);
    await list.revoke({ jti: 'tok_here', serviceUserId: 'su_a', expiresAt: Date.now() - 3_000 });
    await sleep(5);
    assert.equal(await list.isRevoked('tok_here'), true);
    await list.prune();
    assert.equal(await list.isRevoked('tok_just_expired'), true, 'pruning keeps it too');
  });

  it('does not cache what a read found when the subject changed on this node while it ran', async () => {
    const directory = createPrincipalDirectory({ db: database.db });
    const reading = directory.get('su_a');
    directory.forget('su_a'); // a change committed here while the read was in flight
    assert.equal((await reading)?.role, 'developer');
    assert.equal(directory.known('su_a'), undefined, 'the raced read is not remembered');
    await directory.get('su_a');
    assert.equal(directory.known('su_a')?.role, 'developer', 'a read that did not race is');
  });

  it('does not cache an organization read that raced a change on this node', async () => {
    const orgs = createOrgsService({ db: database.db, runnersOnlineWithinSeconds: 60 });
    const ctx = { requestId: 'r', actor: { id: 'su_a', kind: 'service_user' as const, orgId: 'org_a', role: 'owner' as const, instanceAdmin: true } };
    const reading = orgs.find('a');
    await orgs.update(ctx, 'org_a', { slug: 'renamed' });
    assert.equal((await reading)?.slug, 'a');
    assert.equal(orgs.known('a'), undefined, 'the old slug is not remembered');
    assert.equal(await orgs.find('a'), null);
    assert.equal((await orgs.find('renamed'))?.id, 'org_a');
  });
});
