// The catalogue of problem codes is the one the API reference publishes: every code the source can
// refuse with is in it, with the status it is sent with, and it lists none that nothing sends.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { PROBLEM_CODES, problemType } from '../../src/platform/problem-codes.js';

const SRC = fileURLToPath(new URL('../../../src', import.meta.url));

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? sources(p) : p.endsWith('.ts') && !p.endsWith('problem-codes.ts') ? [p] : [];
  });
}

/** Each code the source makes a problem with, and the statuses it is made with (null: the factory's). */
function codesInSource(): Map<string, Set<number | null>> {
  const found = new Map<string, Set<number | null>>();
  const add = (code: string, status: number | null) => (found.get(code) ?? found.set(code, new Set()).get(code)!).add(status);
  for (const file of sources(SRC)) {
    const text = fs.readFileSync(file, 'utf8');
    // The OAuth endpoints' own errors are RFC 6749 codes, not problems.
    if (file.endsWith(`auth${path.sep}oauth-errors.ts`)) continue;
    for (const m of text.matchAll(/new AppError\(\s*(\d+),\s*'([a-z_]+)'/g)) add(m[2]!, Number(m[1]));
    for (const m of text.matchAll(/\b(conflict|raced|unprocessable)\(\s*'([a-z_]+)'/g)) add(m[2]!, m[1] === 'unprocessable' ? 422 : 409);
    for (const m of text.matchAll(/\bnotFound\(\s*'([a-z ]+)'/g)) add(`${m[1]!.replace(/ /g, '_')}_not_found`, 404);
    // Codes made from a name: `${kind}_in_use` for the two kinds deletion checks, a taken name's state.
    if (/conflict\(`\$\{kind\}_in_use`/.test(text)) for (const kind of ['environment', 'service']) add(`${kind}_in_use`, 409);
    for (const m of text.matchAll(/const code = [^;]*? \? '([a-z_]+)' : '([a-z_]+)'/g)) { add(m[1]!, 409); add(m[2]!, 409); }
  }
  return found;
}

describe('problem codes', () => {
  const found = codesInSource();

  it('lists every code the source refuses with, with its status', () => {
    for (const [code, statuses] of found) {
      const entry = PROBLEM_CODES[code];
      assert.ok(entry, `${code} is sent but not in PROBLEM_CODES`);
      for (const status of statuses) {
        // secret_deleted is a 404 for one secret and a 409 for a bulk create that names one.
        if (status !== null && status !== entry.status) assert.equal(`${code} ${status}`, 'secret_deleted 409', `${code} is sent with ${status}, listed with ${entry.status}`);
      }
    }
  });

  it('lists no code that nothing sends', () => {
    const unused = Object.keys(PROBLEM_CODES).filter((code) => !found.has(code));
    assert.deepEqual(unused, []);
  });

  it('names each kind of problem by a URI made of its code', () => {
    assert.equal(problemType('invalid_cursor'), 'https://slipway.dev/problems/invalid-cursor');
  });
});
