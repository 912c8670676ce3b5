import { Type, type Static } from '@sinclair/typebox';
import { PageQuery } from '../../http/schemas.js';

/** Every event type, by family: what the events API documents, and what a webhook may subscribe to. */
export const EVENT_TYPES: Readonly<Record<string, readonly string[]>> = {
  organization: ['created', 'updated', 'deleted'],
  service_user: ['created', 'updated', 'role_changed', 'environments_changed', 'disabled', 'enabled', 'deleted', 'secret_added', 'secret_removed', 'secret_rotated', 'token_revoked'],
  secret: ['created', 'updated', 'revealed', 'deleted', 'restored', 'destroyed', 'purged'],
  environment: ['created', 'updated', 'locked', 'unlocked', 'deleted'],
  service: ['created', 'updated', 'deleted'],
  deployment: ['created', 'state_changed', 'adopted', 'process_exited', 'process_stopped'],
  webhook: ['created', 'updated', 'deleted', 'secret_rotated', 'disabled'],
};

/** The types as the documentation lists them: `secret.created|updated|…`, separated by `; `. */
export const EVENT_TYPES_TEXT = Object.entries(EVENT_TYPES).map(([family, names]) => `\`${family}.${names.join('|')}\``).join('; ');

/** True when `type` is a type (`secret.created`) or a family (`secret.*`) of EVENT_TYPES. */
export function isKnownEventType(type: string): boolean {
  const dot = type.indexOf('.');
  const names = dot > 0 ? EVENT_TYPES[type.slice(0, dot)] : undefined;
  if (names === undefined || !Object.hasOwn(EVENT_TYPES, type.slice(0, dot))) return false;
  const name = type.slice(dot + 1);
  return name === '*' || names.includes(name);
}

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
    actor: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'Only events of this actor: a service user id, the `sub` of an external issuer\'s token, or `cli`.' })),
    since: Type.Optional(Type.String({ format: 'date-time', description: 'Only events made at or after this time (RFC 3339).' })),
    until: Type.Optional(Type.String({ format: 'date-time', description: 'Only events made before this time (RFC 3339).' })),
    order: Type.Optional(Type.Union([Type.Literal('oldest'), Type.Literal('newest')], {
      default: 'oldest',
      description: '`oldest` first (the default: the order to follow the log in) or `newest` first (what happened lately). A cursor is valid only with the order it was made in.',
    })),
  }),
]);

export const EventList = Type.Object({
  events: Type.Array(EventSchema),
  nextCursor: Type.Union([Type.String(), Type.Null()], { description: 'The next page, null on the last.' }),
  resumeCursor: Type.Union([Type.String(), Type.Null()], {
    description: 'An oldest-first cursor after the newest event this page has seen: pass it as `cursor` later (without `order`, or with `order=oldest`) to read only what was appended since. '
      + 'Oldest first, that is this page\'s last event, or the cursor given when none came after it; null only when no event matched (none in the log, or none of the `type` or `subject` asked for) and no cursor was given. '
      + 'Newest first, it is this page\'s first event (on the first page, the newest of the log), and null on an empty page.',
  }),
});
