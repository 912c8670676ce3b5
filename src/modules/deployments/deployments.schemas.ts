// Deployment shapes, shared by the API routes and the runner protocol.
import { Type, type Static } from '@sinclair/typebox';
import { NullableCursor, optionalBody, OrgIdParam, PageQuery, SequenceNumber, Timestamp } from '../../http/schemas.js';
import type { Limits } from '../../platform/config.js';
import { DeploymentSpec, SPEC_LIMITS, variablesSchema } from '../services/services.schemas.js';
import { DEPLOYMENT_STATES } from './deployment-states.js';

export const DeploymentStateSchema = Type.Union(DEPLOYMENT_STATES.map((s) => Type.Literal(s)), {
  description: 'queued → in_progress → succeeded | failed; queued or in_progress → cancelled; succeeded → superseded when a newer one succeeds; in_progress → queued when its lease expires, or its runner gives it back, with attempts left.',
});

export const ProcessExit = Type.Object({
  code: Type.Union([Type.Integer({ minimum: -2147483648, maximum: 4294967295 }), Type.Null()], { description: 'Its exit code (32 bits, as an operating system gives it); null when a signal ended it.' }),
  signal: Type.Union([Type.String({ pattern: '^SIG[A-Z0-9]{1,12}$' }), Type.Null()], { description: 'The signal that ended it (`SIGKILL`), or null.' }),
  at: Timestamp,
}, { additionalProperties: false });
export type ProcessExitT = Static<typeof ProcessExit>;

export const ProcessAddress = Type.Object({
  hostname: Type.String({ minLength: 1, maxLength: 253, pattern: '^[A-Za-z0-9._-]+$', description: 'The host name of the runner\'s machine.' }),
  port: Type.Integer({ minimum: 1, maximum: 65535, description: 'The port the runner gave the process (its PORT).' }),
}, { additionalProperties: false, description: 'Where the process answers, as its runner reported it.' });

/** What a runner reports of a process it runs. */
export const REPORTED_PROCESS_STATES = ['running', 'restarting'] as const;
export const ReportedProcessState = Type.Union(REPORTED_PROCESS_STATES.map((s) => Type.Literal(s)), {
  description: '`running`: up since it was last started; `restarting`: it exited on its own and its runner starts it again, after a pause that doubles with each exit in a row (1 s up to a minute).',
});

export const DeploymentProcess = Type.Object({
  state: Type.Union([...REPORTED_PROCESS_STATES, 'stopped' as const].map((s) => Type.Literal(s)), {
    description: `${ReportedProcessState.description} \`stopped\`: its runner went away and it cannot be started again (\`reason\` says why): deploy the service again.`,
  }),
  exits: Type.Integer({ minimum: 0, description: 'How often it exited on its own since its runner started it (a crash loop counts up here).' }),
  lastExit: Type.Union([ProcessExit, Type.Null()], { description: 'Its last exit on its own.' }),
  address: Type.Optional({ ...ProcessAddress, description: `${ProcessAddress.description} Absent until its runner says (runners older than this field do not).` }),
  reportedAt: { ...Timestamp, description: 'When its runner last reported how it is doing (every few seconds while the runner is up); for `stopped`, when that was found.' },
}, { description: 'Serving (`succeeded`) deployments: how the process is doing, as its runner last reported it. Absent until a runner has reported it, and after its runner let it go.' });
export type DeploymentProcessT = Static<typeof DeploymentProcess>;

export const DeploymentSchema = Type.Object({
  id: Type.String({ examples: ['dep_01jd6xq0m3b8c2v4w5x6y7z8a9'] }),
  service: Type.Object({ id: Type.String(), name: Type.String(), version: Type.Integer({ description: 'The service version the spec was taken from.' }) }),
  environment: Type.Object({ id: Type.String(), name: Type.String() }),
  state: DeploymentStateSchema,
  attempt: Type.Integer({ minimum: 1, description: 'Which attempt this is: one more each time an expired lease re-queues it.' }),
  revision: Type.Union([Type.String(), Type.Null()], { description: 'The revision label given at creation (a commit, a tag).' }),
  description: Type.String(),
  spec: { ...DeploymentSpec, description: 'The resolved spec, frozen at creation: variables with the overrides applied, each secret pinned to a version (never values).' },
  rollbackOf: Type.Optional(Type.String({ description: 'The deployment this one rolled back to.' })),
  promotedFrom: Type.Optional(Type.String({ description: 'The deployment, in another environment, this one was promoted from.' })),
  createdBy: Type.Union([Type.String(), Type.Null()]),
  createdAt: Timestamp,
  updatedAt: Timestamp,
  startedAt: Type.Optional({ ...Timestamp, description: 'When a runner claimed the current attempt.' }),
  finishedAt: Type.Optional({ ...Timestamp, description: 'When it succeeded, failed or was cancelled.' }),
  reason: Type.Optional(Type.String({ description: 'Why it failed, was cancelled, re-queued or superseded, or why its process is stopped.' })),
  logsRemovedAt: Type.Optional({ ...Timestamp, description: 'When its log was removed, SLIPWAY_DEPLOYMENT_LOG_RETENTION_DAYS after it ended (failed, cancelled or superseded). Absent while it is kept.' }),
  lease: Type.Optional(Type.Object({
    runner: Type.String({ description: 'The runner service user holding the lease.' }),
    expiresAt: Timestamp,
  }, { description: 'In progress only.' })),
  process: Type.Optional(DeploymentProcess),
});
export type Deployment = Static<typeof DeploymentSchema>;

