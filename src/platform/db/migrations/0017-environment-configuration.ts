// An environment's own configuration: plain variables and secret references that every deployment
// into it gets, laid over its service's (JSON, as a service's spec is kept).
import type { MigrationStep } from './types.js';

export const environmentConfiguration: MigrationStep = {
  name: '0017-environment-configuration',
  async up(db) {
    await db.schema.alterTable('environments').addColumn('variables', 'text', (c) => c.notNull().defaultTo('{}')).execute();
    await db.schema.alterTable('environments').addColumn('secrets', 'text', (c) => c.notNull().defaultTo('[]')).execute();
  },
};
