// The master keyring: key file and environment sources, following a rotation made by another
// process, and the SLIPWAY_MASTER_KEY_PREVIOUS setting.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { loadConfig } from '../../src/platform/config.js';
import {
  generateMasterKey, KEY_FILE, KeyFileRefusedError, keyFileOps, keyringOf, looseKeyFileWarning, masterKeyId, MissingKeyFileError, openKeyring, readKeyFile, readRetiredIds,
  retiredChain, unwrapKey, wrapKey, writeKeyFile,
} from '../../src/platform/crypto/master-key.js';

const dirs: string[] = [];
const tempDir = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slipway-mk-'));
  dirs.push(dir);
  return dir;
};
after(() => { for (const d of dirs) fs.rmSync(d, { recursive: true, force: true }); });

describe('master keyring from the key file', () => {
  it('generates an owner-only key file on first open and wraps with it', () => {
    const dir = tempDir();
    let generated: string | null = null;
    const ring = openKeyring({ envKey: null, dataDir: dir, onGenerated: (f) => { generated = f; } });
    const file = path.join(dir, KEY_FILE);
    assert.equal(generated, file);
    assert.equal(fs.statSync(file).mode & 0o777, 0o600);
    assert.equal(ring.current().id, masterKeyId(readKeyFile(file)[0]!));
    const wrapped = wrapKey(ring, Buffer.from('data key'), 'b');
    assert.equal(unwrapKey(ring, wrapped.sealed, wrapped.masterKeyId, 'b').toString(), 'data key');
  });

  it('follows a key file rewritten by another process: the new first key wraps, the old ones still unwrap', () => {
    const dir = tempDir();
    const ring = openKeyring({ envKey: null, dataDir: dir });
    const file = path.join(dir, KEY_FILE);
    const old = readKeyFile(file)[0]!;
    const before = wrapKey(ring, Buffer.from('under old'), 'b');
    const changes: string[] = [];
    const watching = openKeyring({ envKey: null, dataDir: dir, onChanged: (c) => changes.push(c.current) });

    const next = generateMasterKey();
    writeKeyFile(file, [next, old]);
    assert.equal(fs.statSync(file).mode & 0o777, 0o600);
    assert.deepEqual(fs.readdirSync(dir).filter((f) => f.endsWith('.tmp')), []);

    // No explicit reload: the next wrap notices the file changed.
    assert.equal(watching.current().id, masterKeyId(next));
    assert.deepEqual(changes, [masterKeyId(next)]);
    const afterRotation = wrapKey(watching, Buffer.from('under new'), 'b');
    assert.equal(afterRotation.masterKeyId, masterKeyId(next));
    assert.equal(unwrapKey(watching, before.sealed, before.masterKeyId, 'b').toString(), 'under old');
    // A process that has not wrapped since reloads on the unknown id when it unwraps.
    assert.equal(unwrapKey(ring, afterRotation.sealed, afterRotation.masterKeyId, 'b').toString(), 'under new');

    writeKeyFile(file, [next]);
    watching.reload();
    assert.deepEqual(watching.all().map((k) => k.id), [masterKeyId(next)]);
    assert.throws(() => unwrapKey(watching, before.sealed, before.masterKeyId, 'b'), /not configured/);
  });

  it('keeps the keys it has when the key file disappears, rather than generating one that opens nothing', () => {
    const dir = tempDir();
    const ring = openKeyring({ envKey: null, dataDir: dir });
    const id = ring.current().id;
    fs.rmSync(path.join(dir, KEY_FILE));
    ring.reload();
    assert.equal(ring.current().id, id);
    assert.equal(fs.existsSync(path.join(dir, KEY_FILE)), false);
  });
});

