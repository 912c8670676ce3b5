// An event type (`GET …/events?type=`, the console's filter of the log) and an actor (`--actor`, what
// one service user did) were looked for as a subject was before 0028: by reading the organization's
// log in commit order until a page of them was found, the whole log for a type or an actor with
// few events (seconds once an organization has a few million). Each gets an index, in commit order
// after it. Events are appended in commit order, so each new entry goes at the end of its type's
// and its actor's range.
import type { MigrationStep } from './types.js';

export const eventsTypeActorIndexes: MigrationStep = {
  name: '0030-events-type-actor-indexes',
  async up(db, t) {
    const order = t.dialect === 'postgres' ? ['tx_id', 'id'] : ['seq'];
    await db.schema.createIndex('events_org_type').on('events').columns(['org_id', 'type', ...order]).execute();
    await db.schema.createIndex('events_org_actor').on('events').columns(['org_id', 'actor_id', ...order]).execute();
  },
};
