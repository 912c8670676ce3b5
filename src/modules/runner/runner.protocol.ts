// The runner protocol: the contract between Slipway and the runners that carry deployments out.
// The server's routes and any runner (the reference `slipway runner` among them) import these
// schemas and types, so both sides read the same definition. Everything here is stable API.
//
// A runner is a service user with the role `runner`. With a token from the token endpoint it:
//
//   1. claims: `POST /v1/orgs/{orgId}/runner/claim` `{ environments?, waitSeconds? }`.
//      The call waits up to `waitSeconds` (long poll) for the oldest claimable deployment of
//      those environments (all of the organization's when omitted) and answers 200 with the
//      deployment, a lease and what to run — with the secret values resolved — or 204 when none
//      came in time; then claim again. A deployment is claimable when it is queued and nothing of
//      the same service and environment is in progress or queued before it. Each deployment is
//      claimed by one runner at a time; unknown environment names are a 404.
//   2. runs the deployment, renewing the lease with `…/runner/deployments/{id}/heartbeat` well
//      before `lease.expiresAt` (every `lease.heartbeatSeconds`), and appending output with
//      `…/logs`. Any accepted call renews the lease.
//   3. completes: `…/complete` `{ leaseToken, outcome: "succeeded" | "failed", reason? }`.
//      Completing again with the same token and outcome answers the same deployment again,
//      so a runner may retry a complete whose answer it did not get. A runner that stops before
//      it can complete gives the deployment back: `…/abandon` `{ leaseToken, reason? }` ends the
//      attempt at once, as its lease running out would (re-queued with attempt + 1 for another
//      runner, or failed once the attempts are spent), instead of leaving it to wait out the lease.
//   4. keeps what it runs true: `POST /v1/orgs/{orgId}/runner/serving` `{ deployments: [ids], host? }`
//      answers which of those succeeded deployments still serve. One that no longer does was
//      superseded (perhaps by a deployment another runner carried out) or deleted with its
//      service or environment, or (with `host`) adopted by another runner: the runner stops its
//      process.
//   5. hosts: a runner that names itself with `host` (a random id per runner process) in its claims
//      and serving reports is known to run what it reported. A serving deployment whose runner
//      has not reported it for SLIPWAY_RUNNER_HOST_TIMEOUT_SECONDS, or let it go with
//      `POST …/runner/release` `{ host, deployments }` when it stopped, is an orphan:
//      `POST …/runner/adopt` `{ host, environments?, limit? }` hands orphans to the runner that
//      asks (one runner each), with what to run as in a claim, and it starts them again. Their
//      state does not change: they still serve. When the server's adopt answer says
//      `acceptsProcessReports`, the runner's serving reports also say how each process is doing
//      (`processes`: running, or restarting after exiting on its own, how often, the last exit);
//      the deployment shows it as `process`, and each report of new exits is a
//      `deployment.process_exited` event. With `acceptsProcessAddresses` too, each process report
//      may say where it answers (`address`: the runner's host name and the process's port).
//   6. is listed: `GET /v1/orgs/{orgId}/runners` shows each runner that names itself, with when it
//      was last heard from (its claims, heartbeats, serving reports and adoptions) and what it
//      carries out. When the adopt answer says `acceptsRunnerDetails`, its claims and adoptions
//      may also say `hostname` (its machine's) and `version`, which the list shows. With
//      `acceptsStopNotice`, a runner that stops says so in its last release (`stopping: true`,
//      with the deployments it let go, or none): it is listed offline at once.
//
// Every call after the claim carries `leaseToken`, the fencing token of this claim. When the
// lease expires (no heartbeat for `lease.durationSeconds`), the deployment is re-queued for
// another runner with attempt + 1 (or failed once the attempts are spent), and the old token is
// refused from then on. Refusals a runner must act on are 409 problems with these `code`s:
//
//   - `lease_lost`: this runner no longer holds the deployment. Stop, change nothing, claim again.
//   - `deployment_cancelled`: someone cancelled it. Stop what was started for it.
//   - `deployment_finished`: it already ended under this lease (a heartbeat or log after complete).
//   - `invalid_transition`: the move is not in the state graph (`allowedTransitions` says what is).
//
// A refused call changes nothing: no state, no lease, no log line.
//
// A runner cut off from the server cannot hear that its lease ran out, and must not go on working
// on the deployment side by side with the runner that claims it next: it fences itself, by its own
// monotonic clock. The lease holds at the least until the moment the server's last answer vouches
// for: a claim or heartbeat answered with a lease, its `expiresInMs` (what the lease had left when
// the server took the request up) counted from when the request was sent. (From a server too old to
// send `expiresInMs`: `durationSeconds` from when a heartbeat was sent, or from when a claim's answer
// arrived.) Nothing else vouches for it: not a 503 (a node that cannot reach the database says only
// that of itself, while other nodes may expire the lease), not a timeout, not a load balancer's page.
// A server down or frozen for longer than the lease has left cannot be told from a runner cut off
// while other nodes expire its lease.
//
// A little before that moment (a tenth of the lease, at least a second, at most a quarter: what was
// started takes a moment to stop, and the nodes' clocks agree only to within a little), the runner
// stops what it started for the deployment (what served before keeps serving), stops renewing, and
// does not complete it (a completion already sent is seen through: its answer decides, since the
// server may have taken it); it may say so in the log and give the deployment back (`abandon`) if
// the server still takes it. Heartbeats that fail are asked again well within the lease, whatever
// Retry-After says. A deployment already completed is not affected.
//
// Secret values arrive only in the claim's `run.secrets` (`Cache-Control: no-store`). They are the
// process's to see: a runner should keep them out of its own logs and mask them in the log lines
// it sends.
import { Type, type Static } from '@sinclair/typebox';
import { optionalBody, OrgIdParam, Timestamp } from '../../http/schemas.js';
import { DeploymentSchema, LogStream, ProcessAddress, ProcessExit, ReportedProcessState } from '../deployments/deployments.schemas.js';
import { HealthCheck } from '../services/services.schemas.js';

