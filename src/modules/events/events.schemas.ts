import { Type, type Static } from '@sinclair/typebox';
import { PageQuery } from '../../http/schemas.js';

export const EventSchema = Type.Object({
  id: Type.String({ description: 'evt_…, time-ordered' }),
  type: Type.String({ examples: ['secret.created'] }),
  actor: Type.Union([Type.String(), Type.Null()], { description: 'Service user id, the `sub` of an external issuer\'s token, or `cli` for the command line.' }),
  requestId: Type.Union([Type.String(), Type.Null()]),
  subject: Type.Object({ type: Type.String(), id: Type.String() }),
  data: Type.Record(Type.String(), Type.Unknown()),
  createdAt: Type.String({ format: 'date-time' }),
});
export type Event = Static<typeof EventSchema>;

export const EventListQuery = Type.Composite([
  PageQuery,
  Type.Object({
    type: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'An event type, or a family such as `secret.*`.' })),
    subject: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'Only events about this subject id.' })),
  }),
]);

export const EventList = Type.Object({
  events: Type.Array(EventSchema),
  nextCursor: Type.Union([Type.String(), Type.Null()], { description: 'The next page, null on the last.' }),
  resumeCursor: Type.Union([Type.String(), Type.Null()], {
    description: 'After this page\'s last event (the cursor given, when none came after it): pass it as `cursor` later to read only what was appended since. Null only when no event matched (none in the log, or none of the `type` or `subject` asked for) and no cursor was given.',
  }),
});
