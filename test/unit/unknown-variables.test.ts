// SLIPWAY_* variables that no setting reads: which are, and what each was probably meant to be.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CONFIG_VARIABLES } from '../../src/platform/config.js';
import { RUNNER_VARIABLES, unknownVariables, unknownVariableWarning } from '../../src/platform/unknown-variables.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** Every file below `dir` (relative to the repository) whose name ends with one of `endings`. */
function filesBelow(dir: string, endings: string[]): string[] {
  const found: string[] = [];
  const walk = (at: string) => {
    for (const entry of fs.readdirSync(at, { withFileTypes: true })) {
      const full = path.join(at, entry.name);
      if (entry.isDirectory() && entry.name !== 'node_modules') walk(full);
      else if (entry.isFile() && endings.some((e) => entry.name.endsWith(e))) found.push(full);
    }
  };
  walk(path.join(ROOT, dir));
  return found;
}

describe('unknown SLIPWAY_* variables', () => {
  it('names a misspelt setting and the one it is closest to', () => {
    const unknown = unknownVariables({ SLIPWAY_DATABSE_URL: 'postgres://db/slipway', SLIPWAY_PROT: '9000', SLIPWAY_RUNNER_CONCURENCY: '2', SLIPWAY_MASTERKEY: 'k' });
    assert.deepEqual(unknown, [
      { name: 'SLIPWAY_DATABSE_URL', closest: 'SLIPWAY_DATABASE_URL' },
      { name: 'SLIPWAY_MASTERKEY', closest: 'SLIPWAY_MASTER_KEY' },
      { name: 'SLIPWAY_PROT', closest: 'SLIPWAY_PORT' },
      { name: 'SLIPWAY_RUNNER_CONCURENCY', closest: 'SLIPWAY_RUNNER_CONCURRENCY' },
    ]);
    assert.equal(unknownVariableWarning(unknown[0]!), 'SLIPWAY_DATABSE_URL is not a Slipway setting and is ignored; did you mean SLIPWAY_DATABASE_URL?');
  });

  it('suggests nothing when no setting is close, and still warns', () => {
    const unknown = unknownVariables({ SLIPWAY_DB: 'x', SLIPWAY_FEATURE_FLAGS: 'y', SLIPWAY_: '' });
    assert.deepEqual(unknown.map((v) => [v.name, v.closest]), [['SLIPWAY_', null], ['SLIPWAY_DB', null], ['SLIPWAY_FEATURE_FLAGS', null]]);
    assert.equal(unknownVariableWarning(unknown[1]!), 'SLIPWAY_DB is not a Slipway setting and is ignored');
  });

  it('knows every server setting and every runner setting, and leaves other variables alone', () => {
    const env = Object.fromEntries([...Object.values(CONFIG_VARIABLES), ...Object.values(RUNNER_VARIABLES)].map((name) => [name, 'x']));
    assert.deepEqual(unknownVariables({ ...env, PATH: '/bin', slipway_port: '1', MY_SLIPWAY_PORT: '2', SLIPWAY_UNSET: undefined }), []);
  });

  it('does not warn of the variables the repository\'s test, bench and build scripts read', () => {
    const read = new Set<string>();
    for (const file of [...filesBelow('scripts', ['.mjs']), ...filesBelow('test', ['.ts']), ...filesBelow('bench', ['.ts', '.mjs']), ...filesBelow('src', ['.ts'])]) {
      for (const m of fs.readFileSync(file, 'utf8').matchAll(/process\.env(?:\.|\[')(SLIPWAY_[A-Z0-9_]+)/g)) read.add(m[1]!);
    }
    assert.ok(read.has('SLIPWAY_DIST') && read.has('SLIPWAY_TEST_DB'), [...read].join(', '));
    assert.deepEqual(unknownVariables(Object.fromEntries([...read].map((name) => [name, 'x']))), []);
  });
});
