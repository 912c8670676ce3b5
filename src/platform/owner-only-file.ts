// Files only their owner may read (the master key, the first start's credentials), written so
// that a crash leaves either the old content or the new one on disk, never an empty file for a
// key or a secret that the database already relies on.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

/**
 * The mode of `file` (as in `0644`, its target's for a symbolic link) when users other than its
 * owner may read or write it, else null; null too where file modes mean nothing (Windows).
 */
export function looseMode(file: string): string | null {
  if (process.platform === 'win32') return null;
  const mode = fs.statSync(file).mode & 0o777;
  return (mode & 0o066) === 0 ? null : `0${mode.toString(8).padStart(3, '0')}`;
}

/**
 * Creates `file` (mode 0600) holding `data`, on disk when this returns (the directory's entry
 * included). Refuses with EEXIST when something is already at that path, a symbolic link included.
 */
export function createOwnerOnly(file: string, data: string): void {
  writeNew(file, (fd) => fs.writeSync(fd, data));
  fsyncDir(path.dirname(file));
}

/**
 * Creates `file` (mode 0600, never one already there) holding a copy of `source`'s bytes, on disk
 * when this returns; not its directory's entry: a caller that moves it into place fsyncs the
 * directory then. A plain copy (fs.copyFile) would give it `source`'s mode, however loose.
 */
export function copyToNewOwnerOnly(source: string, file: string): void {
  const from = fs.openSync(source, 'r');
  try {
    writeNew(file, (fd) => {
      const buffer = Buffer.allocUnsafe(1 << 20);
      for (let read; (read = fs.readSync(from, buffer, 0, buffer.length, null)) > 0;) {
        for (let written = 0; written < read;) written += fs.writeSync(fd, buffer, written, read - written);
      }
    });
  } finally {
    fs.closeSync(from);
  }
}

/**
 * Replaces `file` with a new owner-only file holding `data`: written beside it, fsynced, renamed
 * over it, and the directory fsynced. A symbolic link at `file` is replaced, not written through,
 * and a looser mode does not carry over. `rename` may be swapped by a caller (and its tests); its
 * failure leaves `file` as it was and no temporary file.
 */
export function replaceOwnerOnly(
  file: string,
  data: string,
  rename: (from: string, to: string) => void = fs.renameSync,
): void {
  const temp = `${file}.${process.pid}.${randomUUID()}.tmp`;
  writeNew(temp, (fd) => fs.writeSync(fd, data));
  try {
    rename(temp, file);
  } catch (error) {
    fs.rmSync(temp, { force: true });
    throw error;
  }
  fsyncDir(path.dirname(file));
}

/** A new file (never one already there), removed again if it cannot be written whole. */
function writeNew(file: string, write: (fd: number) => void): void {
  const fd = fs.openSync(file, 'wx', 0o600);
  try {
    try {
      write(fd);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  } catch (error) {
    fs.rmSync(file, { force: true });
    throw error;
  }
}

/** Makes the directory's entries (a file created, renamed or linked there) durable. */
export function fsyncDir(dir: string): void {
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}
