// `slipway keys rotate-master` as a real child process against the data dir and database of a
// server that keeps serving meanwhile (rotate-signing: signing-key-rotation.test.ts).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { openCore } from '../../src/app.js';
import { loadConfig } from '../../src/platform/config.js';
import { generateMasterKey, KEY_FILE, keyringOf, masterKeyId, readKeyFile, unwrapKey, writeKeyFile } from '../../src/platform/crypto/master-key.js';
import { instanceRepo } from '../../src/modules/instance/instance.repo.js';
import { createLogger } from '../../src/platform/logging.js';
import { keysRepo, WRAPPED_TABLES } from '../../src/modules/keys/keys.repo.js';
import { createDataKeys } from '../../src/modules/secrets/data-keys.js';
import { cliContext } from '../../src/platform/context.js';
import { freePort, startServer, type Actor, type TestServer } from '../support/harness.js';
import { CLI_ENTRY, cliEnv, cliJson, runCli, spawnServe } from '../support/processes.js';

/** `${orgId}/${name}/${version}` → values, and an admin of each organization to reveal them. */
interface Expected {
  values: Map<string, Record<string, string>>;
  admins: Map<string, Actor>;
}
const expectation = (): Expected => ({ values: new Map(), admins: new Map() });

const VERSIONS = 3;

/** A new organization with a few secrets of several versions each, written over HTTP by one of its admins. */
async function seedOrg(server: TestServer, expected: Expected, secrets = 2): Promise<string> {
  const org = await server.createOrg();
  const admin = await server.actor(org.id, 'admin');
  expected.admins.set(org.id, admin);
  const valuesOf = (i: number, v: number) => ({ A: `${org.id}-a${i}-v${v}`, B: `${org.id}-b${i}-v${v}` });
  const items = Array.from({ length: secrets }, (_, i) => ({ name: `s${i}`, values: valuesOf(i, 1) }));
  const res = await admin.http.post(`/v1/orgs/${org.id}/secrets`, { secrets: items });
  assert.equal(res.status, 201, res.text);
  for (const [i, item] of items.entries()) {
    expected.values.set(`${org.id}/${item.name}/1`, item.values);
    for (let v = 2; v <= VERSIONS; v++) {
      const put = await admin.http.put(`/v1/orgs/${org.id}/secrets/${item.name}`, { values: valuesOf(i, v) });
      assert.equal(put.status, 200, put.text);
      assert.equal(put.body.version, v);
      expected.values.set(`${org.id}/${item.name}/${v}`, valuesOf(i, v));
    }
  }
  return org.id;
}

/**
 * Every version of every secret reveals correctly: over HTTP from the running server, and from
 * the stored rows through a fresh data-key cache holding `keys` alone (the server's cache of
 * unwrapped data keys would hide a broken row).
 */
async function assertEverySecretOpens(server: TestServer, keys: Buffer[], expected: Expected): Promise<void> {
  const dataKeys = createDataKeys({ ring: keyringOf(keys) });
  const rows = await server.core.db.selectFrom('secret_versions').innerJoin('secrets', 'secrets.id', 'secret_versions.secret_id')
    .select(['secrets.org_id', 'secrets.name', 'secret_versions.secret_id', 'secret_versions.version', 'secret_versions.data_key_id', 'secret_versions.ciphertext'])
    .where('secrets.org_id', 'in', [...expected.admins.keys()])
    .execute();
  const seen: string[] = [];
  for (const row of rows) {
    const key = `${row.org_id}/${row.name}/${row.version}`;
    const values = await dataKeys.openValues(server.core.db, row.data_key_id, row.org_id, row.secret_id, row.version, row.ciphertext);
    assert.deepEqual(values, expected.values.get(key), key);
    seen.push(key);
  }
  assert.deepEqual(seen.sort(), [...expected.values.keys()].sort());
  for (const [key, values] of expected.values) {
    const [orgId, name, version] = key.split('/') as [string, string, string];
    const res = await expected.admins.get(orgId)!.http.post(`/v1/orgs/${orgId}/secrets/${name}/reveal`, { version: Number(version) });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body.values, values, key);
  }
}