describe('master keyring: a key file other users may read or write', { skip: process.platform === 'win32' && 'file modes mean nothing on Windows' }, () => {
  it('is opened, with one warning naming the file, its mode and the chmod that fixes it', () => {
    const dir = tempDir();
    const file = path.join(dir, KEY_FILE);
    writeKeyFile(file, [generateMasterKey()]);
    for (const [mode, shown] of [[0o644, '0644'], [0o640, '0640'], [0o602, '0602'], [0o660, '0660']] as const) {
      fs.chmodSync(file, mode);
      const warnings: Array<[string, string]> = [];
      const ring = openKeyring({ envKey: null, dataDir: dir, onLooseMode: (warning, f) => warnings.push([warning, f]) });
      assert.equal(ring.current().id, masterKeyId(readKeyFile(file)[0]!));
      assert.deepEqual(warnings, [[`the key file ${file} has mode ${shown}, which lets other users read or write it: chmod 600 ${file}`, file]]);
    }
    // Also beside SLIPWAY_MASTER_KEY: the file's keys are still used.
    const warnings: string[] = [];
    openKeyring({ envKey: generateMasterKey().toString('base64'), dataDir: dir, onLooseMode: (warning) => warnings.push(warning) });
    assert.equal(warnings.length, 1);
  });

  it('says nothing of an owner-only file (executable bits aside), a generated one, or none', () => {
    const dir = tempDir();
    const warnings: string[] = [];
    const onLooseMode = (warning: string) => warnings.push(warning);
    openKeyring({ envKey: null, dataDir: dir, onLooseMode });
    const file = path.join(dir, KEY_FILE);
    for (const mode of [0o600, 0o400, 0o711]) {
      fs.chmodSync(file, mode);
      openKeyring({ envKey: null, dataDir: dir, onLooseMode });
      assert.equal(looseKeyFileWarning(file), null);
    }
    openKeyring({ envKey: generateMasterKey().toString('base64'), dataDir: tempDir(), onLooseMode });
    assert.deepEqual(warnings, []);
  });
});

