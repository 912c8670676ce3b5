import { runPrepared, type Executor } from '../../platform/db/database.js';
import type { OrganizationsTable } from '../../platform/db/schema.js';
import { errors } from '../../platform/errors.js';

export type OrgRow = OrganizationsTable;

export const orgsRepo = {
  /**
   * PostgreSQL: holds the organization's row (FOR KEY SHARE, as a foreign key to it would) until the
   * transaction ends, taken before a row of the organization is locked for a change. An
   * organization being deleted holds its row and then deletes the rows it has: a change that held
   * one of those while it waited for the organization's (the foreign key of the event it appends)
   * would deadlock with the deletion. Taken in the same order, it waits for the deletion, and then
   * answers that the organization is gone (404).
   */
  async holdForChange(db: Executor, orgId: string): Promise<void> {
    const [row] = await runPrepared(db, 'organizations.holdForChange', [orgId], () => db.selectFrom('organizations').select('deleted_at').where('id', '=', orgId).forKeyShare());
    if (row === undefined || row.deleted_at !== null) throw errors.notFound('organization', orgId);
  },

  async insert(db: Executor, row: OrgRow): Promise<void> {
    await db.insertInto('organizations').values(row).execute();
  },

  async findByIdOrSlug(db: Executor, idOrSlug: string): Promise<OrgRow | undefined> {
    const column = idOrSlug.startsWith('org_') ? 'id' : 'slug';
    return db.selectFrom('organizations').selectAll().where(column, '=', idOrSlug).where('deleted_at', 'is', null).executeTakeFirst();
  },

  async findByExternalId(db: Executor, externalId: string): Promise<OrgRow | undefined> {
    return db.selectFrom('organizations').selectAll().where('external_id', '=', externalId).where('deleted_at', 'is', null).executeTakeFirst();
  },

  async list(db: Executor, opts: { after: string | null; limit: number }): Promise<OrgRow[]> {
    let q = db.selectFrom('organizations').selectAll().where('deleted_at', 'is', null);
    if (opts.after !== null) q = q.where('id', '>', opts.after);
    return q.orderBy('id', 'asc').limit(opts.limit + 1).execute();
  },

  /**
   * Holds the organization's row until the transaction ends (an UPDATE that changes nothing, which
   * works alike on both databases): changes that must see each other's outcome, such as removing
   * owners, take it first and so run one after another. One deleted meanwhile (the change waited
   * for its deletion) is the 404 its requests get from then on.
   */
  async hold(db: Executor, id: string): Promise<void> {
    const held = await db.updateTable('organizations').set((eb) => ({ updated_at: eb.ref('updated_at') })).where('id', '=', id).where('deleted_at', 'is', null).executeTakeFirst();
    if (Number(held.numUpdatedRows) === 0) throw errors.notFound('organization', id);
  },

  async update(db: Executor, id: string, patch: Partial<Pick<OrgRow, 'slug' | 'name' | 'external_id'>>, at: string): Promise<OrgRow | undefined> {
    return db.updateTable('organizations').set({ ...patch, updated_at: at }).where('id', '=', id).returningAll().executeTakeFirst();
  },

  /** Leaves the row of a deleted organization, its slug its id (the slug it had is retired first) and unlinked. */
  async markDeleted(db: Executor, id: string, at: string): Promise<void> {
    await db.updateTable('organizations').set({ slug: id, external_id: null, deleted_at: at, updated_at: at }).where('id', '=', id).execute();
  },

  /** The organization a slug was retired by, if one was. */
  async retiredSlug(db: Executor, slug: string): Promise<{ org_id: string; retired_at: string } | undefined> {
    return db.selectFrom('retired_org_slugs').select(['org_id', 'retired_at']).where('slug', '=', slug).executeTakeFirst();
  },

  async retireSlug(db: Executor, slug: string, orgId: string, at: string): Promise<void> {
    await db.insertInto('retired_org_slugs').values({ slug, org_id: orgId, retired_at: at })
      .onConflict((oc) => oc.column('slug').doUpdateSet({ org_id: orgId, retired_at: at })).execute();
  },

  /** The slugs an organization gave up, reserved to it. */
  async retiredSlugsOf(db: Executor, orgId: string): Promise<string[]> {
    return (await db.selectFrom('retired_org_slugs').select('slug').where('org_id', '=', orgId).orderBy('slug').execute()).map((r) => r.slug);
  },

  /** An organization taking back a slug it gave up. */
  async reclaimSlug(db: Executor, slug: string, orgId: string): Promise<void> {
    await db.deleteFrom('retired_org_slugs').where('slug', '=', slug).where('org_id', '=', orgId).execute();
  },
};
