// Test entry point (`npm test`, after tsc has compiled test/ into dist/test/).
//
// Runs, each as one `node --test` child process:
//   1. unit                    dist/test/unit/**/*.test.js
//   2. integration (sqlite)    dist/test/integration/**/*.test.js, SLIPWAY_TEST_DB=sqlite
//   3. integration (postgres)  the same files, SLIPWAY_TEST_DB=postgres against a
//                              throwaway cluster (SLIPWAY_TEST_PG_ADMIN_URL), or
//                              against the developer's own database when
//                              SLIPWAY_TEST_DATABASE_URL / SLIPWAY_TEST_PG_ADMIN_URL is set.
// The unit suite runs first; the two integration suites then run side by side
// (their tests wait on disks, timers and child processes more than they compute,
// so two suites on two cores take little longer than one). The sqlite suite
// prints as it goes; the postgres suite's output is kept in a file and printed
// whole once it ends. SLIPWAY_TEST_SERIAL=1 runs them one after the other instead,
// each printing as it goes.
//
// Usage: node scripts/run-tests.mjs [substring ...]
//   Only files whose path (e.g. dist/test/integration/secrets.test.js)
//   contains one of the substrings are run.
//
// Without PostgreSQL binaries the postgres suite is skipped loudly, except in
// CI (CI=true), where that is an error: CI must exercise both databases.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { findPostgresBin, startThrowawayPostgres } from './postgres.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
// Where tsc put the compiled tests (SLIPWAY_DIST lets several checkouts' builds coexist).
const DIST = process.env.SLIPWAY_DIST ?? 'dist';
const NODE_TEST_ARGS = [
  '--test',
  '--test-concurrency=2',
  '--test-reporter=spec',
  '--test-reporter-destination=stdout',
  // A guard against a file that hangs. Node 20 and 22 apply it to each file as a whole: the longest
  // (the console's in a browser, the server as a child process) take 60 to 130 seconds alone and
  // up to twice that on two cores busy with both suites, so each is given well over that. Node 24
  // applies it to each test instead; a command a file's tests left running, which would keep the
  // file alive there, is killed once they end (test/support/processes.ts).
  '--test-timeout=600000',
];

// Every run also writes TAP to a file, whose closing counts add up to the one total line at the end,
// and whose failures are told again after everything else, where the end of a long log shows them.
const totals = { passed: 0, failed: 0, skipped: 0 };
const failures = [];
function countTap(file, suite) {
  let text = '';
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return;
  }
  failures.push(...failedTests(text, suite));
  // The last plan-level counts of the run (nested subtests report their own earlier).
  const last = (name) => {
    const all = [...text.matchAll(new RegExp(`^# ${name} (\\d+)$`, 'gm'))];
    return all.length ? Number(all[all.length - 1][1]) : 0;
  };
  totals.passed += last('pass');
  totals.failed += last('fail') + last('cancelled');
  totals.skipped += last('skipped') + last('todo');
}
/** Each test that failed itself (not a suite failing for its tests), with its path of names and what TAP says of it. */
function failedTests(text, suite) {
  const found = [];
  const names = []; // the names of the subtests enclosing the current line, by depth
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const subtest = /^( *)# Subtest: (.*)$/.exec(lines[i]);
    if (subtest) {
      names.length = subtest[1].length / 4;
      names.push(subtest[2]);
      continue;
    }
    const notOk = /^( *)not ok \d+ - (.*)$/.exec(lines[i]);
    if (!notOk) continue;
    const indent = notOk[1];
    const block = [];
    if (lines[i + 1] === `${indent}  ---`) {
      for (i += 2; i < lines.length && lines[i] !== `${indent}  ...`; i++) block.push(lines[i].slice(indent.length + 2));
    }
    // A suite failing for its tests, a test cancelled because its suite's hook failed (that hook is
    // told), and a failing TODO (not counted as a failure) are not told again.
    if (/ # TODO\b/.test(notOk[2]) || block.some((line) => line === "failureType: 'subtestsFailed'" || line === "failureType: 'cancelledByParent'")) continue;
    // Without timing, Node's own stack frames and this checkout's place on the machine.
    const detail = block
      .filter((line) => !line.startsWith('duration_ms:') && !/^node:|\(node:|\(<anonymous>\)$/.test(line.trim()))
      .map((line) => line.replace(`file://${ROOT}${path.sep}`, '').replace(`${ROOT}${path.sep}`, ''));
    // A file that failed as a whole (stopped at its time limit, or crashed) is named by its path.
    const name = [...names.slice(0, indent.length / 4), notOk[2]].join(' › ').replaceAll(`${ROOT}${path.sep}`, '');
    found.push({ suite, name, detail });
  }
  return found;
}

function reportFailures() {
  if (failures.length === 0) return;
  console.log(`\nFailed (${failures.length}), again:`);
  for (const { suite, name, detail } of failures) {
    console.log(`\n  ${suite}: ${name}`);
    const shown = detail.slice(0, 40);
    for (const line of shown) console.log(`    ${line}`);
    if (detail.length > shown.length) console.log(`    … ${detail.length - shown.length} more line(s)`);
  }
}

const SIGNAL_EXIT_CODES = { SIGINT: 130, SIGTERM: 143 };

// ---------------------------------------------------------------------------
// Finding test files
// ---------------------------------------------------------------------------

// Walked by hand rather than handing directories or globs to `node --test`:
// what those mean differs between Node 20, 22 and 24, explicit paths do not.
function listTestFiles(relDir) {
  const found = [];
  const walk = (dir) => {
    let entries;
    try {
      entries = fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true });
    } catch (err) {
      if (err.code === 'ENOENT') return;
      throw err;
    }
    for (const entry of entries) {
      const rel = path.posix.join(dir, entry.name);
      if (entry.isDirectory()) walk(rel);
      else if (entry.isFile() && entry.name.endsWith('.test.js')) found.push(rel);
    }
  };
  walk(relDir);
  return found.sort();
}