/** No wrapped row names `old`, and its key cannot open any of them even when forced on the bytes. */
async function assertKeyOpensNothing(server: TestServer, old: Buffer): Promise<void> {
  const ring = keyringOf([old]);
  let dataKeys = 0;
  for (const table of WRAPPED_TABLES) {
    for (const row of await keysRepo.list(server.core.db, table)) {
      if (table === 'org_data_keys') dataKeys++;
      assert.notEqual(row.masterKeyId, masterKeyId(old), `${table} ${row.id} still names the old key`);
      assert.throws(() => unwrapKey(ring, row.sealed, row.masterKeyId, row.binding), /not configured/);
      assert.throws(() => unwrapKey(ring, row.sealed, masterKeyId(old), row.binding), /unable to authenticate|Unsupported state/);
    }
  }
  assert.ok(dataKeys > 0);
}

async function usageIds(server: TestServer): Promise<string[]> {
  return [...new Set((await keysRepo.usage(server.core.db)).map((u) => u.masterKeyId))].sort();
}

/** A fresh process-like core on the same database and data dir: unwraps the pepper and the signing key with what `env` configures. */
async function assertFreshCoreStarts(server: TestServer, env: Record<string, string>): Promise<void> {
  const core = await openCore(loadConfig(cliEnv(server, env)), { migrate: false, logger: createLogger('silent') });
  try {
    await core.keys.reload();
  } finally {
    await core.close();
  }
}

/**
 * `slipway keys rotate-master …` in the background: its stderr lines (progress and logs) collected
 * as they come, and its stdout (the result alone).
 */
function spawnRotation(args: string[], env: Record<string, string>) {
  const child = spawn(process.execPath, [CLI_ENTRY, 'keys', 'rotate-master', ...args], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  let partial = '';
  let stdout = '';
  const waiters: Array<() => void> = [];
  child.stderr.on('data', (chunk: Buffer) => {
    const parts = (partial + chunk.toString('utf8')).split('\n');
    partial = parts.pop()!;
    lines.push(...parts);
    for (const wake of waiters) wake();
  });
  child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString('utf8'); });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));
  return {
    child, lines, exited, stdout: () => stdout, stderr: () => lines.join('\n'),
    waitForLine(prefix: string): Promise<void> {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (lines.some((l) => l.startsWith(prefix))) resolve();
        };
        waiters.push(check);
        check();
        void exited.then(({ code }) => reject(new Error(`rotation exited ${code} before printing "${prefix}": ${lines.join('\n')}\n${stdout}`)));
      });
    },
  };
}

