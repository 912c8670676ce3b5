// One key-file rotation at a time per data directory: two runs that each generated a key would
// each re-wrap rows under a key the other then drops from the file. The lock is a file holding
// the owner's pid; a run killed with SIGKILL leaves it behind, and the next run takes it over once
// that pid is gone (the key file is local, so the pid is on this machine).
import fs from 'node:fs';
import { errors } from '../../platform/errors.js';

export interface RotationLock {
  /** The pid of a run that stopped without finishing, if this one took over its lock. */
  tookOverFrom: number | null;
  release(): void;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function acquireRotationLock(file: string): RotationLock {
  let tookOverFrom: number | null = null;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      fs.writeFileSync(file, `${process.pid}\n`, { mode: 0o600, flag: 'wx' });
      return {
        tookOverFrom,
        release: () => fs.rmSync(file, { force: true }),
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    let owner: number;
    try {
      owner = Number.parseInt(fs.readFileSync(file, 'utf8'), 10);
    } catch {
      continue; // released between our attempt and the read
    }
    if (Number.isInteger(owner) && owner !== process.pid && alive(owner)) {
      throw errors.conflict('rotation_running', `Another master key rotation (pid ${owner}) is running on this data directory; wait for it to finish.`);
    }
    tookOverFrom = Number.isInteger(owner) ? owner : null;
    fs.rmSync(file, { force: true });
  }
  throw errors.conflict('rotation_running', `Could not take the rotation lock ${file}; another rotation may be starting. Run again.`);
}
