import type { Db } from '../../platform/db/database.js';
import { pageRequest, toPage, type Page } from '../../platform/pagination.js';
import { eventsRepo, type EventRow } from './events.repo.js';
import type { Event } from './events.schemas.js';

function toEvent(row: EventRow): Event {
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

export function createEventsService(deps: { db: Db }) {
  return {
    async list(orgId: string, query: { limit?: number; cursor?: string; type?: string; subject?: string }): Promise<Page<Event>> {
      const page = pageRequest(query);
      const rows = await eventsRepo.list(deps.db, orgId, { ...page, type: query.type, subjectId: query.subject });
      const result = toPage(rows, page.limit, (r) => r.id);
      return { items: result.items.map(toEvent), nextCursor: result.nextCursor };
    },
  };
}

export type EventsService = ReturnType<typeof createEventsService>;
