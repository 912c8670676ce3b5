import type { Executor } from '../../platform/db/database.js';

export const instanceRepo = {
  async getSetting(db: Executor, key: string): Promise<string | null> {
    const row = await db.selectFrom('instance_settings').select('value').where('key', '=', key).executeTakeFirst();
    return row?.value ?? null;
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
