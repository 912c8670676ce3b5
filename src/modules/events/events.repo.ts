import { insertRows, type Executor } from '../../platform/db/database.js';
import type { EventsTable } from '../../platform/db/schema.js';

export type EventRow = EventsTable;

export const eventsRepo = {
  async insert(db: Executor, rows: EventRow[]): Promise<void> {
    await insertRows(db, 'events', rows);
  },

  async list(db: Executor, orgId: string, opts: { after: string | null; limit: number; type?: string | undefined; subjectId?: string | undefined }): Promise<EventRow[]> {
    let q = db.selectFrom('events').selectAll().where('org_id', '=', orgId);
    if (opts.after !== null) q = q.where('id', '>', opts.after);
    if (opts.type !== undefined) {
      // `secret.*` selects a family of types. The prefix is compared as it is: LIKE would read `_`
      // (as in `service_user.*`) and `%` as wildcards, and ignores case in SQLite.
      const prefix = opts.type.endsWith('.*') ? opts.type.slice(0, -1) : null;
      q = prefix === null ? q.where('type', '=', opts.type)
        : q.where((eb) => eb(eb.fn<string>('substr', [eb.ref('type'), eb.lit(1), eb.lit(prefix.length)]), '=', prefix));
    }
    if (opts.subjectId !== undefined) q = q.where('subject_id', '=', opts.subjectId);
    return q.orderBy('id', 'asc').limit(opts.limit + 1).execute();
  },
};