function applyFilters(files, filters) {
  if (filters.length === 0) return files;
  return files.filter((file) => filters.some((filter) => file.includes(filter)));
}

// ---------------------------------------------------------------------------
// Running one suite
// ---------------------------------------------------------------------------

const children = new Set();
let interruptedBy = null;
let runs = 0;

// `output`: a file descriptor the child's stdout and stderr go to, instead of ours.
function runNodeTest(suite, files, extraEnv, output) {
  return new Promise((resolve) => {
    const tap = path.join(os.tmpdir(), `slipway-tests-${process.pid}-${++runs}.tap`);
    const child = spawn(process.execPath, [...NODE_TEST_ARGS, '--test-reporter=tap', `--test-reporter-destination=${tap}`, ...files], {
      cwd: ROOT,
      stdio: output === undefined ? 'inherit' : ['ignore', output, output],
      env: { ...process.env, ...extraEnv },
    });
    children.add(child);
    child.on('error', (err) => {
      console.error(`run-tests: could not start node: ${err.message}`);
      children.delete(child);
      resolve(1);
    });
    child.on('exit', (code, signal) => {
      children.delete(child);
      countTap(tap, suite);
      fs.rmSync(tap, { force: true });
      resolve(code ?? (signal ? 1 : 0));
    });
  });
}

// ---------------------------------------------------------------------------
// Signals
// ---------------------------------------------------------------------------

// The first SIGINT/SIGTERM lets the current suite wind down (Ctrl-C already
// reached it through the process group; a SIGTERM aimed at us alone is
// forwarded), skips the remaining suites and stops PostgreSQL in `finally`.
// A second signal means "now": exit at once; postgres.mjs's exit hook still
// stops the cluster synchronously.
function onSignal(signal) {
  if (interruptedBy) {
    console.error(`\nrun-tests: ${signal} again, exiting immediately`);
    for (const child of children) child.kill('SIGKILL');
    process.exit(SIGNAL_EXIT_CODES[signal] ?? 1);
  }
  interruptedBy = signal;
  console.error(`\nrun-tests: ${signal} received, stopping (send again to force)`);
  if (signal !== 'SIGINT') for (const child of children) child.kill(signal);
}

// ---------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------

/** Whether an environment variable says yes: set, and neither empty, `0` nor `false`. */
function isOn(name) {
  const value = (process.env[name] ?? '').trim().toLowerCase();
  return value !== '' && value !== '0' && value !== 'false';
}

// Decides where the postgres suite's database comes from, without waiting
// for it: the cluster boots (about a second) while the earlier suites run.
function preparePostgres() {
  if (process.env.SLIPWAY_TEST_DATABASE_URL || process.env.SLIPWAY_TEST_PG_ADMIN_URL) {
    return { kind: 'external' };
  }
  const missing = ['initdb', 'pg_ctl', 'postgres'].filter((name) => !findPostgresBin(name));
  if (missing.length > 0) {
    return {
      kind: 'unavailable',
      reason: `PostgreSQL server binaries not found (${missing.join(', ')}) on PATH or under /usr/lib/postgresql/*/bin`,
    };
  }
  const starting = startThrowawayPostgres().then(
    (cluster) => ({ cluster }),
    (error) => ({ error }),
  );
  return { kind: 'throwaway', starting };
}

// ---------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------

function formatDuration(ms) {
  return `${(ms / 1000).toFixed(1)}s`;
}

function banner(text) {
  const line = '='.repeat(Math.max(20, text.length + 8));
  console.log(`\n${line}\n=== ${text}\n${line}`);
}