describe('master keyring: a missing or foreign key file', () => {
  it('refuses to generate a key beside a database that holds data wrapped under others, writing nothing', () => {
    const dir = tempDir();
    const needed = masterKeyId(generateMasterKey());
    assert.throws(() => openKeyring({ envKey: null, dataDir: dir, wrappedKeyIds: [needed] }), (e: unknown) => {
      assert.ok(e instanceof MissingKeyFileError);
      assert.match(e.message, new RegExp(`${KEY_FILE} is missing.*${needed}.*restore the file.*SLIPWAY_MASTER_KEY`));
      assert.doesNotMatch(e.message, /\n/);
      return true;
    });
    assert.deepEqual(fs.readdirSync(dir), []);
  });

  it('keeps unwrapping with the keys it holds when the key file is replaced by one holding none of them, wraps nothing new meanwhile, and says so once', () => {
    const dir = tempDir();
    const file = path.join(dir, KEY_FILE);
    const refusals: Array<{ file: string; held: string[] }> = [];
    const ring = openKeyring({ envKey: null, dataDir: dir, onRefused: (r) => refusals.push(r) });
    const id = ring.current().id;
    const original = readKeyFile(file);
    const wrapped = wrapKey(ring, Buffer.from('kept'), 'b');
    writeKeyFile(file, [generateMasterKey()]);
    // Wrapping under a key the file no longer holds would lose what is wrapped at the next start.
    for (let i = 0; i < 2; i++) {
      assert.throws(() => wrapKey(ring, Buffer.from('y'), 'b'), (e: unknown) => {
        assert.ok(e instanceof KeyFileRefusedError);
        assert.match(e.message, new RegExp(`${KEY_FILE} holds none of the keys this server uses \\(${id}\\).*restore the file that holds ${id}, or add that key to it`));
        return true;
      });
    }
    ring.reload();
    assert.equal(unwrapKey(ring, wrapped.sealed, wrapped.masterKeyId, 'b').toString(), 'kept');
    assert.deepEqual(refusals, [{ file, held: [id], inFile: [masterKeyId(readKeyFile(file)[0]!)] }]);
    // The right file back: wrapping goes on under its key.
    writeKeyFile(file, original);
    assert.equal(wrapKey(ring, Buffer.from('z'), 'b').masterKeyId, id);
  });

  it('picks the very file it accepted last up again when it is moved back into place', () => {
    const dir = tempDir();
    const file = path.join(dir, KEY_FILE);
    const ring = openKeyring({ envKey: null, dataDir: dir });
    const id = wrapKey(ring, Buffer.from('x'), 'b').masterKeyId;
    fs.renameSync(file, `${file}.aside`);
    writeKeyFile(file, [generateMasterKey()]);
    assert.throws(() => wrapKey(ring, Buffer.from('y'), 'b'), KeyFileRefusedError);
    // The same inode, size and time as when it was accepted.
    fs.renameSync(`${file}.aside`, file);
    assert.equal(wrapKey(ring, Buffer.from('z'), 'b').masterKeyId, id);
  });

  it('follows a series of rotations it saw none of: each file names every key retired before it', () => {
    const dir = tempDir();
    const file = path.join(dir, KEY_FILE);
    const ring = openKeyring({ envKey: null, dataDir: dir, onRefused: () => assert.fail('refused') });
    const [k0] = readKeyFile(file);
    // Two rotations, as `keys rotate-master` writes them, while this process wraps nothing.
    const [k1, k2] = [generateMasterKey(), generateMasterKey()];
    writeKeyFile(file, [k1, k0!], retiredChain(file));
    writeKeyFile(file, [k1], retiredChain(file, [masterKeyId(k0!)]));
    writeKeyFile(file, [k2, k1], retiredChain(file));
    writeKeyFile(file, [k2], retiredChain(file, [masterKeyId(k1)]));
    assert.deepEqual(readRetiredIds(file), [masterKeyId(k0!), masterKeyId(k1)]);
    assert.equal(ring.current().id, masterKeyId(k2));
    assert.equal(wrapKey(ring, Buffer.from('x'), 'b').masterKeyId, masterKeyId(k2));
  });

  it('follows a file that holds only a new key when it names the held key as retired (a rotation it did not watch)', () => {
    const dir = tempDir();
    const file = path.join(dir, KEY_FILE);
    const ring = openKeyring({ envKey: null, dataDir: dir, onRefused: () => assert.fail('refused') });
    const old = ring.current().id;
    const next = generateMasterKey();
    writeKeyFile(file, [next], [old]);
    assert.deepEqual(readKeyFile(file).map(masterKeyId), [masterKeyId(next)]);
    assert.equal(ring.current().id, masterKeyId(next));
  });

  it('tells how to add a missing key in key-file mode without SLIPWAY_MASTER_KEY_PREVIOUS alone, which needs SLIPWAY_MASTER_KEY', () => {
    const dir = tempDir();
    const ring = openKeyring({ envKey: null, dataDir: dir });
    const wrapped = wrapKey(keyringOf([generateMasterKey()]), Buffer.from('x'), 'b');
    assert.throws(() => unwrapKey(ring, wrapped.sealed, wrapped.masterKeyId, 'b'), (e: unknown) => {
      const message = (e as Error).message;
      assert.match(message, new RegExp(`add that key as a line of ${path.join(dir, KEY_FILE)} \\(at its end: the first key is the one that wraps\\)`));
      assert.match(message, /set SLIPWAY_MASTER_KEY to the current key and SLIPWAY_MASTER_KEY_PREVIOUS/);
      assert.doesNotMatch(message, /add that key to SLIPWAY_MASTER_KEY_PREVIOUS/);
      return true;
    });
  });
});