/** Route templates (Fastify syntax); `runnerUrl` fills them in. */
export const RUNNER_ROUTES = {
  claim: '/v1/orgs/:orgId/runner/claim',
  heartbeat: '/v1/orgs/:orgId/runner/deployments/:id/heartbeat',
  logs: '/v1/orgs/:orgId/runner/deployments/:id/logs',
  complete: '/v1/orgs/:orgId/runner/deployments/:id/complete',
  abandon: '/v1/orgs/:orgId/runner/deployments/:id/abandon',
  serving: '/v1/orgs/:orgId/runner/serving',
  adopt: '/v1/orgs/:orgId/runner/adopt',
  release: '/v1/orgs/:orgId/runner/release',
} as const;

/** The path of a runner call, e.g. `runnerUrl('heartbeat', 'acme', 'dep_…')`. */
export function runnerUrl(route: keyof typeof RUNNER_ROUTES, orgId: string, deploymentId = ''): string {
  return RUNNER_ROUTES[route].replace(':orgId', encodeURIComponent(orgId)).replace(':id', encodeURIComponent(deploymentId));
}

export const CLAIM_WAIT_MAX_SECONDS = 30;
export const CLAIM_WAIT_DEFAULT_SECONDS = 20;
/** Lines in one `logs` call. */
export const LOG_LINES_PER_CALL = 1000;
/** Characters in one log line; longer lines are refused, so cut them before sending. */
export const LOG_LINE_MAX_CHARS = 32 * 1024;

/** The problem codes a runner acts on (see above). */
export const RUNNER_PROBLEMS = {
  leaseLost: 'lease_lost',
  cancelled: 'deployment_cancelled',
  finished: 'deployment_finished',
  invalidTransition: 'invalid_transition',
} as const;

/** True for a refusal after which the runner must stop working on the deployment. */
export function mustStop(problemCode: string | undefined): boolean {
  return problemCode !== undefined && (Object.values(RUNNER_PROBLEMS) as string[]).includes(problemCode);
}

export const RunnerDeploymentParams = Type.Object({
  orgId: OrgIdParam,
  id: Type.String({ minLength: 1, maxLength: 100, description: 'Deployment id (`dep_…`).' }),
});

/** A runner process's id for hosting (step 5): random, made anew each time the runner starts. */
export const Host = Type.String({ minLength: 8, maxLength: 100, pattern: '^[A-Za-z0-9_-]+$', description: 'The id this runner process goes by (random, new at each start): what it claims and reports on it runs.' });

/** What a runner says of itself, shown in the runners list (step 6). */
export const RunnerDetails = {
  hostname: Type.Optional(Type.String({ minLength: 1, maxLength: 253, pattern: '^[A-Za-z0-9._-]+$', description: 'The host name of the machine it runs on.' })),
  version: Type.Optional(Type.String({ minLength: 1, maxLength: 100, pattern: '^[\\x21-\\x7e]+( [\\x21-\\x7e]+)*$', description: 'Its name and version (`slipway-runner/0.1.0`).' })),
};

const EnvironmentNames = Type.Array(Type.String({ minLength: 1, maxLength: 100 }), {
  minItems: 1, maxItems: 100, uniqueItems: true, description: 'Environment names or ids to take deployments from; all of the organization\'s when omitted.',
});