export function createDeploymentBody(limits: Pick<Limits, 'valueChars' | 'specBytes'>) {
  return Type.Object({
    service: Type.String({ minLength: 1, maxLength: 100, description: 'Service id or name.' }),
    environment: Type.String({ minLength: 1, maxLength: 100, description: 'Environment id or name.' }),
    revision: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: 200 }), Type.Null()], { description: 'A label for what is deployed (a commit, a tag, a build number); null, as a deployment without one shows it, is none.' })),
    description: Type.Optional(Type.String({ maxLength: 500 })),
    variables: Type.Optional(variablesSchema(limits, `Overrides of (or additions to) the service's and the environment's plain variables, for this deployment only. The spec the deployment freezes, the service's with the environment's configuration and these laid over, is held to ${limits.specBytes} bytes as JSON like the service's (SLIPWAY_MAX_SPEC_BYTES), and to ${SPEC_LIMITS.variables} variables with the service's and the environment's (400 \`limit_exceeded\` above either).`)),
  }, { additionalProperties: false });
}
export type CreateDeploymentInput = Static<ReturnType<typeof createDeploymentBody>>;

export const DeploymentParams = Type.Object({
  orgId: OrgIdParam,
  id: Type.String({ minLength: 1, maxLength: 100, description: 'Deployment id (`dep_…`).' }),
});

export const DeploymentListQuery = Type.Composite([PageQuery, Type.Object({
  service: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'Only deployments of this service (id or name).' })),
  environment: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'Only deployments into this environment (id or name).' })),
  state: Type.Optional(Type.Array(DeploymentStateSchema, { maxItems: DEPLOYMENT_STATES.length, description: 'Only deployments in these states (repeat the parameter for several).' })),
})]);

export const DeploymentList = Type.Object({ deployments: Type.Array(DeploymentSchema, { description: 'Newest first.' }), nextCursor: NullableCursor });

export const ActiveQuery = Type.Composite([PageQuery, Type.Object({
  service: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'Only this service (id or name).' })),
})]);

export const CancelBody = optionalBody(Type.Object({
  reason: Type.Optional(Type.String({ minLength: 1, maxLength: 500 })),
}, { additionalProperties: false }));

export const RollbackBody = optionalBody(Type.Object({
  description: Type.Optional(Type.String({ maxLength: 500 })),
}, { additionalProperties: false }));

export function promoteBody(limits: Pick<Limits, 'valueChars' | 'specBytes'>) {
  return Type.Object({
    environment: Type.String({ minLength: 1, maxLength: 100, description: 'The environment (id or name) to promote into: another than the deployment\'s own.' }),
    description: Type.Optional(Type.String({ maxLength: 500, description: 'By default, "Promotion of DEPLOYMENT from ENVIRONMENT".' })),
    variables: Type.Optional(variablesSchema(limits, `Overrides for this deployment only, laid over the promoted deployment's own \`variables\` (which it carries over) and so over the service's and the target environment's. Bounded as a deployment's are.`)),
  }, { additionalProperties: false });
}
export type PromoteInput = Static<ReturnType<typeof promoteBody>>;

export const LogStream = Type.Union([Type.Literal('stdout'), Type.Literal('stderr'), Type.Literal('runner')], {
  description: 'The process\'s stdout or stderr, or the runner\'s own account of what it did.',
});
export type LogStreamT = Static<typeof LogStream>;

export const LogLine = Type.Object({
  seq: Type.Integer({ minimum: 1, description: 'Position in the deployment\'s log: 1, 2, 3, … across all attempts.' }),
  attempt: Type.Integer({ minimum: 1 }),
  stream: LogStream,
  line: Type.String(),
  at: Timestamp,
});
export type LogLineT = Static<typeof LogLine>;

export const LOG_PAGE_MAX = 1000;

export const LOG_PAGE_DEFAULT = 200;

export const LogQuery = Type.Object({
  after: Type.Optional(SequenceNumber({ minimum: 0, description: 'Lines after this sequence number (0, the default: from the start). Pass `nextAfter` to follow.' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: LOG_PAGE_MAX, description: `Lines at most (default ${LOG_PAGE_DEFAULT}).` })),
  tail: Type.Optional(Type.Integer({
    minimum: 1, maximum: LOG_PAGE_MAX,
    description: 'The last N lines stored, in order, instead of a page from `after` (which it does not take, nor `limit`): where a reader of a long log starts. Pass the returned `nextAfter` as `after` to follow on.',
  })),
});

export const LogPage = Type.Object({
  lines: Type.Array(LogLine, { description: 'In order.' }),
  nextAfter: Type.Integer({ description: 'The sequence number to pass as `after` for the next page (or to follow the log).' }),
  hasMore: Type.Boolean({ description: 'More lines are already stored after this page.' }),
  state: { ...DeploymentStateSchema, description: 'The deployment\'s state now: a follower stops once it is final and `hasMore` is false.' },
  removedAt: Type.Optional({ ...Timestamp, description: 'When the log was removed, its retention over (SLIPWAY_DEPLOYMENT_LOG_RETENTION_DAYS): there are no lines to read. Absent while it is kept.' }),
});
