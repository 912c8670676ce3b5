// `slipway service` and `slipway environment list|apply|delete` as real child processes against a
// real server, as service users: a JSON file kept in a repository is applied (created, changed to
// match, or left alone, saying which and what changed), and services and environments are listed,
// shown and deleted, each within its role.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createSecret, eventsOf, unique } from '../support/deployments.js';
import type { Actor } from '../support/harness.js';
import { lossyProxy } from '../support/lossy-proxy.js';
import { startWithOrg, type OrgFixture } from '../support/org-fixture.js';
import { runCli, type CliResult, clientVariables } from '../support/processes.js';

describe('slipway service and environment apply', () => {
  let f: OrgFixture;
  let developer: Actor;
  let viewer: Actor;

  /** The command as `who`, a file given on standard input (`--file -`) when `input` is. */
  const as = (who: Actor, args: string[], input?: unknown): Promise<CliResult> =>
    runCli([...args, ...(input !== undefined ? ['--file', '-'] : [])], clientVariables(f.server.url, f.orgId, who), input === undefined ? undefined : typeof input === 'string' ? input : JSON.stringify(input));
  const jsonOf = (result: CliResult) => {
    assert.equal(result.code, 0, result.stderr);
    return JSON.parse(result.stdout);
  };

  before(async () => {
    f = await startWithOrg();
    developer = await f.server.actor(f.orgId, 'developer');
    viewer = await f.server.actor(f.orgId, 'viewer');
  });
  after(async () => { await f.close(); });

  it('applies a service file: created, then unchanged, then updated with what changed; each change an event, none for unchanged', async () => {
    const db = await createSecret(developer.http, f.orgId, { URL: 'postgres://db' });
    const name = unique('web');
    const file = {
      name, description: 'the front',
      spec: { command: ['node', 'server.js'], port: 3000, healthCheck: { path: '/health' }, variables: { LOG_LEVEL: 'info', REGION: 'eu' }, secrets: [{ secret: db, key: 'URL', as: 'DATABASE_URL' }] },
    };

    const created = await as(developer, ['service', 'apply'], file);
    assert.equal(created.code, 0, created.stderr);
    assert.equal(created.stdout, `service ${name}: created, version 1\n`);
    const unchanged = await as(developer, ['service', 'apply'], file);
    assert.equal(unchanged.stdout, `service ${name}: unchanged, still version 1\n`);

    // The file is the whole service: a description left out is emptied.
    const { description: _description, ...withoutDescription } = file;
    const changed = { ...withoutDescription, spec: { ...file.spec, command: ['node', 'server.js', '--fast'], variables: { LOG_LEVEL: 'debug', DEBUG: '1' } } };
    const updated = await as(developer, ['service', 'apply'], changed);
    assert.equal(updated.code, 0, updated.stderr);
    assert.equal(updated.stdout, `service ${name}: updated, version 2 (description changed, command changed, variables.DEBUG added, variables.LOG_LEVEL changed, variables.REGION removed)\n`);
    const now = (await developer.http.get(`/v1/orgs/${f.orgId}/services/${name}`)).body;
    assert.deepEqual([now.version, now.description, now.spec.command, now.spec.variables, now.spec.healthCheck], [2, '', changed.spec.command, changed.spec.variables, { path: '/health', timeoutSeconds: 30 }]);

    const asJson = jsonOf(await as(developer, ['service', 'apply', '--json'], changed));
    assert.deepEqual([asJson.result, asJson.changes, asJson.service.version], ['unchanged', [], 2]);
    const again = jsonOf(await as(developer, ['service', 'apply', '--json'], file));
    assert.deepEqual([again.result, again.service.version, again.changes.map((c: { field: string; change: string }) => `${c.field} ${c.change}`)],
      ['updated', 3, ['description changed', 'command changed', 'variables.DEBUG removed', 'variables.LOG_LEVEL changed', 'variables.REGION added']]);

    assert.deepEqual((await eventsOf(f.server, f.orgId, now.id)).map((e) => e.type), ['service.created', 'service.updated', 'service.updated']);

    // What show --json prints applies as it is, to another name as to its own.
    const shown = (await as(developer, ['service', 'show', '--service', name, '--json'])).stdout;
    assert.equal((await as(developer, ['service', 'apply'], shown)).stdout, `service ${name}: unchanged, still version 3\n`);
    const copy = unique('copy');
    assert.equal((await as(developer, ['service', 'apply'], { ...JSON.parse(shown), name: copy })).stdout, `service ${copy}: created, version 1\n`);
  });

  it('says updated when its change was made, even when the answer was lost and a retry found it done; variables in another order are no change', async () => {
    const name = unique('lost');
    assert.equal((await as(developer, ['service', 'apply'], { name, spec: { command: ['v1'], variables: { A: '1', B: '2' } } })).code, 0);
    // The first PATCH reaches the server, its answer never comes back: the retry is a 412, read again, nothing left to change.
    let patches = 0;
    const proxy = await lossyProxy(f.server.url, (req) => req.method === 'PATCH' && patches++ === 0);
    try {
      const lost = await runCli(['service', 'apply', '--file', '-'], clientVariables(f.server.url, f.orgId, developer, proxy.url), JSON.stringify({ name, spec: { command: ['v2'], variables: { A: '1', B: '2' } } }));
      assert.equal(lost.code, 0, lost.stderr);
      assert.equal(lost.stdout, `service ${name}: updated, version 2 (command changed)\n`);
      assert.ok(proxy.seen.filter((r) => r.method === 'PATCH').length >= 2, 'the PATCH was sent again');
    } finally {
      await proxy.close();
    }
    // The same variables in another order: the same service, no version, no event.
    const reordered = await as(developer, ['service', 'apply'], { name, spec: { command: ['v2'], variables: { B: '2', A: '1' } } });
    assert.equal(reordered.stdout, `service ${name}: unchanged, still version 2\n`);
    const now = (await developer.http.get(`/v1/orgs/${f.orgId}/services/${name}`)).body;
    assert.equal(now.version, 2);
    assert.deepEqual((await eventsOf(f.server, f.orgId, now.id)).map((e) => e.type), ['service.created', 'service.updated']);
  });

  it('says so when it replaced a change another client made between its read and its write', async () => {
    const name = unique('raced');
    assert.equal((await as(developer, ['service', 'apply'], { name, spec: { command: ['v1'], variables: { A: '1' } } })).code, 0);
    // Just before the apply's PATCH, someone adds a variable: that PATCH is a 412, the apply reads
    // again and writes the file's service, which takes the variable out again.
    let raced = false;
    const proxy = await lossyProxy(f.server.url, () => false, async (req) => {
      if (req.method !== 'PATCH' || raced) return;
      raced = true;
      const theirs = await developer.http.patch(`/v1/orgs/${f.orgId}/services/${name}`, { spec: { command: ['v1'], variables: { A: '1', FEATURE_FLAG: 'on' } } });
      assert.equal(theirs.status, 200);
    });
    try {
      const applied = await runCli(['service', 'apply', '--file', '-'], clientVariables(f.server.url, f.orgId, developer, proxy.url), JSON.stringify({ name, spec: { command: ['v1'], variables: { A: '2' } } }));
      assert.equal(applied.code, 0, applied.stderr);
      assert.equal(applied.stdout, `service ${name}: updated, version 3 (variables.A changed, variables.FEATURE_FLAG removed); replaced what another client changed meanwhile: variables.FEATURE_FLAG\n`);
      assert.equal(proxy.seen.filter((r) => r.method === 'PATCH').length, 2, 'the first PATCH was refused, 412');
    } finally {
      await proxy.close();
    }
  });

  it('replaces, and names, a change another client made to an environment between the apply\'s read and its write', async () => {
    const name = unique('raced-env');
    assert.equal((await as(f.admin, ['environment', 'apply'], { name, variables: { LOG_LEVEL: 'info' } })).code, 0);
    let raced = false;
    const proxy = await lossyProxy(f.server.url, () => false, async (req) => {
      if (req.method !== 'PATCH' || raced) return;
      raced = true;
      assert.equal((await f.admin.http.patch(`/v1/orgs/${f.orgId}/environments/${name}`, { variables: { LOG_LEVEL: 'info', HOTFIX: '1' } })).status, 200);
    });
    try {
      const applied = await runCli(['environment', 'apply', '--file', '-'], clientVariables(f.server.url, f.orgId, f.admin, proxy.url), JSON.stringify({ name, variables: { LOG_LEVEL: 'debug' } }));
      assert.equal(applied.code, 0, applied.stderr);
      assert.equal(applied.stdout, `environment ${name}: updated (variables.LOG_LEVEL changed, variables.HOTFIX removed); replaced what another client changed meanwhile: variables.HOTFIX\n`);
      assert.equal(proxy.seen.filter((r) => r.method === 'PATCH').length, 2, 'the first PATCH was refused, 412');
    } finally {
      await proxy.close();
    }
    // A lock is no change of the file's: the apply that follows one is "unchanged".
    assert.equal((await as(f.admin, ['environment', 'lock', '--environment', name, '--reason', 'incident'])).code, 0);
    assert.equal((await as(f.admin, ['environment', 'apply'], { name, variables: { LOG_LEVEL: 'debug' } })).stdout, `environment ${name}: unchanged\n`);
  });

  it('lists and shows services as a viewer, printable; deletes as an admin', async () => {
    const name = unique('api');
    assert.equal((await as(developer, ['service', 'apply'], { name, description: 'api \u001b[2Jgone', spec: { image: 'registry.example/api:1', variables: { A: '1' } } })).code, 0);
    const listed = await as(viewer, ['service', 'list']);
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(listed.stdout, /^NAME +VERSION +RUNS +UPDATED$/m);
    assert.match(listed.stdout, new RegExp(`^${name} +1 +registry\\.example/api:1 +\\S+$`, 'm'));
    assert.ok(jsonOf(await as(viewer, ['service', 'list', '--json'])).services.some((s: { name: string }) => s.name === name));

    const shown = await as(viewer, ['service', 'show', '--service', name]);
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, /^description +api \\x1b\[2Jgone$/m);
    assert.match(shown.stdout, /^image +registry\.example\/api:1$/m);
    assert.match(shown.stdout, /^health +none \(running is healthy\)$/m);
    assert.ok(!shown.stdout.includes('\u001b'));

    const byViewer = await as(viewer, ['service', 'apply', '--json'], { name, spec: { image: 'x' } });
    assert.equal(byViewer.code, 1);
    assert.equal(JSON.parse(byViewer.stderr).error.status, 403);
    const byDeveloper = await as(developer, ['service', 'delete', '--service', name, '--json']);
    assert.equal(byDeveloper.code, 1);
    assert.equal(JSON.parse(byDeveloper.stderr).error.status, 403);
    const deleted = await as(f.admin, ['service', 'delete', '--service', name]);
    assert.equal(deleted.code, 0, deleted.stderr);
    assert.equal(deleted.stdout, `service ${name}: deleted, with its finished deployments\n`);
    const gone = await as(viewer, ['service', 'show', '--service', name, '--json']);
    assert.equal(gone.code, 1);
    assert.equal(JSON.parse(gone.stderr).error.code, 'service_not_found');
    // Deleting what is gone: refused, unless a pipeline only wants it gone.
    const again = await as(f.admin, ['service', 'delete', '--service', name, '--json']);
    assert.equal(again.code, 1);
    assert.equal(JSON.parse(again.stderr).error.code, 'service_not_found');
    const ignored = await as(f.admin, ['service', 'delete', '--service', name, '--ignore-not-found']);
    assert.equal(ignored.code, 0, ignored.stderr);
    assert.equal(ignored.stdout, `service ${name}: not found; nothing to delete\n`);
    assert.deepEqual(jsonOf(await as(f.admin, ['service', 'delete', '--service', name, '--ignore-not-found', '--json'])), { service: name, deleted: false });
    // Not a way round a refusal that is not "not found".
    const byDeveloperIgnoring = await as(developer, ['service', 'delete', '--service', name, '--ignore-not-found', '--json']);
    assert.equal(byDeveloperIgnoring.code, 1);
    assert.equal(JSON.parse(byDeveloperIgnoring.stderr).error.status, 403);
  });

  it('refuses a file it cannot read, or one the server refuses, and nothing is written', async () => {
    const name = unique('bad');
    for (const [input, message] of [
      [`{"name": "${name}", "spec": `, /--file standard input is not valid JSON \(it ends before the value is complete\); nothing was sent/],
      [`{"name": "${name}",\n "spec": {"command": ['x']}}`, /--file standard input is not valid JSON \(line 2, column 23\); nothing was sent/],
      ['[1]', /must hold one JSON object/],
      // Only one of the two would count: a name twice in one object is refused, "name" included.
      [`{"name": "x", "name": "${name}", "spec": {"command": ["x"]}}`, /--file standard input: The file has the member \/name twice in one object.*Nothing was sent\./],
      [`{"name": "${name}", "spec": {"command": ["x"], "variables": {"A": "1", "A": "2"}}}`, /the member \/spec\/variables\/A twice/],
      [`{"name": "\\ud800", "spec": {"command": ["x"]}}`, /--file standard input: A string in the file holds an unpaired surrogate.*Nothing was sent\./i],
      [{ spec: { command: ['x'] } }, /needs a "name"/],
      [{ name, spec: [] }, /needs a "spec" object: an apply gives the whole service/],
    ] as const) {
      const refused = await as(developer, ['service', 'apply'], input);
      assert.equal(refused.code, 2, refused.stderr);
      assert.match(refused.stderr, message);
    }
    // A byte order mark, as some editors write, is no part of the JSON.
    const withMark = await as(developer, ['service', 'apply', '--dry-run'], `\uFEFF{"name": "${name}", "spec": {"command": ["x"]}}`);
    assert.equal(withMark.code, 0, withMark.stderr);
    assert.match(withMark.stdout, /would be created/);
    const missingFile = await as(developer, ['service', 'apply', '--file', 'no-such-file.json']);
    assert.equal(missingFile.code, 2);
    assert.match(missingFile.stderr, /--file no-such-file\.json: cannot read it \(ENOENT\)/);
    const noFile = await as(developer, ['service', 'apply']);
    assert.equal(noFile.code, 2);
    assert.match(noFile.stderr, /--file is required/);
    const emptyName = await as(developer, ['service', 'show', '--service', '']);
    assert.equal(emptyName.code, 2);
    assert.equal(emptyName.stderr, 'slipway: --service is empty (an unset variable?): give the service, by name or id\n');

    const unknownField = await as(developer, ['service', 'apply', '--json'], { name, spec: { command: ['x'], prot: 1 } });
    assert.equal(unknownField.code, 1);
    assert.equal(JSON.parse(unknownField.stderr).error.status, 400);
    // Said in words, every field it points at is a line of its own.
    const twoFields = await as(developer, ['service', 'apply'], { name, spec: { command: ['x'], prot: 1, helth: {} } });
    assert.equal(twoFields.code, 1);
    assert.equal(twoFields.stderr, 'slipway: The request is not valid: /spec/prot is not a known field (and 1 more; see errors).\n  /spec/prot: is not a known field\n  /spec/helth: is not a known field\n');
    const unknownSecret = await as(developer, ['service', 'apply', '--json'], { name, spec: { command: ['x'], secrets: [{ secret: 'no-such-secret' }] } });
    assert.equal(unknownSecret.code, 1);
    const error = JSON.parse(unknownSecret.stderr).error;
    assert.deepEqual([error.status, error.code, error.missing], [422, 'unknown_secrets', ['no-such-secret']]);
    assert.equal((await developer.http.get(`/v1/orgs/${f.orgId}/services/${name}`)).status, 404);
  });

  it('applies of one file racing one another create it once, and each ends in a state one of them describes', async () => {
    const name = unique('race');
    const files = Array.from({ length: 4 }, (_, i) => ({ name, spec: { command: ['node', `v${i}.js`] } }));
    const results = await Promise.all(files.map((file) => as(developer, ['service', 'apply', '--json'], file)));
    const answers = results.map(jsonOf);
    assert.equal(answers.filter((a) => a.result === 'created').length, 1, JSON.stringify(answers.map((a) => a.result)));
    const now = (await developer.http.get(`/v1/orgs/${f.orgId}/services/${name}`)).body;
    assert.ok(files.some((file) => file.spec.command[1] === now.spec.command[1]));
    assert.equal(now.version, 1 + answers.filter((a) => a.result === 'updated').length);
  });

  it('--dry-run says what an apply would do and changes nothing: no version, no event', async () => {
    const name = unique('dry');
    const file = { name, spec: { command: ['node', 'a.js'], variables: { MODE: 'a' } } };
    const wouldCreate = await as(developer, ['service', 'apply', '--dry-run'], file);
    assert.equal(wouldCreate.code, 0, wouldCreate.stderr);
    assert.equal(wouldCreate.stdout, `service ${name}: would be created as version 1; a dry run: nothing was changed\n`);
    assert.equal((await developer.http.get(`/v1/orgs/${f.orgId}/services/${name}`)).status, 404);

    const made = jsonOf(await as(developer, ['service', 'apply', '--json'], file)).service;
    const changed = { ...file, spec: { command: ['node', 'b.js'], variables: { MODE: 'b', DEBUG: '1' } } };
    const wouldUpdate = await as(developer, ['service', 'apply', '--dry-run'], changed);
    assert.equal(wouldUpdate.stdout, `service ${name}: would be updated to version 2 (command changed, variables.DEBUG added, variables.MODE changed); a dry run: nothing was changed\n`);
    const asJson = jsonOf(await as(developer, ['service', 'apply', '--dry-run', '--json'], changed));
    assert.deepEqual([asJson.result, asJson.dryRun, asJson.service.version, asJson.changes.length], ['updated', true, 2, 3]);
    assert.equal((await as(developer, ['service', 'apply', '--dry-run'], file)).stdout, `service ${name}: unchanged, still version 1; a dry run: nothing was changed\n`);
    const now = (await developer.http.get(`/v1/orgs/${f.orgId}/services/${name}`)).body;
    assert.deepEqual([now.version, now.spec.command], [1, ['node', 'a.js']]);
    assert.deepEqual((await eventsOf(f.server, f.orgId, made.id)).map((e) => e.type), ['service.created']);

    // What the server would refuse, a dry run is refused too: exit 1 with its problem.
    const unknown = await as(developer, ['service', 'apply', '--dry-run'], { name, spec: { command: ['x'], secrets: [{ secret: 'nowhere' }] } });
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /nowhere/);
    const byViewer = await as(viewer, ['service', 'apply', '--dry-run', '--json'], changed);
    assert.equal(JSON.parse(byViewer.stderr).error.status, 403);

    const env = unique('env');
    const wouldMake = await as(f.admin, ['environment', 'apply', '--dry-run'], { name: env, protected: true });
    assert.equal(wouldMake.stdout, `environment ${env}: would be created; a dry run: nothing was changed\n`);
    assert.equal((await developer.http.get(`/v1/orgs/${f.orgId}/environments/${env}`)).status, 404);
    assert.equal((await as(f.admin, ['environment', 'apply'], { name: env, protected: true })).code, 0);
    // The case the walk-through met: a file that leaves out "protected" would unprotect it.
    const wouldUnprotect = await as(f.admin, ['environment', 'apply', '--dry-run'], { name: env });
    assert.equal(wouldUnprotect.stdout, `environment ${env}: would be updated (protected changed); a dry run: nothing was changed\n`);
    assert.equal((await developer.http.get(`/v1/orgs/${f.orgId}/environments/${env}`)).body.protected, true);
  });

  it('applies an environment file as an admin: created, unchanged, updated; lists and deletes it; a developer is refused', async () => {
    const db = await createSecret(developer.http, f.orgId, { URL: 'postgres://db' });
    const name = unique('staging');
    const file = { name, description: 'staging', variables: { REGION: 'eu' }, secrets: [{ secret: db }] };
    const created = await as(f.admin, ['environment', 'apply'], file);
    assert.equal(created.code, 0, created.stderr);
    assert.equal(created.stdout, `environment ${name}: created\n`);
    assert.equal((await as(f.admin, ['environment', 'apply'], file)).stdout, `environment ${name}: unchanged\n`);
    const shown = (await as(viewer, ['environment', 'show', '--environment', name, '--json'])).stdout;
    assert.equal((await as(f.admin, ['environment', 'apply'], shown)).stdout, `environment ${name}: unchanged\n`);
    // What the file leaves out is what a new environment has: no variables, no secrets.
    const updated = await as(f.admin, ['environment', 'apply'], { name, description: 'staging', protected: true });
    assert.equal(updated.code, 0, updated.stderr);
    assert.equal(updated.stdout, `environment ${name}: updated (protected changed, variables.REGION removed, secrets changed)\n`);
    const now = jsonOf(await as(viewer, ['environment', 'show', '--environment', name, '--json']));
    assert.deepEqual([now.protected, now.variables, now.secrets], [true, {}, []]);

    const listed = await as(viewer, ['environment', 'list']);
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(listed.stdout, new RegExp(`^${name} +yes +no +\\S+$`, 'm'));
    assert.ok(jsonOf(await as(viewer, ['environment', 'list', '--json'])).environments.some((e: { name: string }) => e.name === name));

    const byDeveloper = await as(developer, ['environment', 'apply', '--json'], file);
    assert.equal(byDeveloper.code, 1);
    assert.equal(JSON.parse(byDeveloper.stderr).error.status, 403);
    assert.equal(jsonOf(await as(viewer, ['environment', 'show', '--environment', name, '--json'])).protected, true);

    const deleted = await as(f.admin, ['environment', 'delete', '--environment', name]);
    assert.equal(deleted.code, 0, deleted.stderr);
    assert.equal(deleted.stdout, `environment ${name}: deleted, with its finished deployments\n`);
    assert.equal((await developer.http.get(`/v1/orgs/${f.orgId}/environments/${name}`)).status, 404);
    assert.equal((await as(f.admin, ['environment', 'delete', '--environment', name, '--ignore-not-found'])).stdout, `environment ${name}: not found; nothing to delete\n`);
    const noName = await as(f.admin, ['environment', 'delete']);
    assert.equal(noName.code, 2);
    assert.match(noName.stderr, /--environment is required/);
  });
});