export const ClaimRequest = optionalBody(Type.Object({
  environments: Type.Optional(EnvironmentNames),
  waitSeconds: Type.Optional(Type.Integer({
    minimum: 0, maximum: CLAIM_WAIT_MAX_SECONDS, default: CLAIM_WAIT_DEFAULT_SECONDS,
    description: 'How long to wait for a deployment before answering 204; 0 answers at once.',
  })),
  host: Type.Optional(Host),
  ...RunnerDetails,
}, { additionalProperties: false }));
export type ClaimRequestT = Static<typeof ClaimRequest>;

export const Lease = Type.Object({
  token: Type.String({ description: 'The fencing token: send it as `leaseToken` with every later call about this deployment.' }),
  attempt: Type.Integer({ minimum: 1 }),
  expiresAt: Timestamp,
  durationSeconds: Type.Integer({ description: 'How long the lease lasts from each renewal (SLIPWAY_RUNNER_LEASE_SECONDS).' }),
  heartbeatSeconds: Type.Integer({ description: 'How often to send a heartbeat: a third of the duration.' }),
  expiresInMs: Type.Optional(Type.Integer({
    minimum: 0,
    description: 'In claim and heartbeat answers: what the lease had left, in milliseconds, when the server took the request up. Counted from when the request was sent, by the runner\'s own clock, it gives a moment before which the lease cannot run out while the nodes\' clocks agree (they keep the database\'s), however far this runner\'s clock is from theirs (older servers leave it out).',
  })),
});
export type LeaseT = Static<typeof Lease>;

export const RunSpec = Type.Object({
  command: Type.Optional(Type.Array(Type.String(), { description: 'argv, run without a shell.' })),
  image: Type.Optional(Type.String()),
  port: Type.Optional(Type.Integer({ description: 'The port from the spec; a runner that chooses ports sets PORT to its own.' })),
  healthCheck: Type.Optional(HealthCheck),
  minReadySeconds: Type.Optional(Type.Integer({ description: 'How long the new process must keep running once healthy before the deployment is completed as succeeded (and the previous process stopped); one that exits within it is a failed deployment.' })),
  variables: Type.Record(Type.String(), Type.String(), { description: 'Plain variables: the service\'s, with the deployment\'s overrides applied.' }),
  secrets: Type.Record(Type.String(), Type.String(), { description: 'Secret values by variable name, from the pinned versions. No name is in both maps.' }),
}, { description: 'What to run: set `variables`, `secrets` and PORT in the process environment.' });
export type RunSpecT = Static<typeof RunSpec>;

export const ClaimResponse = Type.Object({
  deployment: DeploymentSchema,
  lease: Lease,
  run: RunSpec,
});
export type ClaimResponseT = Static<typeof ClaimResponse>;

const LeaseToken = Type.String({ minLength: 1, maxLength: 200, description: 'The `lease.token` of the claim.' });

export const HeartbeatRequest = Type.Object({ leaseToken: LeaseToken }, { additionalProperties: false });
export type HeartbeatRequestT = Static<typeof HeartbeatRequest>;

export const HeartbeatResponse = Type.Object({ lease: Lease });
export type HeartbeatResponseT = Static<typeof HeartbeatResponse>;

export const AppendLogsRequest = Type.Object({
  leaseToken: LeaseToken,
  lines: Type.Array(Type.Object({
    stream: Type.Optional({ ...LogStream, default: 'stdout' }),
    line: Type.String({ maxLength: LOG_LINE_MAX_CHARS, description: `One line, without its newline: up to ${LOG_LINE_MAX_CHARS.toLocaleString('en')} characters.` }),
    at: Type.Optional({ ...Timestamp, description: 'When the line was written (default: when it arrived).' }),
  }, { additionalProperties: false }), { minItems: 1, maxItems: LOG_LINES_PER_CALL, description: 'Stored in this order, after every line already stored.' }),
}, { additionalProperties: false });
export type AppendLogsRequestT = Static<typeof AppendLogsRequest>;

export const AppendLogsResponse = Type.Object({
  appended: Type.Integer(),
  lastSeq: Type.Integer({ description: 'The sequence number of the last line appended.' }),
  lease: Lease,
});
export type AppendLogsResponseT = Static<typeof AppendLogsResponse>;

export const Outcome = Type.Union([Type.Literal('succeeded'), Type.Literal('failed')]);
export type OutcomeT = Static<typeof Outcome>;

export const CompleteRequest = Type.Object({
  leaseToken: LeaseToken,
  outcome: Outcome,
  reason: Type.Optional(Type.String({ minLength: 1, maxLength: 2000, description: 'Why it failed, in one line a person can act on (kept for `failed`).' })),
}, { additionalProperties: false });
export type CompleteRequestT = Static<typeof CompleteRequest>;

