// An event's subject (`slipway events --subject`, the history of one secret or deployment) was
// looked for by reading the organization's log in commit order until a page of that subject's
// events was found: the whole log for a subject with fewer, two seconds once an organization has a
// few million. The subject gets an index of its own, in commit order after it (as events_org_seq
// and events_org_tx keep the whole log), so that a page of one subject's events is one range read.
import type { MigrationStep } from './types.js';

export const eventsSubjectIndex: MigrationStep = {
  name: '0028-events-subject-index',
  async up(db, t) {
    const order = t.dialect === 'postgres' ? ['tx_id', 'id'] : ['seq'];
    await db.schema.createIndex('events_org_subject').on('events').columns(['org_id', 'subject_id', ...order]).execute();
  },
};
