import type { Executor } from '../../platform/db/database.js';

export const instanceRepo = {
  async getSetting(db: Executor, key: string): Promise<string | null> {
    const row = await db.selectFrom('instance_settings').select('value').where('key', '=', key).executeTakeFirst();
    return row?.value ?? null;
  },

  /**
   * Holds the named lock until the caller's transaction ends: a row written in it, which a second
   * transaction writing it waits for (PostgreSQL's row lock; SQLite has one writer anyway). For the
   * read-then-write changes that two nodes must not make at once.
   */
  async lock(trx: Executor, name: string): Promise<void> {
    const key = `lock:${name}`;
    await trx.insertInto('instance_settings').values({ key, value: '' }).onConflict((oc) => oc.column('key').doNothing()).execute();
    await trx.updateTable('instance_settings').set({ value: '' }).where('key', '=', key).execute();
  },

  /** Replaces the value only if it is still `expected`; whether it did. */
  async replaceSetting(db: Executor, key: string, expected: string, value: string): Promise<boolean> {
    const result = await db.updateTable('instance_settings').set({ value }).where('key', '=', key).where('value', '=', expected).executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  },

  /** Sets the value unless one is already there; returns whichever value is stored afterwards. */
  async setSettingOnce(db: Executor, key: string, value: string): Promise<string> {
    await db.insertInto('instance_settings').values({ key, value }).onConflict((oc) => oc.column('key').doNothing()).execute();
    return (await instanceRepo.getSetting(db, key))!;
  },

  async getKey(db: Executor, name: string) {
    return db.selectFrom('instance_keys').selectAll().where('name', '=', name).executeTakeFirst();
  },

  async insertKeyOnce(db: Executor, row: { name: string; sealed: Buffer; master_key_id: string; created_at: string }): Promise<void> {
    await db.insertInto('instance_keys').values(row).onConflict((oc) => oc.column('name').doNothing()).execute();
  },
};
