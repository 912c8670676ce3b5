import type { Db, Dialect } from '../../platform/db/database.js';
import { errors } from '../../platform/errors.js';
import { pageRequest, toPage, type Page } from '../../platform/pagination.js';
import { eventsRepo, type EventPosition, type StoredEvent } from './events.repo.js';
import type { Event } from './events.schemas.js';

function toEvent(row: StoredEvent): Event {
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

/** The sort key a cursor carries: the SQLite sequence number, or PostgreSQL's `<transaction id>.<event id>`. */
function keyOf(dialect: Dialect, row: StoredEvent): string {
  return dialect === 'postgres' ? `${String(row.tx_id)}.${row.id}` : String(row.seq);
}

export function createEventsService(deps: { db: Db; dialect: Dialect }) {
  /** The position a cursor's key names. Cursors from before events were kept in commit order carry an event id. */
  async function positionOf(orgId: string, key: string): Promise<EventPosition> {
    if (key.startsWith('evt_')) {
      const position = await eventsRepo.positionOf(deps.db, deps.dialect, orgId, key);
      if (position === undefined) throw errors.invalidCursor();
      return position;
    }
    if (deps.dialect === 'postgres') {
      const match = /^(\d{1,20})\.(evt_[0-9a-z]+)$/.exec(key);
      if (match === null) throw errors.invalidCursor();
      return { txId: match[1]!, id: match[2]! };
    }
    if (!/^\d{1,15}$/.test(key)) throw errors.invalidCursor();
    return { seq: Number(key) };
  }

  return {
    /** The organization's events in the order they were committed, oldest first. */
    async list(orgId: string, query: { limit?: number; cursor?: string; type?: string; subject?: string }): Promise<Page<Event>> {
      const page = pageRequest(query);
      const after = page.after === null ? null : await positionOf(orgId, page.after);
      const rows = await eventsRepo.list(deps.db, deps.dialect, orgId, { after, limit: page.limit, type: query.type, subjectId: query.subject });
      const result = toPage(rows, page.limit, (r) => keyOf(deps.dialect, r));
      return { items: result.items.map(toEvent), nextCursor: result.nextCursor };
    },
  };
}

export type EventsService = ReturnType<typeof createEventsService>;
