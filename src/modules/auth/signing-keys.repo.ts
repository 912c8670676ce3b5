import { sql } from 'kysely';
import type { Executor } from '../../platform/db/database.js';
import type { SigningKeysTable } from '../../platform/db/schema.js';

export type SigningKeyRow = SigningKeysTable;

export const signingKeysRepo = {
  /**
   * The keys to publish: the next one (staged), the one that signs now, and those whose tokens may
   * still be live (retired after `retiredAfter`), none revoked; newest first, the staged ones
   * before the rest.
   */
  async listUsable(db: Executor, retiredAfter: string): Promise<SigningKeyRow[]> {
    return db.selectFrom('signing_keys').selectAll()
      .where('revoked_at', 'is', null)
      .where((eb) => eb.or([eb('retired_at', 'is', null), eb('retired_at', '>', retiredAfter)]))
      .orderBy(sql`activated_at is null`, 'desc')
      .orderBy('activated_at', 'desc')
      .orderBy('created_at', 'desc')
      .orderBy('kid', 'desc')
      .execute();
  },

  /** A staged key starts signing. */
  async activate(db: Executor, kid: string, at: string): Promise<void> {
    await db.updateTable('signing_keys').set({ activated_at: at }).where('kid', '=', kid).where('activated_at', 'is', null).execute();
  },

  /** Every key, in the order they signed (the staged ones last), oldest first. */
  async listAll(db: Executor): Promise<SigningKeyRow[]> {
    return db.selectFrom('signing_keys').selectAll()
      .orderBy(sql`activated_at is null`, 'asc').orderBy('activated_at', 'asc').orderBy('created_at', 'asc').orderBy('kid', 'asc')
      .execute();
  },

  async insert(db: Executor, row: SigningKeyRow): Promise<void> {
    await db.insertInto('signing_keys').values(row).execute();
  },

  /** Revokes these keys (retiring any that still signed); those revoked already keep their time. */
  async revoke(db: Executor, kids: string[], at: string): Promise<void> {
    if (kids.length === 0) return;
    await db.updateTable('signing_keys').set((eb) => ({ revoked_at: at, retired_at: eb.fn.coalesce('retired_at', eb.val(at)) }))
      .where('kid', 'in', kids).where('revoked_at', 'is', null)
      .execute();
  },

  /** Records that tokens signed with this key may live `ttlSeconds`, unless a longer lifetime is recorded already. */
  async recordTokenTtl(db: Executor, kid: string, ttlSeconds: number): Promise<void> {
    await db.updateTable('signing_keys').set({ token_ttl_seconds: ttlSeconds })
      .where('kid', '=', kid)
      .where((eb) => eb.or([eb('token_ttl_seconds', 'is', null), eb('token_ttl_seconds', '<', ttlSeconds)]))
      .execute();
  },

  async retireActive(db: Executor, exceptKid: string, at: string): Promise<void> {
    await db.updateTable('signing_keys').set({ retired_at: at })
      .where('retired_at', 'is', null).where('activated_at', 'is not', null).where('kid', '!=', exceptKid)
      .execute();
  },
};