describe('master key rotation, key file source', () => {
  let server: TestServer;
  const expected = expectation();
  const keyFile = () => path.join(server.dataDir, KEY_FILE);

  before(async () => {
    server = await startServer();
    for (let i = 0; i < 3; i++) await seedOrg(server, expected);
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  it('re-wraps every data key under a new key while the server keeps serving; the old key alone opens nothing', async () => {
    const [old] = readKeyFile(keyFile());
    const rotation = spawnRotation(['--batch-size', '1', '--pause-ms', '20'], cliEnv(server));
    // The key file names the new key before the first batch: everything the server makes from now
    // on is wrapped under it, and every request keeps working.
    await rotation.waitForLine('batch 1:');
    let running = true;
    void rotation.exited.then(() => { running = false; });
    const madeDuring: string[] = [];
    do madeDuring.push(await seedOrg(server, expected, 1));
    while (running);
    const { code } = await rotation.exited;
    assert.equal(code, 0, rotation.stderr());

    const keys = readKeyFile(keyFile());
    assert.equal(keys.length, 1);
    const [next] = keys;
    assert.notEqual(masterKeyId(next!), masterKeyId(old!));
    assert.equal(fs.statSync(keyFile()).mode & 0o777, 0o600);
    assert.deepEqual(await usageIds(server), [masterKeyId(next!)]);
    // The result alone on stdout; the progress went to stderr.
    assert.ok(rotation.stdout().split('\n').some((l) => l.startsWith('master key') && l.includes(masterKeyId(next!))));
    assert.ok(!rotation.stdout().includes('batch '));
    // Earlier backups open only with the key the file no longer holds: the closing advice says so.
    assert.match(rotation.stdout(), new RegExp(`^next: Backups taken before this rotation open only with the retired key ${masterKeyId(old!)}, and the key file no longer holds it: keep a copy`, 'm'));
    // SLIPWAY_MASTER_KEY_PREVIOUS alone is refused beside a key file: the advice says what opens such a backup.
    assert.match(rotation.stdout(), /Restoring one needs it as a line at the end of the key file \(after the current key, which wraps\), or SLIPWAY_MASTER_KEY set to the current key and SLIPWAY_MASTER_KEY_PREVIOUS to it\.$/m);
    const during = await server.core.db.selectFrom('org_data_keys').select('master_key_id').where('org_id', 'in', madeDuring).execute();
    assert.deepEqual([...new Set(during.map((r) => r.master_key_id))], [masterKeyId(next!)]);

    await assertEverySecretOpens(server, [next!], expected);
    await assertKeyOpensNothing(server, old!);
    await assertFreshCoreStarts(server, {});
    // Logged as an instance operation, by id: never key material.
    assert.ok(!rotation.stderr().includes(next!.toString('base64')) && !rotation.stderr().includes(old!.toString('base64')));
    assert.match(rotation.stderr(), /master key rotation finished/);

    const status = await cliJson(['keys', 'status'], cliEnv(server));
    assert.equal(status.masterKey.currentId, masterKeyId(next!));
    assert.equal(status.masterKey.rotationPending, false);
    assert.deepEqual(status.masterKey.usage.map((u: any) => u.masterKeyId), [masterKeyId(next!)]);
    assert.equal(status.masterKey.usage[0].rows.org_data_keys, (await keysRepo.list(server.core.db, 'org_data_keys')).length);
  });

  it('a rotation killed halfway continues where it stopped when run again', async () => {
    const [old] = readKeyFile(keyFile());
    // The long pause after each batch is where it gets killed: after the first batch of two rows.
    const rotation = spawnRotation(['--batch-size', '2', '--pause-ms', '600000'], cliEnv(server));
    await rotation.waitForLine('batch 1:');
    rotation.child.kill('SIGKILL');
    assert.equal((await rotation.exited).signal, 'SIGKILL');

    // Half done: the file names the new key first and still the old one; rows are under both.
    const [next, ...rest] = readKeyFile(keyFile());
    assert.deepEqual(rest.map(masterKeyId), [masterKeyId(old!)]);
    assert.deepEqual(await usageIds(server), [masterKeyId(next!), masterKeyId(old!)].sort());
    const pending = await cliJson(['keys', 'status'], cliEnv(server));
    assert.equal(pending.masterKey.rotationPending, true);
    // Meanwhile the server serves, and wraps what it makes under the new key.
    const orgId = await seedOrg(server, expected, 2);
    const made = await server.core.db.selectFrom('org_data_keys').select('master_key_id').where('org_id', '=', orgId).executeTakeFirstOrThrow();
    assert.equal(made.master_key_id, masterKeyId(next!));
    await assertEverySecretOpens(server, [next!, old!], expected);

    const again = await runCli(['keys', 'rotate-master', '--json'], cliEnv(server));
    assert.equal(again.code, 0, again.stderr);
    const result = JSON.parse(again.stdout);
    assert.equal(result.resumed, true);
    assert.equal(result.masterKeyId, masterKeyId(next!));
    assert.deepEqual(result.previousKeyIds, [masterKeyId(old!)]);
    assert.ok(result.rewrapped >= 1);
    // The log line names the killed rotation's process as holderPid: pid is the logging process's own, once.
    const tookOver = again.stderr.split('\n').find((line) => /stopped before finishing/.test(line));
    assert.ok(tookOver, again.stderr);
    assert.equal(tookOver.match(/"pid":/g)?.length, 1, tookOver);
    assert.equal(JSON.parse(tookOver).holderPid, rotation.child.pid);

    assert.deepEqual(readKeyFile(keyFile()).map(masterKeyId), [masterKeyId(next!)]);
    assert.equal(fs.existsSync(`${keyFile()}.lock`), false);
    assert.deepEqual(await usageIds(server), [masterKeyId(next!)]);
    await seedOrg(server, expected, 1);
    await assertEverySecretOpens(server, [next!], expected);
    await assertKeyOpensNothing(server, old!);
    await assertFreshCoreStarts(server, {});
  });

  it('two rotations in a row, with nothing wrapped in between, leave a running server wrapping under the newest key', async () => {
    for (let i = 0; i < 2; i++) {
      const res = await runCli(['keys', 'rotate-master', '--json'], cliEnv(server));
      assert.equal(res.code, 0, res.stderr);
    }
    const [newest] = readKeyFile(keyFile());
    // A new organization's first secret wraps a data key in the running server.
    const orgId = await seedOrg(server, expected, 1);
    const made = await server.core.db.selectFrom('org_data_keys').select('master_key_id').where('org_id', '=', orgId).execute();
    assert.deepEqual(made.map((r) => r.master_key_id), [masterKeyId(newest!)]);
    assert.deepEqual(await usageIds(server), [masterKeyId(newest!)]);
    await assertEverySecretOpens(server, [newest!], expected);
    await assertFreshCoreStarts(server, {});
  });

  it('a key file with an old key added at its end (to open a restored backup) rotates to a new key, not taken for a rotation under way', async () => {
    const [current] = readKeyFile(keyFile());
    const restored = generateMasterKey();
    writeKeyFile(keyFile(), [current!, restored]);
    const res = await runCli(['keys', 'rotate-master', '--json'], cliEnv(server));
    assert.equal(res.code, 0, res.stderr);
    const result = JSON.parse(res.stdout);
    assert.equal(result.resumed, false);
    assert.notEqual(result.masterKeyId, masterKeyId(current!));
    assert.deepEqual(readKeyFile(keyFile()).map(masterKeyId), [result.masterKeyId]);
    assert.deepEqual(await usageIds(server), [result.masterKeyId]);
    await assertKeyOpensNothing(server, current!);
    await assertEverySecretOpens(server, readKeyFile(keyFile()), expected);
  });
});

describe('a missing or foreign master key file beside a database in use', () => {
  let server: TestServer;
  const expected = expectation();
  const keyFile = () => path.join(server.dataDir, KEY_FILE);

  before(async () => {
    server = await startServer();
    await seedOrg(server, expected, 1);
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  it('no command replaces a missing key file with a new key: each refuses in one line naming the keys needed, writing nothing', async () => {
    const saved = fs.readFileSync(keyFile());
    const keys = readKeyFile(keyFile());
    const ids = await usageIds(server);
    fs.rmSync(keyFile());
    try {
      for (const args of [['keys', 'status'], ['org', 'list'], ['migrate']]) {
        const res = await runCli(args, cliEnv(server));
        assert.equal(res.code, 2, `${args.join(' ')}: ${res.stderr}`);
        const lines = res.stderr.trim().split('\n');
        assert.equal(lines.length, 1, res.stderr);
        assert.match(lines[0]!, new RegExp(`^slipway: the master key file .*${KEY_FILE} is missing, and the database holds data wrapped under master key ${ids.join(', ')}: restore the file .*SLIPWAY_MASTER_KEY`));
        assert.equal(fs.existsSync(keyFile()), false, args.join(' '));
      }
      // The server holds the key all along and keeps serving what it wrapped.
      await assertEverySecretOpens(server, keys, expected);
    } finally {
      fs.writeFileSync(keyFile(), saved, { mode: 0o600 });
    }
  });

  it('keys status opens when every row is under a key not given (a backup restored without its key), and says which key to add', async () => {
    const saved = fs.readFileSync(keyFile());
    const ids = await usageIds(server);
    fs.rmSync(keyFile());
    const only = { SLIPWAY_MASTER_KEY: generateMasterKey().toString('base64') };
    try {
      const refused = await runCli(['org', 'list'], cliEnv(server, only));
      assert.equal(refused.code, 2, refused.stderr);
      const status = await cliJson(['keys', 'status'], cliEnv(server, only));
      assert.deepEqual(status.masterKey.usage.filter((u: any) => !u.configured).map((u: any) => u.masterKeyId), ids);
      assert.ok(status.masterKey.usage.filter((u: any) => !u.configured).every((u: any) => u.rows.instance_keys > 0 || u.rows.signing_keys > 0));
      const plain = await runCli(['keys', 'status'], cliEnv(server, only));
      assert.equal(plain.code, 0, plain.stderr);
      assert.match(plain.stdout, new RegExp(`^missing +rows under ${ids.join(', ')}, a key not given: add it to SLIPWAY_MASTER_KEY_PREVIOUS or to the key file`, 'm'));
      // What would wrap a signing key under the key given is refused, as every other command is.
      const usage = JSON.stringify(await keysRepo.usage(server.core.db));
      for (const args of [['keys', 'rotate-signing'], ['keys', 'revoke-signing', '--kid=no-such-kid']]) {
        const refused = await runCli(args, cliEnv(server, only));
        assert.equal(refused.code, 2, `${args.join(' ')}: ${refused.stderr}`);
        assert.match(refused.stderr, new RegExp(`^slipway: the database holds data wrapped under master key ${ids.join(', ')}, which SLIPWAY_MASTER_KEY and SLIPWAY_MASTER_KEY_PREVIOUS do not hold`));
      }
      assert.equal(JSON.stringify(await keysRepo.usage(server.core.db)), usage, 'nothing wrapped');
      assert.equal(fs.existsSync(keyFile()), false, 'no key file made');
    } finally {
      fs.writeFileSync(keyFile(), saved, { mode: 0o600 });
    }
  });

  it('a running server wraps nothing new while the key file holds none of its keys, keeps opening what it has, and logs an error naming the file', async () => {
    const saved = fs.readFileSync(keyFile());
    const [real] = readKeyFile(keyFile());
    const foreign = generateMasterKey();
    const org = await server.createOrg();
    const admin = await server.actor(org.id, 'admin');
    const first = { secrets: [{ name: 'first', values: { A: 'first-value' } }] };
    writeKeyFile(keyFile(), [foreign]);
    try {
      // The organization's first secret needs a data key wrapped: not under a key the file lacks.
      for (let i = 0; i < 2; i++) {
        const refused = await admin.http.post(`/v1/orgs/${org.id}/secrets`, first);
        assert.equal(refused.status, 503, refused.text);
        assert.equal(refused.body.code, 'unavailable');
        assert.match(refused.body.detail, /master key file does not hold the key it uses.*Nothing was written/);
        assert.equal(refused.headers.get('retry-after'), '30');
        assert.doesNotMatch(refused.text, /first-value|master\.key|mk_/);
      }
      assert.deepEqual(await usageIds(server), [masterKeyId(real!)]);
      await assertEverySecretOpens(server, [real!], expected);
      const errors = server.logs.map((l) => JSON.parse(l) as { level: string; msg: string; file?: string }).filter((l) => l.level === 'error' && l.file === keyFile());
      assert.equal(errors.length, 1, server.logs.join('\n'));
      assert.match(errors[0]!.msg, /holds none of the keys in use.*wrapping nothing new/);
    } finally {
      fs.writeFileSync(keyFile(), saved, { mode: 0o600 });
    }
    // The right file back: the same request goes through, under its key.
    assert.equal((await admin.http.post(`/v1/orgs/${org.id}/secrets`, first)).status, 201);
    assert.deepEqual(await usageIds(server), [masterKeyId(real!)]);
    await assertEverySecretOpens(server, [real!], expected);
  });

  it('SLIPWAY_PROJECT_ID changes the stored project id only through serve and migrate; other commands warn and ignore it', async () => {
    const stored = (await instanceRepo.getSetting(server.core.db, 'project_id'))!;
    const other = stored === '123456789012345678' ? '223456789012345678' : '123456789012345678';
    const list = await runCli(['org', 'list'], cliEnv(server, { SLIPWAY_PROJECT_ID: other }));
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stderr, /SLIPWAY_PROJECT_ID differs from the instance's project id and is ignored/);
    assert.equal(await instanceRepo.getSetting(server.core.db, 'project_id'), stored);
    try {
      assert.equal((await cliJson(['migrate'], cliEnv(server, { SLIPWAY_PROJECT_ID: other }))).projectId, other);
      assert.equal(await instanceRepo.getSetting(server.core.db, 'project_id'), other);
    } finally {
      await cliJson(['migrate'], cliEnv(server, { SLIPWAY_PROJECT_ID: stored }));
    }
    assert.equal(await instanceRepo.getSetting(server.core.db, 'project_id'), stored);
  });
});

describe('master key rotation, SLIPWAY_MASTER_KEY source', () => {
  const oldKey = generateMasterKey();
  const newKey = generateMasterKey();
  const b64 = (k: Buffer) => k.toString('base64');
  let server: TestServer;
  let newKeyFile: string;
  const expected = expectation();

  before(async () => {
    // The documented rollout's step 2: every node accepts the new key, still wrapping with the old.
    server = await startServer({ env: { SLIPWAY_MASTER_KEY: b64(oldKey), SLIPWAY_MASTER_KEY_PREVIOUS: b64(newKey) } });
    for (let i = 0; i < 2; i++) await seedOrg(server, expected);
    newKeyFile = path.join(server.dataDir, 'new.key');
    fs.writeFileSync(newKeyFile, b64(newKey) + '\n', { mode: 0o600 });
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  it('refuses to start without every key that rows are wrapped under, changing nothing', async () => {
    const res = await runCli(['keys', 'rotate-master'], cliEnv(server, { SLIPWAY_MASTER_KEY: b64(newKey) }));
    assert.equal(res.code, 1);
    assert.match(res.stderr, new RegExp(`${masterKeyId(oldKey)}, which is not configured.*SLIPWAY_MASTER_KEY_PREVIOUS`));
    assert.deepEqual(await usageIds(server), [masterKeyId(oldKey)]);
  });

  it('re-wraps everything under the key in --new-key-file; the old key alone opens nothing', async () => {
    const result = await cliJson(['keys', 'rotate-master', '--new-key-file', newKeyFile, '--batch-size', '2'], cliEnv(server, { SLIPWAY_MASTER_KEY: b64(oldKey) }));
    assert.equal(result.source, 'environment');
    assert.equal(result.masterKeyId, masterKeyId(newKey));
    assert.ok(result.previousKeyIds.includes(masterKeyId(oldKey)));
    assert.ok(result.nextSteps.some((s: string) => s.includes('Set SLIPWAY_MASTER_KEY to the new key')));
    // Not at once: a node still on the old key may wrap new rows under it meanwhile.
    assert.ok(result.nextSteps.some((s: string) => s.startsWith(`Only once slipway keys status shows no row under the old key (${masterKeyId(oldKey)})`) && s.includes('remove SLIPWAY_MASTER_KEY_PREVIOUS')), result.nextSteps.join('\n'));
    assert.ok(result.nextSteps.some((s: string) => s.startsWith(`Backups taken before this rotation open only with the retired key ${masterKeyId(oldKey)}`) && s.includes('keep a copy')), result.nextSteps.join('\n'));
    assert.deepEqual(await usageIds(server), [masterKeyId(newKey)]);
    await assertEverySecretOpens(server, [newKey], expected);
    await assertKeyOpensNothing(server, oldKey);
    await assertFreshCoreStarts(server, { SLIPWAY_MASTER_KEY: b64(newKey) });
  });

  it('the configured form re-wraps what a node still on the old key wrote since', async () => {
    // This server still wraps with the old key (step 3 of the rollout has not reached it).
    await seedOrg(server, expected, 1);
    assert.deepEqual(await usageIds(server), [masterKeyId(newKey), masterKeyId(oldKey)].sort());
    const result = await cliJson(['keys', 'rotate-master'], cliEnv(server, { SLIPWAY_MASTER_KEY: b64(newKey), SLIPWAY_MASTER_KEY_PREVIOUS: b64(oldKey) }));
    assert.equal(result.masterKeyId, masterKeyId(newKey));
    assert.equal(result.rewrapped, 1);
    assert.ok(!result.nextSteps.some((s: string) => s.includes('Set SLIPWAY_MASTER_KEY')));
    assert.deepEqual(await usageIds(server), [masterKeyId(newKey)]);
    await assertEverySecretOpens(server, [newKey], expected);
    await assertKeyOpensNothing(server, oldKey);
  });
});

describe('a node whose SLIPWAY_MASTER_KEY lacks a master key rows are wrapped under', () => {
  const oldKey = generateMasterKey();
  const newKey = generateMasterKey();
  const b64 = (k: Buffer) => k.toString('base64');
  // The reproduction's node: switched to the new key alone, while another node still wraps under the old one.
  let server: TestServer;
  let orgId: string;
  let admin: Actor;

  before(async () => {
    server = await startServer({ env: { SLIPWAY_MASTER_KEY: b64(newKey) } });
    orgId = (await server.createOrg()).id;
    admin = await server.actor(orgId, 'admin');
    // The other node (a core of its own on the same database) still wraps with the old key: the
    // organization's first secret makes its data key under it.
    const other = await openCore(loadConfig(cliEnv(server, { SLIPWAY_MASTER_KEY: b64(oldKey), SLIPWAY_MASTER_KEY_PREVIOUS: b64(newKey) })), { migrate: false, logger: createLogger('silent') });
    try {
      await other.secrets.bulkCreate(cliContext(), orgId, [{ name: 'db', values: { PASSWORD: 'hunter2-value' } }]);
    } finally {
      await other.close();
    }
    assert.deepEqual(await usageIds(server), [masterKeyId(newKey), masterKeyId(oldKey)].sort());
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
  });

  it('a running server answers what needs that key with 503 master_key_missing naming it, never key material, and logs an error naming it', async () => {
    const id = masterKeyId(oldKey);
    const before = server.logs.length;
    const reveal = await admin.http.post(`/v1/orgs/${orgId}/secrets/db/reveal`, {});
    const create = await admin.http.post(`/v1/orgs/${orgId}/secrets`, { secrets: [{ name: 'api', values: { TOKEN: 'new-value' } }] });
    for (const res of [reveal, create]) {
      assert.equal(res.status, 503, res.text);
      assert.equal(res.body.code, 'master_key_missing');
      assert.equal(res.body.type, 'https://slipway.dev/problems/master-key-missing');
      assert.equal(res.body.masterKeyId, id);
      assert.match(res.body.detail, new RegExp(`wrapped under master key ${id}, which this server is not configured with\\. An operator must configure that key: add it to SLIPWAY_MASTER_KEY_PREVIOUS and restart the server`));
      assert.equal(res.headers.get('retry-after'), '30');
      for (const secret of [b64(oldKey), b64(newKey), 'hunter2-value', 'new-value']) assert.ok(!res.text.includes(secret), secret);
    }
    // Nothing was written: the refused create made no secret.
    assert.equal((await admin.http.get(`/v1/orgs/${orgId}/secrets/api`)).status, 404);
    const logged = server.logs.slice(before).map((l) => JSON.parse(l) as { level: number | string; msg: string; err?: { message: string; code: string } });
    const errors = logged.filter((l) => l.level === 'error' || l.level === 50);
    assert.equal(errors.length, 2, server.logs.slice(before).join('\n'));
    for (const line of errors) {
      assert.equal(line.err?.code, 'master_key_missing');
      assert.match(line.err!.message, new RegExp(`master key ${id}, which is not configured`));
    }
    const raw = server.logs.slice(before).join('\n');
    assert.ok(!raw.includes(b64(oldKey)) && !raw.includes(b64(newKey)));
  });

  it('refuses to start, in one line naming the key and what to do, writing nothing; with the key as previous it starts', async () => {
    const id = masterKeyId(oldKey);
    const rows = async () => JSON.stringify(await keysRepo.usage(server.core.db));
    const before = await rows();
    const only = { SLIPWAY_MASTER_KEY: b64(newKey) };
    const refusal = `slipway: the database holds data wrapped under master key ${id}, which SLIPWAY_MASTER_KEY and SLIPWAY_MASTER_KEY_PREVIOUS do not hold: add that key to SLIPWAY_MASTER_KEY_PREVIOUS (slipway keys status shows the rows under each key; a node still on that key keeps wrapping new rows under it); nothing was written`;
    // `serve` in the background: should it start serving instead, it is stopped and the test fails.
    const serve = spawnServe(['--port', String(await freePort())], cliEnv(server, only));
    const started = serve.waitForLog((l) => l.msg === 'slipway listening', 'that it listens').then(() => true, () => false);
    if (await Promise.race([started, serve.exited.then(() => false)])) {
      serve.child.kill('SIGTERM');
      await serve.exited;
      assert.fail(`serve started without ${id}:\n${serve.output.join('\n')}`);
    }
    assert.equal((await serve.exited).code, 2, serve.output.join('\n'));
    assert.deepEqual(serve.output, [refusal]);
    for (const args of [['org', 'list'], ['migrate']]) {
      const res = await runCli(args, cliEnv(server, only));
      assert.equal(res.code, 2, `${args.join(' ')}: ${res.stderr}`);
      assert.equal(res.stderr, `${refusal}\n`);
    }
    assert.equal(await rows(), before);
    assert.equal(fs.existsSync(path.join(server.dataDir, KEY_FILE)), false);
    // `keys status` still opens, and shows the key nobody configured.
    const status = await cliJson(['keys', 'status'], cliEnv(server, only));
    assert.deepEqual(status.masterKey.usage.filter((u: any) => !u.configured).map((u: any) => u.masterKeyId), [id]);
    // The fix the line names.
    const fixed = await runCli(['org', 'list'], cliEnv(server, { ...only, SLIPWAY_MASTER_KEY_PREVIOUS: b64(oldKey) }));
    assert.equal(fixed.code, 0, fixed.stderr);
  });
});
