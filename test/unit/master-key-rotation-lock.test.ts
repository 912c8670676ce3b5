// One key-file rotation at a time; a lock left by a killed run is taken over.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { acquireRotationLock } from '../../src/modules/keys/rotation-lock.js';
import { AppError } from '../../src/platform/errors.js';

const lockFile = () => path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'slipway-lock-')), 'master.key.lock');

describe('master key rotation lock', () => {
  it('refuses a second rotation while the first one is alive, and is free again once released', () => {
    const file = lockFile();
    const first = acquireRotationLock(file);
    assert.equal(first.tookOverFrom, null);
    // The lock names a live process other than this one: the parent of this test process.
    fs.writeFileSync(file, `${process.ppid}\n`);
    assert.throws(() => acquireRotationLock(file), (e: unknown) => e instanceof AppError && e.code === 'rotation_running' && e.detail.includes(String(process.ppid)));
    first.release();
    assert.equal(fs.existsSync(file), false);
    acquireRotationLock(file).release();
  });

  it('takes over the lock of a run that no longer exists', async () => {
    const file = lockFile();
    const child = spawn(process.execPath, ['-e', '']);
    const pid = child.pid!;
    await new Promise((resolve) => child.on('exit', resolve));
    fs.writeFileSync(file, `${pid}\n`);
    const lock = acquireRotationLock(file);
    assert.equal(lock.tookOverFrom, pid);
    assert.equal(fs.readFileSync(file, 'utf8').trim(), String(process.pid));
    lock.release();
  });
});
