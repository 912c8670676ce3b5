// The runners list: which runner processes an organization has, and whether they are up.
import { Type, type Static } from '@sinclair/typebox';
import { NullableCursor, PageQuery, Timestamp } from '../../http/schemas.js';

export const RUNNER_STATES = ['online', 'offline'] as const;
export type RunnerState = (typeof RUNNER_STATES)[number];

export const RunnerSchema = Type.Object({
  host: Type.String({ description: 'The id the runner process goes by (`host` in its claims and reports): new at each start, so a runner started again is another entry.' }),
  state: Type.Union(RUNNER_STATES.map((s) => Type.Literal(s)), {
    description: '`online`: heard from (a claim, a heartbeat, a report) within the last `onlineWithinSeconds`, and has not said it stopped; `offline`: not since, or it said it stopped (`stoppedAt`).',
  }),
  serviceUser: Type.Object({ id: Type.String(), name: Type.String() }, { description: 'The runner service user it signs in as.' }),
  environments: Type.Union([Type.Array(Type.Object({ id: Type.String(), name: Type.String() })), Type.Null()], {
    description: 'The environments it takes deployments from: those it last asked for, within those its service user is kept to; null: all of the organization\'s. Environments deleted since are left out.',
  }),
  hostname: Type.Union([Type.String(), Type.Null()], { description: 'The host name of its machine, as it says (null: it does not).' }),
  version: Type.Union([Type.String(), Type.Null()], { description: 'Its version, as it says (null: it does not).' }),
  address: Type.Union([Type.String(), Type.Null()], { description: 'The IP address it last called from (behind a proxy, as SLIPWAY_TRUST_PROXY allows).' }),
  firstSeenAt: Timestamp,
  lastSeenAt: Timestamp,
  stoppedAt: Type.Union([Timestamp, Type.Null()], { description: 'When it said it stopped (a runner stopped cleanly says so: it is offline at once); null: it did not say, and is offline only once not heard from for `onlineWithinSeconds`.' }),
  inProgress: Type.Array(Type.String(), { description: 'Ids of the deployments it is carrying out now.' }),
  serving: Type.Integer({ description: 'How many succeeded deployments it runs the processes of.' }),
});
export type Runner = Static<typeof RunnerSchema>;

export const RunnerListQuery = Type.Composite([PageQuery, Type.Object({
  environment: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'Only runners that take deployments of this environment (id or name), those that take all included.' })),
  state: Type.Optional(Type.Union(RUNNER_STATES.map((s) => Type.Literal(s)), { description: 'Only runners in this state.' })),
})]);

export const RunnerList = Type.Object({
  runners: Type.Array(RunnerSchema, { description: 'Ordered by `host`.' }),
  onlineWithinSeconds: Type.Integer({ description: 'A runner heard from within this many seconds is online: SLIPWAY_RUNNER_HOST_TIMEOUT_SECONDS, and never less than 40 (a claim waits up to 30 s).' }),
  nextCursor: NullableCursor,
});
