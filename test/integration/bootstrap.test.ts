// The first start's bootstrap makes nothing it cannot hand over (credentials that cannot be
// written would be lost with the owner made), and a start that claimed it and died in between
// does not keep every later start from bootstrapping.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, afterEach, beforeEach, describe, it } from 'node:test';
import { openCore, type Core } from '../../src/app.js';
import { BOOTSTRAP_FILE, bootstrapIfEmpty } from '../../src/modules/instance/bootstrap.js';
import { ConfigError, loadConfig } from '../../src/platform/config.js';
import { tempDir, testDatabase } from '../support/harness.js';

describe('first start bootstrap', () => {
  let dataDir: string;
  let database: Awaited<ReturnType<typeof testDatabase>>;
  let core: Core;
  const cleanups: Array<() => Promise<void>> = [];
  beforeEach(async () => {
    dataDir = tempDir('slipway-bootstrap-');
    database = await testDatabase();
    const config = loadConfig({ SLIPWAY_DATA_DIR: dataDir, SLIPWAY_LOG_LEVEL: 'silent', ...(database.url ? { SLIPWAY_DATABASE_URL: database.url } : {}) }, {}, dataDir);
    core = await openCore(config);
    const [c, d, dir] = [core, database, dataDir];
    cleanups.push(async () => { await c.close(); await d.drop(); fs.rmSync(dir, { recursive: true, force: true }); });
  });
  afterEach(async () => { while (cleanups.length > 0) await cleanups.pop()!(); });
  after(async () => { while (cleanups.length > 0) await cleanups.pop()!(); });

  const bootstrap = () => bootstrapIfEmpty({ db: core.db, dataDir, orgs: core.orgs, serviceUsers: core.serviceUsers, logger: core.logger });
  const orgCount = async () => (await core.db.selectFrom('organizations').select('id').execute()).length;
  const claim = async () => (await core.db.selectFrom('instance_settings').select('value').where('key', '=', 'bootstrapped_by').executeTakeFirst())?.value;

  it('makes nothing when the credentials cannot be written, and bootstraps once they can', async () => {
    const file = path.join(dataDir, BOOTSTRAP_FILE);
    fs.mkdirSync(file);
    await assert.rejects(bootstrap(), (error: unknown) => error instanceof ConfigError
      && error.message.includes(`writes the owner's credentials to ${file}, and cannot (EISDIR)`) && /nothing was created$/.test(error.message));
    assert.equal(await orgCount(), 0);
    assert.equal(await claim(), undefined, 'the claim was kept');
    assert.deepEqual(fs.readdirSync(dataDir).filter((f) => f.includes('.probe') || f.endsWith('.tmp')), []);

    fs.rmdirSync(file);
    assert.equal(await bootstrap(), file);
    assert.equal(await orgCount(), 1);
    assert.equal(JSON.parse(fs.readFileSync(file, 'utf8')).clientSecret.startsWith('sws_'), true);
  });

  it('leaves the bootstrap to a start that claimed it just now', async () => {
    await core.db.insertInto('instance_settings').values({ key: 'bootstrapped_by', value: `another-start ${new Date().toISOString()}` }).execute();
    assert.equal(await bootstrap(), null);
    assert.equal(await orgCount(), 0);
  });

  // Long ago, or in the form of a Slipway whose claims carried no time.
  for (const [what, stale] of [['a minute ago', `another-start ${new Date(Date.now() - 120_000).toISOString()}`], ['without its time', 'a0b1c2d3-0000-4000-8000-000000000000']]) {
    it(`takes over a claim made ${what} by a start that died before making anything`, async () => {
      await core.db.insertInto('instance_settings').values({ key: 'bootstrapped_by', value: stale! }).execute();
      assert.equal(await bootstrap(), path.join(dataDir, BOOTSTRAP_FILE));
      assert.equal(await orgCount(), 1);
      assert.notEqual(await claim(), stale);
      assert.equal(await bootstrap(), null, 'an instance that has organizations is never bootstrapped again');
    });
  }
});
