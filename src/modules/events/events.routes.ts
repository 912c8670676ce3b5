import type { App } from '../../http/app-types.js';
import { OrgParams } from '../../http/schemas.js';
import { EVENT_TYPES_TEXT, EventList, EventListQuery } from './events.schemas.js';
import type { EventsService } from './events.service.js';

export function eventsRoutes(app: App, deps: { events: EventsService }): void {
  app.get('/v1/orgs/:orgId/events', {
    config: { auth: 'admin', operation: 'events.list' },
    schema: {
      tags: ['events'],
      summary: 'Page through the audit log of an organization in commit order, oldest or newest first',
      description: 'Every change appends one event in its own transaction: who (`actor`), which request (`requestId`, the `X-Request-Id`), '
        + `what (\`type\`, \`subject\`) and \`data\` without secret values. The types: ${EVENT_TYPES_TEXT}. `
        + '`type` takes one of them or a family (`secret.*`; a type not listed matches nothing), `subject` a subject id. '
        + '`order=newest` lists what happened lately first. '
        + 'To follow the log, keep `resumeCursor` (present on every page, the last one too) and pass it as `cursor` later: only events appended since come back, oldest first.',
      params: OrgParams,
      querystring: EventListQuery,
      response: { 200: EventList },
    },
  }, async (req) => {
    const page = await deps.events.list(req.org!.id, req.query);
    return { events: page.items, nextCursor: page.nextCursor, resumeCursor: page.resumeCursor };
  });
}