export const ABANDON_REASON_MAX_CHARS = 500;

export const AbandonRequest = Type.Object({
  leaseToken: LeaseToken,
  reason: Type.Optional(Type.String({ minLength: 1, maxLength: ABANDON_REASON_MAX_CHARS, description: 'Why this runner gives the deployment back (it is stopping, say), in one line; the deployment\'s `reason` quotes it.' })),
}, { additionalProperties: false });
export type AbandonRequestT = Static<typeof AbandonRequest>;

export const SERVING_MAX_IDS = 500;

const DeploymentIds = Type.Array(Type.String({ minLength: 1, maxLength: 100 }), {
  minItems: 1, maxItems: SERVING_MAX_IDS, uniqueItems: true, description: 'Ids of deployments whose processes this runner runs.',
});

export const ProcessReport = Type.Object({
  deployment: Type.String({ minLength: 1, maxLength: 100 }),
  state: ReportedProcessState,
  exits: Type.Integer({ minimum: 0, maximum: 2 ** 31 - 1, description: 'How often its process exited on its own since this runner started it.' }),
  lastExit: Type.Optional(ProcessExit),
  address: Type.Optional(ProcessAddress),
}, { additionalProperties: false });
export type ProcessReportT = Static<typeof ProcessReport>;

export const ServingRequest = Type.Object({
  deployments: DeploymentIds,
  host: Type.Optional({ ...Host, description: 'This runner\'s id: the deployments answered become (or stay) its own, seen now; one another runner adopted is not answered.' }),
  processes: Type.Optional(Type.Array(ProcessReport, {
    maxItems: SERVING_MAX_IDS,
    description: 'With `host`, to a server whose adopt answer says `acceptsProcessReports`: how the process of each of these deployments is doing. Those left out keep what was reported last; reports on deployments not answered are ignored.',
  })),
}, { additionalProperties: false });
export type ServingRequestT = Static<typeof ServingRequest>;

export const ServingResponse = Type.Object({
  serving: Type.Array(Type.String(), { description: 'Those of the ids that still serve (state `succeeded`); stop the processes of the others.' }),
});
export type ServingResponseT = Static<typeof ServingResponse>;

export const ADOPT_MAX = 50;

export const AdoptRequest = Type.Object({
  host: Host,
  environments: Type.Optional(EnvironmentNames),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: ADOPT_MAX, default: 10, description: 'Orphans to take at most.' })),
  ...RunnerDetails,
}, { additionalProperties: false });
export type AdoptRequestT = Static<typeof AdoptRequest>;

export const AdoptResponse = Type.Object({
  adopted: Type.Array(Type.Object({ deployment: DeploymentSchema, run: RunSpec }), {
    description: 'Serving deployments whose runner went away, now this runner\'s: start each as after a claim (no lease: their state does not change).',
  }),
  hostTimeoutSeconds: Type.Integer({ description: 'SLIPWAY_RUNNER_HOST_TIMEOUT_SECONDS: report what you run (`serving` with `host`) well within it, every third of it at the least.' }),
  acceptsProcessReports: Type.Boolean({ description: 'The server takes `processes` in serving reports (older servers refuse the field).' }),
  acceptsProcessAddresses: Type.Optional(Type.Boolean({ description: 'The server takes `address` in those process reports (older servers refuse the field, or leave this out).' })),
  acceptsRunnerDetails: Type.Optional(Type.Boolean({ description: 'The server takes `hostname` and `version` in claims and adoptions (older servers refuse the fields, or leave this out).' })),
  acceptsStopNotice: Type.Optional(Type.Boolean({ description: 'The server takes `stopping` in releases, with no deployment as well (older servers refuse the field, or leave this out).' })),
});
export type AdoptResponseT = Static<typeof AdoptResponse>;

export const ReleaseRequest = Type.Object({
  host: Host,
  deployments: { ...DeploymentIds, minItems: 0 },
  stopping: Type.Optional(Type.Boolean({ description: 'true: this runner process stops (it is listed offline at once, and for good: a runner started again is another host); the deployments may then be none.' })),
}, { additionalProperties: false });
export type ReleaseRequestT = Static<typeof ReleaseRequest>;

export const ReleaseResponse = Type.Object({
  released: Type.Array(Type.String(), { description: 'Those of the ids that were this runner\'s and serve: orphans now, for another runner to adopt.' }),
});
export type ReleaseResponseT = Static<typeof ReleaseResponse>;

/** `complete` and `abandon` answer with the deployment as it now stands. */
export const CompleteResponse = DeploymentSchema;
