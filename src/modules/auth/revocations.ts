// Revoked token ids. The table is shared by every node; each node keeps the live ones in memory
// and picks up revocations made elsewhere within a few seconds.
import type { Db, Executor } from '../../platform/db/database.js';
import { nowMs, nowIso } from '../../platform/clock.js';

/**
 * How long a revocation is kept past its token's expiry: the verifier accepts a token until a few
 * seconds after it (clock tolerance), and a revocation forgotten earlier would let it back in.
 */
export const KEPT_AFTER_EXPIRY_MS = 60_000;

const horizon = () => new Date(nowMs() - KEPT_AFTER_EXPIRY_MS).toISOString();

export function createRevocationList(deps: { db: Db; refreshMs?: number }) {
  const refreshMs = deps.refreshMs ?? 5_000;
  const revoked = new Map<string, number>(); // jti → expiry (ms)
  let lastSync = 0;
  let inflight: Promise<void> | null = null;

  /**
   * Reads every live revocation, not those since the last read: a watermark taken from one node's
   * clock misses what another node, whose clock is behind, or a slow transaction, wrote "earlier".
   * Live revocations are few (they end when their tokens expire), and one is never undone, so what
   * is read is added to what this node knows.
   */
  async function sync(): Promise<void> {
    const rows = await deps.db.selectFrom('revoked_tokens').select(['jti', 'expires_at']).where('expires_at', '>', horizon()).execute();
    for (const row of rows) revoked.set(row.jti, Date.parse(row.expires_at));
    const now = nowMs();
    lastSync = now;
    for (const [jti, exp] of revoked) if (exp + KEPT_AFTER_EXPIRY_MS < now) revoked.delete(jti);
  }

  /** Whether `jti` is revoked, or undefined when the list is due for a refresh first. */
  function revokedNow(jti: string): boolean | undefined {
    return nowMs() - lastSync > refreshMs ? undefined : revoked.has(jti);
  }

  return {
    revokedNow,
    async isRevoked(jti: string): Promise<boolean> {
      const known = revokedNow(jti);
      if (known !== undefined) return known;
      inflight ??= sync().finally(() => { inflight = null; });
      await inflight;
      return revoked.has(jti);
    },
    /**
     * Records a revocation, in `trx` when given (the caller's event commits with it); true when this
     * call revoked the token, false when it was revoked already.
     */
    async revoke(entry: { jti: string; serviceUserId: string; expiresAt: number }, trx: Executor = deps.db): Promise<boolean> {
      const now = nowIso();
      const inserted = await trx.insertInto('revoked_tokens')
        .values({ jti: entry.jti, service_user_id: entry.serviceUserId, expires_at: new Date(entry.expiresAt).toISOString(), revoked_at: now })
        .onConflict((oc) => oc.column('jti').doNothing())
        .executeTakeFirst();
      return Number(inserted.numInsertedOrUpdatedRows ?? 0) === 1;
    },
    /** Once the revocation has committed: this node refuses the token from now on. */
    remember(entry: { jti: string; expiresAt: number }): void {
      revoked.set(entry.jti, entry.expiresAt);
    },
    async prune(): Promise<void> {
      await deps.db.deleteFrom('revoked_tokens').where('expires_at', '<', horizon()).execute();
    },
  };
}

export type RevocationList = ReturnType<typeof createRevocationList>;
