// Which master keys the database needs that a keyring does not hold. A server without one of them
// would start and then fail every request that meets a row wrapped under it; a rotation without one
// could never finish. Both refuse up front, naming the keys by id.
import { ConfigError } from '../../platform/config.js';
import { addKeyAdvice, type MasterKeyring } from '../../platform/crypto/master-key.js';
import type { Executor } from '../../platform/db/database.js';
import { keysRepo } from './keys.repo.js';

/** The master key ids rows are wrapped under that `ring` does not hold, once each. */
export async function unheldMasterKeyIds(db: Executor, ring: MasterKeyring): Promise<string[]> {
  const unheld = async () => [...new Set((await keysRepo.usage(db)).map((u) => u.masterKeyId))].filter((id) => ring.get(id) === undefined);
  const first = await unheld();
  if (first.length === 0) return first;
  // A rotation of the key file may have put a new key first since the ring was read.
  ring.reload();
  return unheld();
}

/**
 * Start-up: refuses, in one line, a configuration that lacks a key rows are wrapped under. In the
 * environment's mode that is typically a node given only the new key while another node still
 * wraps under the old one. `copy`: `db` is that file, a backup about to be restored, not the
 * database the configuration names (which `keys status` would read).
 */
export async function refuseUnheldMasterKeys(db: Executor, ring: MasterKeyring, copy: string | null = null): Promise<void> {
  const unheld = await unheldMasterKeyIds(db, ring);
  if (unheld.length === 0) return;
  const one = unheld.length === 1;
  const holder = ring.source === 'SLIPWAY_MASTER_KEY' ? 'SLIPWAY_MASTER_KEY and SLIPWAY_MASTER_KEY_PREVIOUS do' : `${ring.source} does`;
  const status = copy !== null ? '' : ` (slipway keys status shows the rows under each key; a node still on ${one ? 'that key' : 'those keys'} keeps wrapping new rows under ${one ? 'it' : 'them'})`;
  throw new ConfigError(`${copy === null ? 'the database' : `the copy ${copy}`} holds data wrapped under master key${one ? '' : 's'} ${unheld.join(', ')}, which ${holder} not hold: ${addKeyAdvice(ring.source, unheld.length)}${status}; nothing was written`);
}
