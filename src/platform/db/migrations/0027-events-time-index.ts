// The event log read from a time on (`since`, `until`: `slipway events --since 1h`, an audit of an
// hour last night) was read from the organization's first event up to that time, since events are
// kept in commit order: a second or more once an organization has a few million. Their time gets an
// index of its own, and the database takes it where the time bounds leave few events to sort.
import type { MigrationStep } from './types.js';

export const eventsTimeIndex: MigrationStep = {
  name: '0027-events-time-index',
  async up(db) {
    await db.schema.createIndex('events_org_time').on('events').columns(['org_id', 'created_at']).execute();
  },
};