describe('writing the key file', () => {
  it('writes through a symbolic link to its target, leaving the link and no temporary file', () => {
    const dir = tempDir();
    const store = tempDir();
    const target = path.join(store, 'slipway-master.key');
    writeKeyFile(target, [generateMasterKey()]);
    const link = path.join(dir, KEY_FILE);
    fs.symlinkSync(target, link);
    const next = generateMasterKey();
    writeKeyFile(link, [next]);
    assert.ok(fs.lstatSync(link).isSymbolicLink());
    assert.deepEqual(readKeyFile(target).map(masterKeyId), [masterKeyId(next)]);
    assert.deepEqual([...fs.readdirSync(dir), ...fs.readdirSync(store)].filter((f) => f.endsWith('.tmp')), []);
  });

  it('removes the temporary file and says what to do when the file cannot be replaced (a bind-mounted file: EBUSY)', () => {
    const dir = tempDir();
    const file = path.join(dir, KEY_FILE);
    const [old] = [generateMasterKey()];
    writeKeyFile(file, [old!]);
    const rename = keyFileOps.rename;
    keyFileOps.rename = () => { throw Object.assign(new Error('EBUSY: resource busy or locked, rename'), { code: 'EBUSY' }); };
    try {
      assert.throws(() => writeKeyFile(file, [generateMasterKey(), old!]), /cannot replace .*master\.key in place \(EBUSY\).*mount its directory instead, or give the key in SLIPWAY_MASTER_KEY/);
    } finally {
      keyFileOps.rename = rename;
    }
    assert.deepEqual(fs.readdirSync(dir), [KEY_FILE]);
    assert.deepEqual(readKeyFile(file).map(masterKeyId), [masterKeyId(old!)]);
  });
});

describe('master keyring from SLIPWAY_MASTER_KEY', () => {
  it('wraps with the configured key and also accepts the previous ones and a leftover key file', () => {
    const dir = tempDir();
    const [current, previous, inFile] = [generateMasterKey(), generateMasterKey(), generateMasterKey()];
    writeKeyFile(path.join(dir, KEY_FILE), [inFile]);
    const ring = openKeyring({ envKey: current.toString('base64'), envPrevious: [previous.toString('base64')], dataDir: dir });
    assert.equal(ring.source, 'SLIPWAY_MASTER_KEY');
    assert.deepEqual(ring.all().map((k) => k.id), [current, previous, inFile].map(masterKeyId));
    const underPrevious = wrapKey(keyringOf([previous]), Buffer.from('x'), 'b');
    assert.equal(unwrapKey(ring, underPrevious.sealed, underPrevious.masterKeyId, 'b').toString(), 'x');
    assert.equal(wrapKey(ring, Buffer.from('y'), 'b').masterKeyId, masterKeyId(current));
  });

  it('a ring holding only another key cannot open what a key wrapped, even when told the id', () => {
    const [a, b] = [generateMasterKey(), generateMasterKey()];
    const wrapped = wrapKey(keyringOf([a]), Buffer.from('secret'), 'b');
    assert.throws(() => unwrapKey(keyringOf([b]), wrapped.sealed, wrapped.masterKeyId, 'b'), /not configured/);
    assert.throws(() => unwrapKey(keyringOf([b]), wrapped.sealed, masterKeyId(b), 'b'));
  });

  it('SLIPWAY_MASTER_KEY_PREVIOUS takes comma-separated 32-byte keys and needs SLIPWAY_MASTER_KEY', () => {
    const [k1, k2, k3] = [generateMasterKey(), generateMasterKey(), generateMasterKey()].map((k) => k.toString('base64'));
    const config = loadConfig({ SLIPWAY_MASTER_KEY: k1, SLIPWAY_MASTER_KEY_PREVIOUS: `${k2}, ${k3}` });
    assert.deepEqual(config.masterKeyPrevious, [k2, k3]);
    assert.deepEqual(loadConfig({}).masterKeyPrevious, []);
    assert.throws(() => loadConfig({ SLIPWAY_MASTER_KEY: k1, SLIPWAY_MASTER_KEY_PREVIOUS: `${k2},c2hvcnQ=` }), /SLIPWAY_MASTER_KEY_PREVIOUS must be/);
    assert.throws(() => loadConfig({ SLIPWAY_MASTER_KEY_PREVIOUS: k2 }), /needs SLIPWAY_MASTER_KEY/);
  });
});
