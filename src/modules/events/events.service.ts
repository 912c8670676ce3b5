import type { Db, Dialect, Executor } from '../../platform/db/database.js';
import { utcIso } from '../../platform/clock.js';
import { errors } from '../../platform/errors.js';
import { cursorList, encodeCursor, pageRequest, toPage, type Page } from '../../platform/pagination.js';
import { instanceRepo } from '../instance/instance.repo.js';
import { eventsRepo, type EventPosition, type StoredEvent } from './events.repo.js';
import type { Event } from './events.schemas.js';

export function toEvent(row: StoredEvent): Event {
  return {
    id: row.id,
    type: row.type,
    actor: row.actor_id,
    requestId: row.request_id,
    subject: { type: row.subject_type, id: row.subject_id },
    data: JSON.parse(row.data) as Record<string, unknown>,
    createdAt: row.created_at,
  };
}

/**
 * The sort key a cursor carries: the event's id, whose place is looked up when the cursor comes
 * back. Transaction ids (PostgreSQL) mean something only in the cluster that gave them, and
 * sequence numbers (SQLite) only in the file that gave them: after a restore from a backup they are
 * given again, to other events, and a cursor that held one would pass those by without a word. An
 * event the database does not have (one made after the backup) is a 400 instead.
 */
function keyOf(row: StoredEvent): string {
  return row.id;
}

export function createEventsService(deps: { db: Db; dialect: Dialect }) {
  /**
   * The position a cursor's key names: an event id, or on SQLite a sequence number (cursors made
   * before they named events). Either is an event of this organization's: the sequence is the
   * instance's, and a number of another's would tell how many events the others wrote.
   */
  async function positionOf(orgId: string, key: string): Promise<EventPosition> {
    const named = /^evt_[0-9a-z]{1,40}$/.test(key) ? key : deps.dialect === 'sqlite' && /^\d{1,15}$/.test(key) ? { seq: Number(key) } : null;
    const position = named === null ? undefined : await eventsRepo.positionOf(deps.db, deps.dialect, orgId, named);
    if (position === undefined) throw errors.invalidCursor();
    return position;
  }

  return {
    /**
     * After a restore into another PostgreSQL cluster, puts the restored events back in order (see
     * the repository). In the same transaction, and before, `followers` move the places they keep
     * in the log (webhooks), while the order those places were taken in can still be read; 0 on
     * SQLite. Nodes that start together do it once: the first holds the others until it is done.
     */
    async renumberRestored(followers: (trx: Executor) => Promise<void> = async () => {}): Promise<number> {
      if (deps.dialect !== 'postgres' || !(await eventsRepo.restoredFromElsewhere(deps.db))) return 0;
      return deps.db.transaction().execute(async (trx) => {
        await instanceRepo.lock(trx, 'events_renumbering');
        if (!(await eventsRepo.restoredFromElsewhere(trx))) return 0;
        await followers(trx);
        return eventsRepo.renumberRestored(trx);
      });
    },

    /**
     * The organization's events in the order they were committed, oldest first, or newest first.
     * `resumeCursor` follows the log: an oldest-first cursor after the newest event the page has
     * seen (oldest first, the cursor given when no event came after it), so a client that keeps it
     * reads, later, only what was appended since; `nextCursor` is null on the last page, like every
     * list's.
     */
    async list(orgId: string, query: { limit?: number; cursor?: string; type?: string; subject?: string; actor?: string; since?: string; until?: string; order?: 'oldest' | 'newest' }): Promise<Page<Event> & { resumeCursor: string | null }> {
      const newestFirst = query.order === 'newest';
      // Times as the log keeps them (ISO 8601 UTC, milliseconds), which compare as text; a leap
      // second (`23:59:60`, which the date-time format lets by) as its second's last millisecond.
      const [since, until] = (['since', 'until'] as const).map((name) => {
        const given = query[name];
        if (given === undefined) return undefined;
        const at = utcIso(given);
        if (at === undefined) throw errors.invalidRequest(`\`${name}\` is not a time that can be read: send an RFC 3339 date-time such as 2026-01-01T00:00:00Z.`, [{ pointer: `/query/${name}`, message: 'must be an RFC 3339 date-time' }]);
        return at;
      });
      const filters = { org: orgId, type: query.type, subject: query.subject, actor: query.actor, since, until };
      // Cursors from before they were bound to their filters still resume the log. Oldest-first
      // cursors leave the order out of their scope: those made before there was a choice stay good.
      const following = cursorList('events', filters, { acceptsUnscoped: true });
      const list = newestFirst ? cursorList('events', { ...filters, order: 'newest' }) : following;
      const page = pageRequest(list, query);
      const after = page.after === null ? null : await positionOf(orgId, page.after);
      const rows = await eventsRepo.list(deps.db, deps.dialect, orgId, { after, newestFirst, limit: page.limit, type: query.type, subjectId: query.subject, actorId: query.actor, since, until });
      const result = toPage(list, rows, page.limit, keyOf);
      const newest = newestFirst ? result.items[0] : result.items.at(-1);
      const resumeCursor = newest !== undefined ? encodeCursor(following, keyOf(newest)) : newestFirst ? null : (query.cursor ?? null);
      return { items: result.items.map(toEvent), nextCursor: result.nextCursor, resumeCursor };
    },
  };
}

export type EventsService = ReturnType<typeof createEventsService>;
