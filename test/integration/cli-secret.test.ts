// `slipway secret` as a real child process against a real server, as a service user: a `.env` file
// imported, keys set and removed, values revealed as `.env` lines that import back unchanged, list,
// versions, delete and restore; the API's refusals and the command line's mistakes change nothing,
// and no output but reveal's carries a value.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { eventsSettled } from '../support/deployments.js';
import { tempDir, type Actor } from '../support/harness.js';
import { lossyProxy } from '../support/lossy-proxy.js';
import { startWithOrg, type OrgFixture } from '../support/org-fixture.js';
import { runCli, type CliResult, clientVariables } from '../support/processes.js';

describe('slipway secret', () => {
  let f: OrgFixture;
  let developer: Actor;
  let viewer: Actor;
  const dir = tempDir('slipway-cli-secret-');
  const sentinel = `SENTINEL-${randomBytes(12).toString('hex')}`;
  /** Everything every command but reveal printed: no value may be in it. */
  const printed: string[] = [];

  const secretAs = async (who: Actor, args: string[], input?: string): Promise<CliResult> => {
    const result = await runCli(['secret', ...args], clientVariables(f.server.url, f.orgId, who), input);
    if (args[0] !== 'reveal') printed.push(result.stdout, result.stderr);
    return result;
  };
  const ok = async (who: Actor, args: string[], input?: string): Promise<string> => {
    const result = await secretAs(who, args, input);
    assert.equal(result.code, 0, `slipway secret ${args.join(' ')}: ${result.stderr}`);
    return result.stdout;
  };
  const file = (name: string, text: string): string => {
    const at = path.join(dir, name);
    fs.writeFileSync(at, text);
    return at;
  };
  const reveal = async (name: string, version?: number): Promise<Record<string, string>> =>
    JSON.parse(await ok(f.admin, ['reveal', '--name', name, '--format', 'json', ...(version !== undefined ? ['--version', String(version)] : [])]));

  before(async () => {
    f = await startWithOrg();
    developer = await f.server.actor(f.orgId, 'developer');
    viewer = await f.server.actor(f.orgId, 'viewer');
  });
  after(async () => {
    await f.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('imports a .env file: created, then unchanged, then a new version holding exactly the new keys', async () => {
    const env = file('app.env', `# the app\nexport DATABASE_URL=postgres://app@db/app\nDB_PASSWORD="${sentinel}" # inline comment\n\nEMPTY=\n`);
    assert.equal(await ok(developer, ['import', '--name', 'app', '--from-file', env]), 'secret app: created, version 1 (keys DATABASE_URL DB_PASSWORD EMPTY)\n');
    assert.equal(await ok(developer, ['import', '--name', 'app', '--from-file', env]), 'secret app: unchanged, still version 1 (keys DATABASE_URL DB_PASSWORD EMPTY)\n');
    const changed = JSON.parse(await ok(developer, ['import', '--name', 'app', '--from-file', '-', '--json'], `DB_PASSWORD=${sentinel}\nTOKEN=t\n`));
    assert.equal(changed.result, 'updated');
    assert.equal(changed.version, 2);
    assert.deepEqual(changed.keys, ['DB_PASSWORD', 'TOKEN']);
    assert.deepEqual(changed.keyChanges, { added: ['TOKEN'], removed: ['DATABASE_URL', 'EMPTY'], changed: [] });
    assert.deepEqual(await reveal('app'), { DB_PASSWORD: sentinel, TOKEN: 't' });
    assert.deepEqual(await reveal('app', 1), { DATABASE_URL: 'postgres://app@db/app', DB_PASSWORD: sentinel, EMPTY: '' });
  });

  it('says created or updated when its change was made, even when the answer was lost and a retry found it done', async () => {
    // Each first PUT or PATCH reaches the server, and its answer never comes back; the retry finds the values there.
    let loseNext = false;
    const proxy = await lossyProxy(f.server.url, (req) => {
      if (req.method === 'GET' || !loseNext) return false;
      loseNext = false;
      return true;
    });
    const through = (args: string[], input?: string) => {
      loseNext = true;
      return runCli(['secret', ...args], clientVariables(f.server.url, f.orgId, developer, proxy.url), input);
    };
    try {
      const created = await through(['import', '--name', 'lost', '--from-file', '-'], 'A=1\nB=2\n');
      assert.equal(created.code, 0, created.stderr);
      assert.equal(created.stdout, 'secret lost: created, version 1 (keys A B)\n');
      const updated = await through(['import', '--name', 'lost', '--from-file', '-', '--json'], 'A=1\nC=3\n');
      assert.equal(updated.code, 0, updated.stderr);
      assert.deepEqual(JSON.parse(updated.stdout), { ...JSON.parse(updated.stdout), name: 'lost', result: 'updated', version: 2, keyChanges: { added: ['C'], removed: ['B'], changed: [] } });
      const set = await through(['set', '--name', 'lost', '--set', 'D=4']);
      assert.equal(set.code, 0, set.stderr);
      assert.equal(set.stdout, 'secret lost: updated, version 3 (keys A C D; added D)\n');
      assert.equal(proxy.seen.filter((r) => r.method !== 'GET').length, 6, 'each change was sent again once');
    } finally {
      await proxy.close();
    }
    assert.equal((await f.owner.http.get(`/v1/orgs/${f.orgId}/secrets/lost`)).body.version, 3);
    assert.equal((await f.admin.http.delete(`/v1/orgs/${f.orgId}/secrets/lost?permanent=true`)).status, 204);
  });

  it('import --dry-run says what it would do, key by key, and changes nothing', async () => {
    const env = file('dry.env', `A=1\nB=${sentinel}\n`);
    assert.equal(await ok(developer, ['import', '--name', 'dry', '--from-file', env, '--dry-run']), 'secret dry: would be created as version 1 (keys A B); a dry run: nothing was changed\n');
    assert.equal((await developer.http.get(`/v1/orgs/${f.orgId}/secrets/dry`)).status, 404);
    await ok(developer, ['import', '--name', 'dry', '--from-file', env]);
    const other = file('dry-2.env', `A=2\nC=${sentinel}\n`);
    assert.equal(await ok(developer, ['import', '--name', 'dry', '--from-file', other, '--dry-run']), 'secret dry: would be updated as version 2 (keys A C; added C, removed B, changed A); a dry run: nothing was changed\n');
    const asJson = JSON.parse(await ok(developer, ['import', '--name', 'dry', '--from-file', other, '--dry-run', '--json']));
    assert.deepEqual([asJson.result, asJson.version, asJson.dryRun], ['updated', 2, true]);
    assert.equal((await developer.http.get(`/v1/orgs/${f.orgId}/secrets/dry`)).body.version, 1);
    assert.deepEqual(await reveal('dry'), { A: '1', B: sentinel });
    // Out of the way of the listing tests below.
    assert.equal((await f.admin.http.delete(`/v1/orgs/${f.orgId}/secrets/dry?permanent=true`)).status, 204);
  });

  it('sets and removes keys, keeping the rest, and creates a secret that does not exist yet', async () => {
    assert.equal(await ok(developer, ['set', '--name', 'api', '--set', `API_KEY=${sentinel}`, '--set', 'REGION=eu=west']), 'secret api: created, version 1 (keys API_KEY REGION)\n');
    assert.equal(await ok(developer, ['set', '--name', 'api', '--set', 'REGION=us', '--unset', 'NOT_THERE']), 'secret api: updated, version 2 (keys API_KEY REGION; changed REGION)\n');
    assert.equal(await ok(developer, ['set', '--name', 'api', '--from-file', '-', '--unset', 'REGION'], 'EXTRA="two words"\n'), 'secret api: updated, version 3 (keys API_KEY EXTRA; added EXTRA, removed REGION)\n');
    assert.equal(await ok(developer, ['set', '--name', 'api', '--set', 'EXTRA=two words']), 'secret api: unchanged, still version 3 (keys API_KEY EXTRA)\n');
    assert.deepEqual(await reveal('api'), { API_KEY: sentinel, EXTRA: 'two words' });
    // Removing from a secret that is not there is not a create.
    const missing = await secretAs(developer, ['set', '--name', 'nowhere', '--unset', 'A', '--json']);
    assert.equal(missing.code, 1);
    assert.equal(JSON.parse(missing.stderr).error.code, 'secret_not_found');
  });

  it('reveals values as .env lines that import back to exactly the same values', async () => {
    const tricky = {
      PLAIN: 'abc-123_./:@+=%',
      SPACES: '  padded both sides  ',
      QUOTES: `it's "quoted"`,
      HASH: 'a #not-a-comment',
      SLASHES: 'C:\\path\\n-not-a-newline\\',
      LINES: 'first\nsecond\r\nthird\ttabbed',
      UNICODE: 'päßwörd 🔑 \u2028 line separator',
      STARTS_QUOTED: `'single'`,
      EMPTY: '',
      SENTINEL: sentinel,
    };
    const created = await f.admin.http.post(`/v1/orgs/${f.orgId}/secrets`, { secrets: [{ name: 'tricky', values: tricky }] });
    assert.equal(created.status, 201);
    const lines = await ok(f.admin, ['reveal', '--name', 'tricky']);
    assert.match(lines, /^PLAIN=abc-123_\.\/:@\+=%$/m);
    assert.equal(await ok(developer, ['import', '--name', 'tricky-copy', '--from-file', '-'], lines), `secret tricky-copy: created, version 1 (keys ${Object.keys(tricky).sort().join(' ')})\n`);
    assert.deepEqual(await reveal('tricky-copy'), tricky);
    const answer = JSON.parse(await ok(f.admin, ['reveal', '--name', 'tricky', '--json']));
    assert.deepEqual(answer, { name: 'tricky', version: 1, values: tricky });
    // Audited as any reveal.
    await eventsSettled(f.server);
    const events = (await f.owner.http.get(`/v1/orgs/${f.orgId}/events?type=secret.revealed&limit=200`)).body.events as Array<{ subject: { id: string } }>;
    assert.ok(events.length >= 3, 'each reveal wrote its event');
  });

  it('lists, shows and lists versions without a value; delete, list deleted, restore', async () => {
    const list = await ok(viewer, ['list', '--prefix', 'tri']);
    assert.match(list, /^NAME\s+VERSION\s+KEYS\s+UPDATED\n/);
    assert.deepEqual(list.trim().split('\n').slice(1).map((l) => l.split(/\s+/)[0]), ['tricky', 'tricky-copy']);
    const all = JSON.parse(await ok(viewer, ['list', '--json'])).secrets.map((s: { name: string }) => s.name);
    assert.deepEqual(all, ['api', 'app', 'tricky', 'tricky-copy']);
    assert.match(await ok(viewer, ['show', '--name', 'api']), /^name\s+api\nversion\s+3\nkeys\s+API_KEY EXTRA\n/);
    const versions = JSON.parse(await ok(viewer, ['versions', '--name', 'api', '--json'])).versions.map((v: { version: number }) => v.version);
    assert.deepEqual(versions, [3, 2, 1]);

    assert.match(await ok(developer, ['delete', '--name', 'tricky-copy']), /secret tricky-copy: deleted; an admin can restore it/);
    assert.deepEqual(JSON.parse(await ok(viewer, ['list', '--deleted', '--json'])).secrets.map((s: { name: string }) => s.name), ['tricky-copy']);
    const gone = await secretAs(viewer, ['show', '--name', 'tricky-copy', '--json']);
    assert.equal(gone.code, 1);
    assert.equal(JSON.parse(gone.stderr).error.code, 'secret_deleted');
    assert.equal((await secretAs(developer, ['delete', '--name', 'tricky-copy'])).code, 1);
    assert.equal(await ok(developer, ['delete', '--name', 'tricky-copy', '--ignore-not-found']), 'secret tricky-copy: not found (or deleted already); nothing to delete\n');
    assert.equal(await ok(developer, ['delete', '--name', 'no-such-secret', '--ignore-not-found']), 'secret no-such-secret: not found (or deleted already); nothing to delete\n');
    assert.equal(await ok(f.admin, ['restore', '--name', 'tricky-copy']), `secret tricky-copy: restored, version 1 (keys ${['EMPTY', 'HASH', 'LINES', 'PLAIN', 'QUOTES', 'SENTINEL', 'SLASHES', 'SPACES', 'STARTS_QUOTED', 'UNICODE'].join(' ')})\n`);
    // An earlier version's values, current again as a new version.
    assert.equal(await ok(f.admin, ['restore', '--name', 'api', '--version', '1']), 'secret api: updated, version 4 (keys API_KEY REGION; added REGION, removed EXTRA)\n');
    assert.deepEqual(await reveal('api'), { API_KEY: sentinel, REGION: 'eu=west' });

    const permanent = await secretAs(developer, ['delete', '--name', 'tricky-copy', '--permanent']);
    assert.equal(permanent.code, 1, 'a developer may not delete permanently');
    assert.match(permanent.stderr, /admin/);
    assert.match(await ok(f.admin, ['delete', '--name', 'tricky-copy', '--permanent']), /deleted permanently/);
    assert.deepEqual(JSON.parse(await ok(viewer, ['list', '--deleted', '--json'])).secrets, []);
  });

  it('says where a secret is used: services, environments, and the deployments that pinned its versions', async () => {
    await ok(developer, ['import', '--name', 'used', '--from-file', '-'], `DB_PASSWORD=${sentinel}\nUSER=app\n`);
    assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/services`, { name: 'api', spec: { command: ['x'], secrets: [{ secret: 'used', key: 'DB_PASSWORD', as: 'PASSWORD' }] } })).status, 201);
    assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/environments`, { name: 'staging', secrets: [{ secret: 'used', key: 'USER' }] })).status, 201);
    const queued = await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments`, { service: 'api', environment: 'staging' });
    assert.equal(queued.status, 201, queued.text);
    const table = await ok(viewer, ['usage', '--name', 'used']);
    assert.match(table, /^USED_BY\s+NAME\s+KEYS\s+VERSIONS\s+STATE\n/);
    assert.match(table, /\nservice\s+api\s+DB_PASSWORD as PASSWORD\s*\n/);
    assert.match(table, /\nenvironment\s+staging\s+USER\s*\n/);
    assert.match(table, new RegExp(`\\ndeployment\\s+${queued.body.id} \\(api in staging\\)\\s+1\\s+queued\\n$`));
    const json = JSON.parse(await ok(viewer, ['usage', '--name', 'used', '--json']));
    assert.deepEqual([json.services[0].keys, json.environments[0].keys, json.deployments[0].versions], [['DB_PASSWORD as PASSWORD'], ['USER'], [1]]);
    assert.equal((await f.admin.http.post(`/v1/orgs/${f.orgId}/deployments/${queued.body.id}/cancel`, {})).status, 200);

    // An import that would remove a key a service or an environment takes by name is refused, nothing sent.
    const removing = await secretAs(developer, ['import', '--name', 'used', '--from-file', '-', '--json'], 'OTHER=x\n');
    assert.equal(removing.code, 1);
    const refusal = JSON.parse(removing.stderr).error;
    assert.deepEqual([refusal.code, refusal.removed, refusal.usedBy], ['keys_in_use', ['DB_PASSWORD', 'USER'], [{ service: 'api', keys: ['DB_PASSWORD as PASSWORD'] }, { environment: 'staging', keys: ['USER'] }]]);
    assert.ok(!removing.stderr.includes(sentinel));
    const plain = await secretAs(developer, ['import', '--name', 'used', '--from-file', '-'], `DB_PASSWORD=${sentinel}\n`);
    assert.equal(plain.code, 1);
    assert.match(plain.stderr, /leaves out USER of secret used, which the import would remove, and environment staging takes USER: .*give --force\n$/);
    assert.equal(JSON.parse(await ok(viewer, ['show', '--name', 'used', '--json'])).version, 1);
    assert.equal(await ok(developer, ['import', '--name', 'used', '--from-file', '-', '--force'], `DB_PASSWORD=${sentinel}\nOTHER=x\n`), 'secret used: updated, version 2 (keys DB_PASSWORD OTHER; added OTHER, removed USER)\n');

    // set --unset of a key a service takes: refused as an import is; a key it does not have is said.
    const unsetting = await secretAs(developer, ['set', '--name', 'used', '--unset', 'DB_PASSWORD', '--unset', 'NOPE', '--json']);
    assert.equal(unsetting.code, 1);
    const lines = unsetting.stderr.trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(lines[0].level, 'warn');
    assert.match(lines[0].msg, /secret used has no key NOPE: nothing to --unset there \(its keys: DB_PASSWORD OTHER\)/);
    assert.deepEqual([lines[1].error.code, lines[1].error.removed, lines[1].error.usedBy], ['keys_in_use', ['DB_PASSWORD'], [{ service: 'api', keys: ['DB_PASSWORD as PASSWORD'] }]]);
    assert.equal(JSON.parse(await ok(viewer, ['show', '--name', 'used', '--json'])).version, 2);
    // A delete of a secret something takes by name: refused (its next deployment would fail), unless --force.
    const deleting = await secretAs(developer, ['delete', '--name', 'used']);
    assert.equal(deleting.code, 1);
    assert.match(deleting.stderr, /^slipway: secret used would be deleted, and service api takes DB_PASSWORD as PASSWORD; environment staging takes USER: their next deployment would fail\. Nothing was sent: change what takes it first, or give --force\n$/);
    assert.equal((await f.admin.http.patch(`/v1/orgs/${f.orgId}/services/api`, { spec: { command: ['x'], secrets: [{ secret: 'used' }] } })).status, 200);
    assert.match((await secretAs(developer, ['delete', '--name', 'used'])).stderr, /service api takes \(all keys\)/);
    assert.equal(JSON.parse(await ok(viewer, ['show', '--name', 'used', '--json'])).version, 2);
    const missing = await secretAs(viewer, ['usage', '--name', 'no-such-secret']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /no-such-secret/);
  });

  it('refuses what the caller\'s role does not allow, and reports the API\'s refusals with exit 1', async () => {
    const before = (await f.owner.http.get(`/v1/orgs/${f.orgId}/secrets/api`)).body.version;
    const byDeveloper = await secretAs(developer, ['reveal', '--name', 'api']);
    assert.equal(byDeveloper.code, 1);
    assert.equal(byDeveloper.stdout, '');
    assert.match(byDeveloper.stderr, /^slipway: .*admin/m);
    const byViewer = await secretAs(viewer, ['set', '--name', 'api', '--set', `API_KEY=${sentinel}-viewer`, '--json']);
    assert.equal(byViewer.code, 1);
    assert.equal(JSON.parse(byViewer.stderr).error.status, 403);
    const badKey = await secretAs(developer, ['set', '--name', 'api', '--set', `1BAD=${sentinel}`, '--json']);
    assert.equal(badKey.code, 1);
    assert.equal(JSON.parse(badKey.stderr).error.status, 400);
    assert.equal((await f.owner.http.get(`/v1/orgs/${f.orgId}/secrets/api`)).body.version, before, 'nothing changed');
  });

  it('says a refusal over a limit of the file imported: how many keys it holds, which value is too long', async () => {
    const many = file('many.env', Array.from({ length: 101 }, (_, i) => `K${i}=v`).join('\n'));
    const tooMany = await secretAs(developer, ['import', '--name', 'many', '--from-file', many]);
    assert.equal(tooMany.code, 1);
    assert.match(tooMany.stderr, new RegExp(`^slipway: --from-file ${many} holds 101 keys; the server takes at most 100 in a secret \\(SLIPWAY_MAX_KEYS_PER_SECRET\\)\\. Nothing was changed\\.$`, 'm'));
    const long = await secretAs(developer, ['import', '--name', 'long', '--from-file', '-', '--json'], `SHORT=x\nLONG=${'y'.repeat(65_537)}\n`);
    assert.equal(long.code, 1);
    const error = JSON.parse(long.stderr).error;
    assert.equal(error.code, 'limit_exceeded');
    assert.match(error.message, /^standard input: the value of LONG \(65537 characters\) is longer than the server takes \(65536 characters, SLIPWAY_MAX_VALUE_CHARS\)/);
    assert.equal((await f.owner.http.get(`/v1/orgs/${f.orgId}/secrets/many`)).status, 404);
  });

  it('refuses a mistaken command line with exit 2 before anything is sent, quoting no value', async () => {
    await eventsSettled(f.server);
    const before = (await f.owner.http.get(`/v1/orgs/${f.orgId}/events?limit=200`)).body.events.length;
    const broken = file('broken.env', `GOOD=1\nnot a line\nQUOTE="${sentinel}\nGOOD=2\n`);
    for (const [args, message, input] of [
      [['import', '--name', 'x', '--from-file', broken], /is not \.env text, nothing was sent: line 2 is not KEY=value; line 3 has a quote that is not closed.*; line 4 sets GOOD again \(first on line 1\)/],
      [['import', '--name', 'x', '--from-file', '-'], /standard input holds no KEY=value line/, '# only a comment\n'],
      [['import', '--name', 'bad name', '--from-file', '-'], /^slipway: --name must be a secret's name: letters, digits/, 'A=1\n'],
      [['show', '--name', '../etc'], /^slipway: --name must be a secret's name/],
      [['import', '--name', 'x', '--from-file', path.join(dir, 'missing.env')], /cannot read it \(ENOENT\)/],
      [['import', '--name', 'x'], /--from-file FILE is required/],
      [['set', '--name', 'x'], /nothing to change/],
      [['set', '--name', 'x', '--set', sentinel], /--set must be KEY=VALUE/],
      [['set', '--name', 'x', '--set', 'A=1', '--unset', 'A'], /A is both set and --unset/],
      [['set', '--name', 'x', '--set', 'A=1', '--from-file', '-'], /--set A is given twice \(also in --from-file -\)/, `A=${sentinel}\n`],
      [['set', '--set', 'A=1'], /--name is required/],
      [['reveal', '--name', 'api', '--format', 'yaml'], /--format must be env or json, got "yaml"/],
      [['restore', '--name', 'api', '--version', '0'], /--version must be a version number/],
      [['delete', '--name', 'api', '--set', 'A=1'], /Unknown option '--set'/],
      [['rename', '--name', 'api'], /unknown secret command "rename"/],
      [[], /a secret command is needed/],
    ] as Array<[string[], RegExp, string?]>) {
      const result = await secretAs(developer, args, input);
      assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`);
      assert.match(result.stderr, message);
    }
    await eventsSettled(f.server);
    assert.equal((await f.owner.http.get(`/v1/orgs/${f.orgId}/events?limit=200`)).body.events.length, before, 'no request changed anything');
  });

  it('no output but reveal\'s, and no server log line, carries a value', () => {
    assert.ok(printed.length > 40);
    for (const text of [...printed, ...f.server.logs]) assert.ok(!text.includes(sentinel), text);
  });
});
