// Re-wrapping everything the master key wraps under a new key, while servers keep serving.
//
// Resumable by construction: the work left is exactly the rows whose master_key_id is not the new
// key's, each batch is one transaction, and each row is replaced compare-and-set, so a run killed
// at any point (or two runs at once) leaves every row under a key that still opens it.
//
// Removing the old keys is the one step that could lose data: a server that wrapped something
// with an old key just before it noticed the new one might commit that row after the last batch.
// So the final check runs behind a write fence (keysRepo.fence): every writer that started before
// it has committed, none can commit during it, and the old keys are removed inside it only if no
// row references them. Then the rows are counted once more; should a writer that wrapped before
// the rotation even began commit only now, this run still holds the old keys in memory, re-wraps
// what it finds and checks again, until a check after removal comes back clean.
import { setTimeout as sleep } from 'node:timers/promises';
import { unwrapKey, wrapKey, type MasterKeyring } from '../../platform/crypto/master-key.js';
import { errors } from '../../platform/errors.js';
import type { Database } from '../../platform/db/database.js';
import type { Logger } from '../../platform/logging.js';
import { unheldMasterKeyIds } from './held-keys.js';
import { keysRepo, WRAPPED_TABLES, type WrappedTable } from './keys.repo.js';

export interface RewrapProgress {
  batch: number;
  table: WrappedTable;
  /** Rows re-wrapped so far in this run. */
  done: number;
  /** Rows that were not under the new key when this pass started (a later pass takes any written since). */
  total: number;
}

export interface RewrapOptions {
  database: Database;
  /** The new key first, then every key a row may still be wrapped under. */
  ring: MasterKeyring;
  logger: Logger;
  batchSize: number;
  /** Wait between batches, to spread a large rotation's load. */
  pauseMs: number;
  onProgress?: (progress: RewrapProgress) => void;
  /** Makes the old keys unusable (rewrites the key file); called inside the write fence. */
  retireOldKeys: () => void;
}

/** Refuses to start when a row is wrapped under a key this run does not have: it could never finish. */
export async function assertEveryKeyAvailable(database: Database, ring: MasterKeyring): Promise<void> {
  const missing = await unheldMasterKeyIds(database.db, ring);
  if (missing.length > 0) {
    throw errors.conflict('master_key_unavailable',
      `Rows are wrapped under master key${missing.length === 1 ? '' : 's'} ${missing.join(', ')}, which ${missing.length === 1 ? 'is' : 'are'} not configured (${ring.source}). `
      + `${ring.source === 'SLIPWAY_MASTER_KEY' ? 'Add the key to SLIPWAY_MASTER_KEY_PREVIOUS' : `Add the key as a line at the end of ${ring.source} (the first key is the one that wraps)`} and run again; nothing was changed.`);
  }
}

/**
 * One pass over every table; returns how many rows it re-wrapped. A pass takes on only as many
 * rows as were left when it started, so that rows written meanwhile end it rather than prolong it.
 */
async function rewrapPass(options: RewrapOptions, startBatch: number): Promise<{ rewrapped: number; batches: number }> {
  const { database, ring } = options;
  const target = ring.current();
  const left = (await keysRepo.usage(database.db)).filter((u) => u.masterKeyId !== target.id);
  const total = left.reduce((sum, u) => sum + u.rows, 0);
  let done = 0;
  let batch = startBatch;
  for (const table of WRAPPED_TABLES) {
    let budget = left.filter((u) => u.table === table).reduce((sum, u) => sum + u.rows, 0);
    while (budget > 0) {
      const count = await database.db.transaction().execute(async (trx) => {
        const rows = await keysRepo.notUnder(trx, table, target.id, Math.min(options.batchSize, budget));
        let replaced = 0;
        for (const row of rows) {
          const plaintext = unwrapKey(ring, row.sealed, row.masterKeyId, row.binding);
          const wrapped = wrapKey(ring, plaintext, row.binding);
          plaintext.fill(0);
          if (await keysRepo.replaceSealed(trx, row, wrapped.sealed, wrapped.masterKeyId)) replaced++;
        }
        return { read: rows.length, replaced };
      });
      if (count.read === 0) break;
      budget -= count.read;
      done += count.replaced;
      batch++;
      options.onProgress?.({ batch, table, done, total });
      if (options.pauseMs > 0) await sleep(options.pauseMs);
    }
  }
  return { rewrapped: done, batches: batch - startBatch };
}

const isDeadlock = (error: unknown) => (error as { code?: unknown } | null)?.code === '40P01';

/**
 * Rows under an old key after the first pass come only from writes that raced the switch to the
 * new key, so a second round is normally the last. Rows that keep coming mean a node still wraps
 * with an old key (an environment-configured node not yet switched): stop rather than chase it.
 */
const MAX_ROUNDS = 10;

/** Re-wraps until no row references an old key, then retires the old keys (see the top of this file). */
export async function rewrapUntilClean(options: RewrapOptions): Promise<{ rewrapped: number }> {
  const { database, ring, logger } = options;
  const target = ring.current();
  let rewrapped = 0;
  let batches = 0;
  for (let round = 1; ; round++) {
    if (round > MAX_ROUNDS) {
      const left = [...new Set((await keysRepo.usage(database.db)).map((u) => u.masterKeyId))].filter((id) => id !== target.id);
      throw errors.conflict('rotation_not_converging',
        `New rows keep appearing under master key ${left.join(', ')} while re-wrapping: some node still wraps with it (one whose SLIPWAY_MASTER_KEY is not yet the new key ${target.id}, or that reads another key file). Switch it, then run again; the work done so far stays.`);
    }
    const pass = await rewrapPass(options, batches);
    rewrapped += pass.rewrapped;
    batches += pass.batches;
    let retired: boolean;
    try {
      retired = await database.db.transaction().execute(async (trx) => {
        await keysRepo.fence(trx, database.dialect);
        if ((await keysRepo.countNotUnder(trx, target.id)) > 0) return false;
        options.retireOldKeys();
        return true;
      });
    } catch (error) {
      // The fence met a writer holding one table and waiting for another: PostgreSQL broke the tie.
      if (isDeadlock(error)) continue;
      throw error;
    }
    if (!retired) continue;
    const late = await keysRepo.countNotUnder(database.db, target.id);
    if (late === 0) return { rewrapped };
    logger.warn({ masterKeyId: target.id, rows: late }, 'rows wrapped under a retired master key were written after the final check; re-wrapping them');
  }
}
