// The `slipway` command's own contract, run as child processes: usage errors and invalid
// configuration with exit 2 and one line, help that runs nothing, refusals and failures as JSON
// with --json, a reader that went away, and the warning that a key given as a flag is visible.
import assert from 'node:assert/strict';
import { MIGRATIONS } from '../../src/platform/db/migrations/index.js';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NO_DATABASE, tempDir, testDatabase } from '../support/harness.js';
import { CLI_ENTRY, runCli } from '../support/processes.js';

describe('slipway CLI: usage, help and errors', () => {
  let env: Record<string, string>;
  let database: Awaited<ReturnType<typeof testDatabase>>;
  let dataDir: string;

  before(async () => {
    dataDir = tempDir('slipway-cli-usage-db-');
    database = await testDatabase();
    env = { SLIPWAY_DATA_DIR: dataDir, ...(database.url ? { SLIPWAY_DATABASE_URL: database.url } : {}) };
    const first = await runCli(['migrate'], env);
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stdout, new RegExp(`^database brought up to date \\((sqlite|postgres)\\): applied ${MIGRATIONS.length} migration\\(s\\), ${MIGRATIONS[0]!.name} to ${MIGRATIONS.at(-1)!.name}\n$`));
    const again = await runCli(['migrate'], env);
    assert.match(again.stdout, /^database is up to date \((sqlite|postgres)\); no migration was needed\n$/);
    assert.deepEqual(JSON.parse((await runCli(['migrate', '--json'], env)).stdout).applied, []);
  });
  after(async () => {
    await database.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it('reports bad usage with exit 2 and one clear line, before touching anything', { skip: NO_DATABASE }, async () => {
    const cases: Array<[string[], RegExp]> = [
      [['org', 'create', '--slug', 'x'], /--name is required/],
      [['org', 'create', '--slug', 'x', '--name', 'y', 'stray'], /Unexpected argument 'stray'/],
      [['org', 'list', '--frobnicate'], /Unknown option '--frobnicate'/],
      [['service-user', 'create', '--org', 'cli-org', '--name', 'n', '--role', 'emperor'], /--role must be one of/],
      [['service-user', 'rotate-secret', '--org', 'cli-org'], /--user ID\|NAME is required/],
      [['service-user', 'explode'], /unknown service-user command "explode"/],
      [['frobnicate'], /unknown command "frobnicate"/],
      // The runner takes no --json: its refusal is a line like any other of its usage errors.
      [['runner', '--json'], /^slipway: Unknown option '--json'/],
      // A flag of one value given twice would drop one of them without a word.
      [['org', 'create', '--slug', 'a', '--slug', 'b', '--name', 'y'], /^slipway: --slug is given more than once; it takes one value: give it once$/],
      [['service', 'apply', '--file', 'a.json', '--file', 'b.json'], /^slipway: --file is given more than once/],
      [['deploy', '--service', 'a', '--service', 'b', '--environment', 'e'], /^slipway: --service is given more than once/],
      [['deployment', 'active', '--environment=staging', '--environment', 'production'], /^slipway: --environment is given more than once/],
      // What the API would refuse, the CLI refuses too, naming the flag.
      [['org', 'create', '--slug', 'Has Space/x', '--name', 'y'], /^slipway: --slug must match /],
      [['org', 'create', '--slug', 'ok-slug', '--name', 'x'.repeat(300)], /^slipway: --name /],
      [['service-user', 'create', '--org', 'cli-org', '--name', 'Bad Name!', '--role', 'viewer'], /^slipway: --name must match /],
      [['service-user', 'create', '--org', 'cli-org', '--name', 'ok', '--role', 'viewer', '--description', 'd'.repeat(2000)], /^slipway: --description /],
      // A data directory without a database is a typo, not a new instance.
      [['org', 'list'], /^slipway: there is no Slipway database at .*slipway\.db: check --data-dir/],
      [['keys', 'status'], /^slipway: there is no Slipway database at /],
    ];
    const empty = tempDir('slipway-cli-usage-');
    try {
      for (const [args, message] of cases) {
        const result = await runCli(args, { SLIPWAY_DATA_DIR: empty });
        assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`);
        assert.equal(result.stdout, '');
        const lines = result.stderr.trim().split('\n');
        assert.equal(lines.length, 1, `${args.join(' ')}: ${result.stderr}`);
        assert.match(lines[0]!, message);
      }
      assert.deepEqual(fs.readdirSync(empty), [], 'a usage error created files');
    } finally {
      fs.rmSync(empty, { recursive: true, force: true });
    }
  });

  it('refuses invalid configuration with exit 2 and one line naming the variable', async () => {
    const result = await runCli(['org', 'list'], { ...env, SLIPWAY_PORT: 'abc' });
    assert.equal(result.code, 2);
    assert.match(result.stderr, /^slipway: SLIPWAY_PORT must be a whole number from 0 to 65535, got "abc"\n$/);
  });

  it('warns on stderr of each SLIPWAY_* variable no setting reads, naming the one meant, and goes on', async () => {
    const misspelt = { ...env, SLIPWAY_DATABSE_URL: 'postgres://slip:x@db.invalid/slipway', SLIPWAY_FEATURE: 'on', SLIPWAY_TEST_ANYTHING: '1' };
    const plain = await runCli(['org', 'list'], misspelt);
    assert.equal(plain.code, 0, plain.stderr);
    assert.equal(plain.stderr, [
      'slipway: warning: SLIPWAY_DATABSE_URL is not a Slipway setting and is ignored; did you mean SLIPWAY_DATABASE_URL?',
      'slipway: warning: SLIPWAY_FEATURE is not a Slipway setting and is ignored',
      '',
    ].join('\n'));
    const json = await runCli(['org', 'list', '--json'], misspelt);
    assert.equal(json.code, 0, json.stderr);
    assert.deepEqual(json.stderr.trim().split('\n').map((line) => JSON.parse(line)), [
      { level: 'warn', msg: 'SLIPWAY_DATABSE_URL is not a Slipway setting and is ignored; did you mean SLIPWAY_DATABASE_URL?' },
      { level: 'warn', msg: 'SLIPWAY_FEATURE is not a Slipway setting and is ignored' },
    ]);
    // Before a refusal too: the setting it names as missing may be the misspelt one.
    const refused = await runCli(['org', 'list'], { ...misspelt, SLIPWAY_PORT: 'abc' });
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /^slipway: warning: SLIPWAY_DATABSE_URL is not .*\n.*\nslipway: SLIPWAY_PORT must be a whole number/);
    // serve too, whose warnings otherwise go to its log, which a refused configuration never opens.
    const serveRefused = await runCli(['serve'], { ...misspelt, SLIPWAY_PORT: 'abc' });
    assert.equal(serveRefused.code, 2);
    assert.match(serveRefused.stderr, /^slipway: warning: SLIPWAY_DATABSE_URL is not .*\n.*\nslipway: SLIPWAY_PORT must be a whole number/);
    // Every known one, the runner's included, says nothing.
    const known = await runCli(['org', 'list'], { ...env, SLIPWAY_LOG_LEVEL: 'warn', SLIPWAY_ORG: 'default', SLIPWAY_RUNNER_CONCURRENCY: '2' });
    assert.equal(known.stderr, '');
  });

  it('names the database URL, without its password, and what to check when PostgreSQL cannot be reached', async () => {
    const sentinel = 'Sentinel-Pw-4711';
    const unreachable = { SLIPWAY_DATA_DIR: dataDir, SLIPWAY_DATABASE_URL: `postgres://slip:${sentinel}@127.0.0.1:1/slipway` };
    const expected = 'cannot reach the database SLIPWAY_DATABASE_URL (--database-url) postgres://slip:***@127.0.0.1:1/slipway: connect ECONNREFUSED 127.0.0.1:1; check that PostgreSQL runs there and accepts connections';
    const serve = ['serve', '--port', '0', '--base-url', 'http://127.0.0.1:1', '--auth-url', 'http://127.0.0.1:1'];
    for (const command of [serve, ['migrate'], ['org', 'list'], ['service-user', 'list', '--org', 'default'], ['keys', 'status']]) {
      const result = await runCli(command, unreachable);
      assert.equal(result.code, 1, `${command.join(' ')}: ${result.stderr}`);
      assert.ok(result.stderr.endsWith(`slipway: ${expected}\n`), `${command.join(' ')}: ${result.stderr}`);
      const json = await runCli([...command, '--json'], unreachable);
      assert.equal(json.code, 1);
      assert.deepEqual(JSON.parse(json.stderr.trim().split('\n').pop()!), { error: { code: 'failed', message: expected } });
      for (const output of [result.stdout, result.stderr, json.stdout, json.stderr]) assert.equal(output.includes(sentinel), false, output);
    }
    if (database.url) {
      // Reached, but no such database there: what to check is another thing.
      const url = new URL(database.url);
      url.password = sentinel;
      url.pathname = '/no_such_database';
      const result = await runCli(['org', 'list'], { SLIPWAY_DATA_DIR: dataDir, SLIPWAY_DATABASE_URL: url.toString() });
      assert.equal(result.code, 1, result.stderr);
      assert.match(result.stderr, /^slipway: cannot connect to the database SLIPWAY_DATABASE_URL \(--database-url\) postgres:\/\/[^@]+:\*\*\*@[^ ]+\/no_such_database: database "no_such_database" does not exist; check the database name, or create that database\n$/);
      assert.equal(result.stderr.includes(sentinel), false);
    }
  });

  it('warns of a master key file, or a --new-key-file, that other users may read, naming its mode and chmod 600', { skip: process.platform === 'win32' }, async () => {
    const file = path.join(dataDir, 'master.key');
    fs.chmodSync(file, 0o644);
    try {
      const result = await runCli(['keys', 'status', '--json'], env);
      assert.equal(result.code, 0, result.stderr);
      const warnings = result.stderr.trim().split('\n').map((line) => JSON.parse(line) as { level?: string; msg?: string; file?: string }).filter((l) => l.level === 'warn');
      assert.deepEqual(warnings.map((l) => [l.file, l.msg]), [[file, `the key file ${file} has mode 0644, which lets other users read or write it: chmod 600 ${file}`]]);
      // Any command that opens the key file.
      assert.match((await runCli(['org', 'list'], env)).stderr, /has mode 0644, which lets other users read or write it: chmod 600/);
    } finally {
      fs.chmodSync(file, 0o600);
    }
    assert.equal((await runCli(['keys', 'status'], env)).stderr.includes('chmod 600'), false);

    // The new key of a rotation, read before the database is opened.
    const newKey = path.join(tempDir('slipway-cli-new-key-'), 'new.key');
    fs.writeFileSync(newKey, `${Buffer.alloc(32, 3).toString('base64')}\n`);
    fs.chmodSync(newKey, 0o640);
    const emptyDir = tempDir('slipway-cli-no-db-');
    try {
      // No database there: refused after the key file is read, nothing rotated.
      const result = await runCli(['keys', 'rotate-master', '--new-key-file', newKey], { SLIPWAY_DATA_DIR: emptyDir });
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, new RegExp(`^slipway: warning: --new-key-file: the key file ${newKey} has mode 0640, which lets other users read or write it: chmod 600 ${newKey}\n`));
    } finally {
      fs.rmSync(path.dirname(newKey), { recursive: true, force: true });
      fs.rmSync(emptyDir, { recursive: true, force: true });
    }
  });

  it('prints help for --help on every command rather than running it', { skip: NO_DATABASE }, async () => {
    const empty = tempDir('slipway-cli-help-');
    try {
      // --help wins, after a flag the command does not know too.
      for (const args of [['serve', '--help'], ['migrate', '-h'], ['org', '--help'], ['service-user', 'create', '--help'], ['keys', '--help'], ['runner', '--help'],
        ['serve', '--no-such-flag', '--help'], ['migrate', '--no-such-flag', '-h'], ['runner', '--no-such-flag', '--help'], ['keys', 'status', '--no-such-flag', '--help'], ['org', 'help'], ['service-user', 'help'], ['runner', 'help'], ['backup', 'help'], ['restore', 'help'], ['restore', '--from', 'x.db', '--help'],
        ['secret', '--help'], ['secret', 'help'], ['secret', 'set', '--no-such-flag', '--help'], ['deploy', 'help'], ['deployment', 'help'], ['deployment', 'rollback', '--no-such-flag', '--help'], ['version', '--help'], ['version', 'help'], ['events', 'help'], ['events', '--follow', '--help'],
        ['secret', '--no-such-flag', '--help'], ['deployment', '--no-such-flag', '-h'], ['environment', '--no-such-flag', '--help'], ['service', '--no-such-flag', '--help']]) {
        const result = await runCli(args, { SLIPWAY_DATA_DIR: empty, SLIPWAY_PORT: '1' });
        assert.equal(result.code, 0, `${args.join(' ')}: ${result.stderr}`);
        assert.match(result.stdout, /usage/i, args.join(' '));
      }
      // A command without its subcommand is a usage error: one line on stderr, exit 2.
      for (const args of [[], ['keys'], ['org'], ['service-user'], ['secret'], ['deployment']]) {
        const result = await runCli(args, { SLIPWAY_DATA_DIR: empty });
        assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`);
        assert.equal(result.stdout, '', args.join(' '));
        assert.match(result.stderr, /^slipway: an? [a-z-]*\s?command is needed.*\n$/, args.join(' '));
      }
      assert.deepEqual(fs.readdirSync(empty), [], 'help started something');
    } finally {
      fs.rmSync(empty, { recursive: true, force: true });
    }
  });

  it('prints refusals as JSON with --json', async () => {
    const missing = await runCli(['service-user', 'list', '--org', 'no-such-org', '--json'], env);
    assert.equal(missing.code, 1);
    assert.equal(missing.stdout, '');
    const { error } = JSON.parse(missing.stderr);
    assert.deepEqual([error.code, error.status], ['organization_not_found', 404]);
    const usage = await runCli(['org', 'create', '--json'], env);
    assert.equal(usage.code, 2);
    assert.deepEqual(JSON.parse(usage.stderr), { error: { code: 'usage', message: '--slug is required' } });
  });

  it('says its version, and the Node.js it runs on', { skip: NO_DATABASE }, async () => {
    const { version } = JSON.parse(fs.readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
    for (const word of ['--version', '-v', 'version']) {
      const result = await runCli([word], {});
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stdout, `slipway ${version} (Node.js ${process.versions.node})\n`);
    }
    assert.deepEqual(JSON.parse((await runCli(['version', '--json'], {})).stdout), { version, node: process.versions.node });
  });

  it('loads no database code and no request validator for what needs neither: help, the version, and the commands that call the API', { skip: NO_DATABASE }, async () => {
    // Every module loaded, as the module loader sees it: a database driver, Slipway's database layer
    // or the validator of what the server is sent, in a command that only talks HTTP, is start-up
    // time each call pays for nothing.
    const hooks = new URL('../support/module-log-hooks.js', import.meta.url).href;
    // Encoded: NODE_OPTIONS splits at spaces.
    const register = `data:text/javascript,${encodeURIComponent(`import { register } from 'node:module'; register(${JSON.stringify(hooks)});`)}`;
    const dir = tempDir('slipway-cli-modules-');
    try {
      for (const args of [['--version'], ['serve', '--help'], ['secret', '--help'], ['runner', '--help'],
        ['deployment', 'list', '--server', 'http://127.0.0.1:1', '--org', 'x'], ['events', '--server', 'http://127.0.0.1:1', '--org', 'x']]) {
        const log = path.join(dir, `${args.join('_').replace(/[^a-z]/g, '')}.log`);
        const result = await runCli(args, { NODE_OPTIONS: `--import=${register}`, SLIPWAY_TEST_MODULE_LOG: log, SLIPWAY_CLIENT_ID: 'x', SLIPWAY_CLIENT_SECRET: 'x' });
        assert.ok(result.code !== null, `${args.join(' ')}: ${result.stderr}`);
        const loaded = fs.readFileSync(log, 'utf8').split('\n');
        assert.ok(loaded.some((url) => url.endsWith('/src/cli/main.js')), `${args.join(' ')}: the log holds what it loaded`);
        const needless = loaded.filter((url) => /\/node_modules\/(kysely|pg|better-sqlite3|ajv)\/|\/src\/platform\/db\/database\.js$/.test(url));
        assert.deepEqual(needless, [], args.join(' '));
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a data directory that cannot be made (a link to nowhere, as an unmounted volume) with exit 2 naming it', { skip: NO_DATABASE }, async () => {
    const dir = tempDir('slipway-dangling-');
    fs.symlinkSync(path.join(dir, 'not-mounted'), path.join(dir, 'volume'));
    try {
      const result = await runCli(['migrate', '--data-dir', path.join(dir, 'volume', 'data')], {});
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, /^slipway: cannot open the SQLite database .*\(ENOENT\): .* cannot be made .*check --data-dir \(SLIPWAY_DATA_DIR\)/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('stops quietly when its reader has gone (a pipe into head), without a stack trace', async () => {
    const child = spawn(process.execPath, [CLI_ENTRY, 'org', 'list'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    // The reader goes before the command writes a byte: its first write meets a closed pipe.
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString('utf8'); });
    const [code] = await once(child, 'close');
    assert.equal(stderr, '');
    assert.equal(code, 0);
  });

  it('lists every command in its help', { skip: NO_DATABASE }, async () => {
    const help = await runCli(['--help'], {});
    assert.equal(help.code, 0);
    assert.match(help.stdout, /slipway keys status\|rotate-master\|rotate-signing\|revoke-signing\b/);
    assert.match(help.stdout, /--master-key .*show the key/s);
    for (const command of ['serve', 'migrate', 'org create', 'org list', 'service-user create', 'service-user list', 'service-user rotate-secret', 'service-user disable', 'backup', 'restore']) {
      assert.match(help.stdout, new RegExp(`slipway ${command}\\b`), command);
    }
    // And each has its row in the README's table of commands.
    const readme = fs.readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
    const commands = new Set([...help.stdout.matchAll(/^ {2}slipway ([a-z-]+)/gm)].map((m) => m[1]!));
    assert.ok(commands.has('restore'), help.stdout);
    for (const command of commands) assert.match(readme, new RegExp(`^\\| \`slipway ${command}[ \`]`, 'm'), `README's table of commands has no row for ${command}`);
  });

  it('says which commands are API clients, which take no server setting such as --data-dir (help and README)', { skip: NO_DATABASE }, async () => {
    const readme = fs.readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
    const sentence = /^Environment variables, each also a flag of every command but (.*)$/m.exec(readme)?.[1] ?? '';
    const help = (await runCli(['--help'], {})).stdout;
    for (const [command, ...sub] of [['runner'], ['deploy'], ['deployment', 'list'], ['environment', 'show'], ['service', 'list'], ['secret', 'list'], ['events']]) {
      const refused = await runCli([command!, ...sub, '--data-dir', dataDir], {});
      assert.equal(refused.code, 2, `${command}: ${refused.stderr}`);
      assert.match(refused.stderr, /Unknown option '--data-dir'/, command);
      assert.ok(sentence.includes(`\`${command}\``), `README Configuration names ${command}: ${sentence}`);
      assert.match(help, new RegExp(`but the API clients[^.]*\\b${command}\\b`), `slipway --help names ${command}`);
    }
  });

  it('warns on stderr that --master-key shows the key in ps', async () => {
    const key = Buffer.alloc(32, 7).toString('base64');
    const empty = tempDir('slipway-cli-master-key-');
    try {
      const result = await runCli(['keys', 'status', '--master-key', key], { SLIPWAY_DATA_DIR: empty });
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, /^slipway: warning: --master-key shows the key to anyone who can list processes \(ps\): prefer SLIPWAY_MASTER_KEY or the key file\n/);
      const json = await runCli(['keys', 'status', '--master-key', key, '--json'], { SLIPWAY_DATA_DIR: empty });
      const lines = json.stderr.trim().split('\n').map((line) => JSON.parse(line) as { level?: string; msg?: string; error?: unknown });
      assert.equal(lines[0]!.level, 'warn');
      assert.ok(lines[1]!.error, json.stderr);
      assert.equal(result.stderr.includes(key) || json.stderr.includes(key), false);
    } finally {
      fs.rmSync(empty, { recursive: true, force: true });
    }
  });

  it('with --json, prints every failure as JSON, not only refusals, with exit 1', async () => {
    const dir = tempDir('slipway-cli-failures-');
    const db = await testDatabase();
    const own = { SLIPWAY_DATA_DIR: dir, ...(db.url ? { SLIPWAY_DATABASE_URL: db.url } : {}) };
    try {
      assert.equal((await runCli(['migrate'], own)).code, 0);
      // The key that wrapped the data is gone; another one cannot unwrap it. Most commands refuse
      // that at start (exit 2); `keys status` opens and names the key missing; `rotate-master`
      // refuses, with exit 1, as it cannot re-wrap what it cannot open.
      fs.rmSync(path.join(dir, 'master.key'));
      const other = { ...own, SLIPWAY_MASTER_KEY: Buffer.alloc(32, 9).toString('base64') };
      const refused = await runCli(['org', 'list', '--json'], other);
      assert.equal(refused.code, 2, refused.stderr);
      assert.equal(JSON.parse(refused.stderr).error.code, 'usage');
      const status = await runCli(['keys', 'status', '--json'], other);
      assert.equal(status.code, 0, status.stderr);
      assert.equal(JSON.parse(status.stdout).masterKey.usage.filter((u: { configured: boolean }) => !u.configured).length, 1);
      const plain = await runCli(['keys', 'rotate-master'], other);
      assert.equal(plain.code, 1);
      assert.match(plain.stderr, /^slipway: Rows are wrapped under master key mk_\w+, which is not configured/);
      const unwrap = await runCli(['keys', 'rotate-master', '--json'], other);
      assert.equal(unwrap.code, 1);
      assert.equal(unwrap.stdout, '');
      assert.deepEqual(JSON.parse(unwrap.stderr), { error: { code: 'master_key_unavailable', status: 409, message: plain.stderr.replace(/^slipway: /, '').trim() } });
      // A database out of reach.
      const unreachable = await runCli(['org', 'list', '--json'], { SLIPWAY_DATA_DIR: dir, SLIPWAY_DATABASE_URL: 'postgres://slipway:x@127.0.0.1:1/slipway', SLIPWAY_MASTER_KEY: other.SLIPWAY_MASTER_KEY });
      assert.equal(unreachable.code, 1, unreachable.stderr);
      const { error } = JSON.parse(unreachable.stderr.trim().split('\n').pop()!) as { error: { code: string; message: string } };
      assert.equal(error.code, 'failed');
      assert.match(error.message, /^cannot reach the database SLIPWAY_DATABASE_URL \(--database-url\) postgres:\/\/slipway:\*\*\*@127\.0\.0\.1:1\/slipway: connect ECONNREFUSED/);
    } finally {
      await db.drop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
