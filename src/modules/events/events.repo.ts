import type { Executor } from '../../platform/db/database.js';
import type { EventsTable } from '../../platform/db/schema.js';

export type EventRow = EventsTable;

export const eventsRepo = {
  async insert(db: Executor, rows: EventRow[]): Promise<void> {
    // One statement per few hundred rows keeps big batches under SQLite's parameter limit.
    for (let i = 0; i < rows.length; i += 500) {
      await db.insertInto('events').values(rows.slice(i, i + 500)).execute();
    }
  },

  async list(db: Executor, orgId: string, opts: { after: string | null; limit: number; type?: string | undefined; subjectId?: string | undefined }): Promise<EventRow[]> {
    let q = db.selectFrom('events').selectAll().where('org_id', '=', orgId);
    if (opts.after !== null) q = q.where('id', '>', opts.after);
    if (opts.type !== undefined) {
      // `secret.*` selects a family of types.
      q = opts.type.endsWith('.*') ? q.where('type', 'like', `${opts.type.slice(0, -1)}%`) : q.where('type', '=', opts.type);
    }
    if (opts.subjectId !== undefined) q = q.where('subject_id', '=', opts.subjectId);
    return q.orderBy('id', 'asc').limit(opts.limit + 1).execute();
  },
};