async function main() {
  const filters = process.argv.slice(2);
  const unitFiles = applyFilters(listTestFiles(`${DIST}/test/unit`), filters);
  const integrationFiles = applyFilters(listTestFiles(`${DIST}/test/integration`), filters);

  if (unitFiles.length + integrationFiles.length === 0) {
    console.error(
      filters.length > 0
        ? `run-tests: no test files under ${DIST}/test/{unit,integration} match: ${filters.join(', ')}`
        : `run-tests: no compiled tests found under ${DIST}/test/{unit,integration} (run \`tsc -p tsconfig.json\` first)`,
    );
    return 1;
  }

  const postgres = integrationFiles.length > 0 ? preparePostgres() : { kind: 'none' };
  if (postgres.kind === 'unavailable' && isOn('CI')) {
    console.error(
      `run-tests: FAILED: ${postgres.reason}.\n` +
        'run-tests: CI must run the PostgreSQL integration suite; install the PostgreSQL server ' +
        '(initdb, pg_ctl, postgres) or set SLIPWAY_TEST_PG_ADMIN_URL.',
    );
    return 1;
  }

  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const results = [];
  const record = (name, status, detail = '') => results.push({ name, status, detail });

  // `buffered`: run with the output kept in a file, printed whole (under the suite's banner) once it ends.
  const runSuite = async (name, files, env, buffered = false) => {
    if (interruptedBy) return record(name, 'not run', `interrupted by ${interruptedBy}`);
    if (files.length === 0) return record(name, 'skipped', 'no test files');
    let log = null;
    if (buffered) {
      log = path.join(os.tmpdir(), `slipway-tests-${process.pid}-${++runs}.log`);
      console.log(`\nrun-tests: ${name} is running too (${files.length} file(s)); its output follows once it ends`);
    } else {
      banner(`${name}: ${files.length} file(s)`);
    }
    const started = Date.now();
    let code;
    if (log) {
      const fd = fs.openSync(log, 'w');
      try {
        code = await runNodeTest(name, files, env, fd);
      } finally {
        fs.closeSync(fd);
      }
    } else {
      code = await runNodeTest(name, files, env);
    }
    const detail = `${files.length} file(s), ${formatDuration(Date.now() - started)}`;
    const result = () => {
      if (interruptedBy) return record(name, 'interrupted', detail);
      return record(name, code === 0 ? 'passed' : 'failed', code === 0 ? detail : `exit code ${code}, ${detail}`);
    };
    if (!log) return result();
    // Printed once the suite running in the foreground has finished, so the two never interleave.
    return () => {
      banner(`${name}: ${files.length} file(s)`);
      process.stdout.write(fs.readFileSync(log));
      fs.rmSync(log, { force: true });
      return result();
    };
  };

  const postgresSuite = async (buffered) => {
    const pgName = 'integration (postgres)';
    if (interruptedBy) return record(pgName, 'not run', `interrupted by ${interruptedBy}`);
    if (postgres.kind === 'none') return record(pgName, 'skipped', 'no test files');
    if (postgres.kind === 'unavailable') {
      const line = `PostgreSQL suite SKIPPED: ${postgres.reason}`;
      console.error(`\n${'!'.repeat(line.length)}\n${line}\n${'!'.repeat(line.length)}`);
      return record(pgName, 'skipped', postgres.reason);
    }
    if (postgres.kind === 'external') {
      console.log('\nrun-tests: using the PostgreSQL given by SLIPWAY_TEST_DATABASE_URL / SLIPWAY_TEST_PG_ADMIN_URL');
      return runSuite(pgName, integrationFiles, { SLIPWAY_TEST_DB: 'postgres' }, buffered);
    }
    const started = await postgres.starting;
    if (started.error) {
      // The binaries exist, so a failure to start is a broken setup, not a
      // reason to quietly skip.
      console.error(`\nrun-tests: ${started.error.message}`);
      return record(pgName, 'failed', 'could not start PostgreSQL');
    }
    console.log(`\nrun-tests: throwaway PostgreSQL at ${started.cluster.adminUrl}`);
    return runSuite(
      pgName,
      integrationFiles,
      {
        SLIPWAY_TEST_DB: 'postgres',
        SLIPWAY_TEST_PG_ADMIN_URL: started.cluster.adminUrl,
        // Lets the tests read the cluster's raw files (no secret value may be stored in plain text).
        SLIPWAY_TEST_PG_DATA_DIR: path.join(started.cluster.dir, 'data'),
      },
      buffered,
    );
  };

  try {
    await runSuite('unit', unitFiles, {});
    if (isOn('SLIPWAY_TEST_SERIAL')) {
      await runSuite('integration (sqlite)', integrationFiles, { SLIPWAY_TEST_DB: 'sqlite' });
      await postgresSuite(false);
    } else {
      const [, pgDone] = await Promise.all([
        runSuite('integration (sqlite)', integrationFiles, { SLIPWAY_TEST_DB: 'sqlite' }),
        postgresSuite(true),
      ]);
      if (typeof pgDone === 'function') pgDone();
    }
  } finally {
    // Covers interrupts during the earlier suites too: a cluster still
    // booting is awaited and then stopped.
    if (postgres.kind === 'throwaway') {
      const started = await postgres.starting;
      await started.cluster?.stop();
    }
  }

  reportFailures();
  console.log('\nSummary:');
  for (const { name, status, detail } of results) {
    console.log(`  ${name}: ${status}${detail ? ` (${detail})` : ''}`);
  }

  console.log(`\n${totals.passed} passed, ${totals.failed} failed${totals.skipped ? `, ${totals.skipped} skipped` : ''}`);

  if (interruptedBy) return SIGNAL_EXIT_CODES[interruptedBy] ?? 1;
  return results.some((r) => r.status === 'failed') ? 1 : 0;
}

process.exitCode = await main();
