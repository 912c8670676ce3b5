// The server side of the runner protocol (see runner.protocol.ts): claims, leases fenced by a
// token, log appends and completion. Every write checks the lease token in the same statement
// that makes it, so a runner that lost its lease changes nothing.
import { randomBytes, randomInt } from 'node:crypto';
import { sql } from 'kysely';
import type { RequestContext } from '../../platform/context.js';
import { isDatabaseUnreachable, isUniqueViolation, type Db, type Dialect, type Executor } from '../../platform/db/database.js';
import { errors, isAppError, MAX_FIELD_ERRORS, type AppError } from '../../platform/errors.js';
import type { DeploymentSignals } from '../deployments/deployment-signals.js';
import { compareAndSet } from '../deployments/deployment-state.js';
import { transitionConflict, type DeploymentState } from '../deployments/deployment-states.js';
import { deploymentsRepo, type DeploymentRow } from '../deployments/deployments.repo.js';
import { toDeployment, type Snapshot } from '../deployments/deployments.service.js';
import type { Deployment } from '../deployments/deployments.schemas.js';
import { endAttempt, expireLeases } from '../deployments/lease-expiry.js';
import { appendEvents, markCommitted, type NewEvent } from '../events/event-log.js';
import { environmentsRepo } from '../environments/environments.repo.js';
import { runnerEnvironmentIds } from '../service-users/service-users.service.js';
import { pinnedVersions, secretVariables, type SecretStore } from '../services/service-spec.js';
import type {
  AdoptRequestT, AdoptResponseT, AppendLogsRequestT, AppendLogsResponseT, ClaimRequestT, ClaimResponseT, LeaseT, OutcomeT, ProcessReportT, RunSpecT,
  ServingRequestT,
} from './runner.protocol.js';
import { CLAIM_WAIT_DEFAULT_SECONDS, CLAIM_WAIT_MAX_SECONDS } from './runner.protocol.js';
import type { RunnersService } from './runners.service.js';
import { nowMs, nowIso, nowDate, utcIso } from '../../platform/clock.js';

export interface RunnerDeps {
  db: Db;
  dialect: Dialect;
  secrets: Pick<SecretStore, 'resolveValues'>;
  signals: DeploymentSignals;
  leaseSeconds: number;
  maxAttempts: number;
  /** A serving deployment its runner has not reported for this long is an orphan, for another runner to adopt. */
  hostTimeoutSeconds: number;
  /** Told of each heartbeat's runner: it is there. */
  runners: Pick<RunnersService, 'heard'>;
}

type ClaimOutcome = ClaimResponseT | 'none' | 'retry';

function shuffled<T>(items: T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = randomInt(i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/**
 * A time a runner reports, as every time Slipway answers with (see utcIso); `otherwise` stands only
 * for what Date.parse cannot read (the schema's date-time format lets nothing else by).
 */
function utc(at: string, otherwise: string): string {
  return utcIso(at) ?? otherwise;
}

/**
 * What the schema cannot say of a serving report, refused before anything is recorded: process
 * reports need `host` (they are a host's), and say one thing of each deployment.
 */
export function assertServingReport(request: ServingRequestT): void {
  const processes = request.processes ?? [];
  if (processes.length > 0 && request.host === undefined) {
    throw errors.invalidRequest('`processes` are reports of the runner named by `host`: send `host` with them (or leave them out).', [{ pointer: '/host', message: 'is required with processes' }]);
  }
  const first = new Map<string, number>();
  const again = processes.flatMap((report, i) => {
    const at = first.get(report.deployment);
    if (at === undefined) first.set(report.deployment, i);
    return at === undefined ? [] : [{ pointer: `/processes/${i}/deployment`, message: `reports on ${report.deployment} again (first at /processes/${at}): one report per deployment` }];
  });
  if (again.length > 0) throw errors.invalidRequest(`A report names a deployment once: ${again[0]!.pointer} ${again[0]!.message}.`, again.slice(0, MAX_FIELD_ERRORS));
}

export function createRunnerService(deps: RunnerDeps) {
  const { db, signals } = deps;
  const leaseMs = deps.leaseSeconds * 1000;
  const hostTimeoutMs = deps.hostTimeoutSeconds * 1000;
  // Reports and heartbeats made to a server that was down did not arrive. Until a whole host timeout
  // has passed since this one began to serve, only what a runner let go of is an orphan, not what
  // went unreported; until a whole lease has, no lease expires (see expire). Counted from when it
  // listens (`listening`): a start that takes long (migrating, a loaded machine) heard nothing either;
  // and from when the database is found back after it could not be reached (by the sweep), which no
  // heartbeat or report reached either.
  let startedAt = nowMs();
  /** Whether the database was last found out of reach (by the sweep, or a claim's look at leases). */
  let outage = false;

  /**
   * The lease of a row, as a claim or heartbeat answers it. `since`: when this request was taken up,
   * from which `expiresInMs` counts (a runner counts it from when it sent the request, by its own
   * clock). Left out of the answers that an Idempotency-Key may replay later (a log append's),
   * where it would be stale.
   */
  function leaseOf(row: DeploymentRow, since?: number): LeaseT {
    return {
      token: row.lease_token!, attempt: row.attempt, expiresAt: row.lease_expires_at!,
      durationSeconds: deps.leaseSeconds, heartbeatSeconds: Math.max(1, Math.floor(deps.leaseSeconds / 3)),
      ...(since !== undefined ? { expiresInMs: Math.max(0, Date.parse(row.lease_expires_at!) - since) } : {}),
    };
  }

  /**
   * Re-queues (or fails) what lost its lease; not in this process's first lease after it started.
   * A lease that ran out while the server was down (restarting, upgraded) is no sign that its
   * runner is gone: the runner retries its heartbeat until the server answers, and that retry must
   * land before the lease is taken from it, or a restart costs every deployment in progress an
   * attempt. The nodes that stayed up meanwhile expire leases as ever. A database out of reach is
   * the same to every node (no heartbeat could be recorded anywhere): the lease after it comes
   * back is the runners' to land theirs, counted from when this node finds it back (the sweep or a
   * claim reaches it with one trivial statement while it may expire nothing), not from when it last
   * found it out of reach, which may be a sweep's interval earlier.
   */
  async function expire(orgId: string | null): Promise<void> {
    const held = outage || nowMs() - startedAt < leaseMs;
    if (held && orgId !== null && !outage) return;
    try {
      if (held) {
        await sql`select 1`.execute(db);
        if (outage) {
          outage = false;
          startedAt = nowMs();
        }
      } else for (const touched of await expireLeases(db, { orgId, maxAttempts: deps.maxAttempts })) signals.notify(touched);
    } catch (error) {
      if (isDatabaseUnreachable(error)) {
        outage = true;
        startedAt = nowMs();
      }
      throw error;
    }
  }

  /**
   * The ids of the environments a runner keeps to (its service user's `environments`); null: all,
   * as for a runner the external issuer vouches for. A service user deleted since its token was
   * last checked (on another node, within the 5 s that node remembers it) is handed nothing: what
   * it was kept to is gone with it, and "all" is not what is left.
   */
  async function keptTo(ctx: RequestContext): Promise<string[] | null> {
    if (ctx.actor.external === true) return null;
    const row = await db.selectFrom('service_users').select('runner_environments').where('id', '=', ctx.actor.id).executeTakeFirst();
    if (row === undefined) throw errors.invalidToken('The service user of this token no longer exists.');
    return runnerEnvironmentIds(row);
  }

  /**
   * The environments a runner takes deployments of: those it names (404 for one that is not the
   * organization's; all when it names none), within those its service user is kept to. Naming one
   * outside them is a 403, and so is a runner all of whose environments were deleted since.
   */
  async function environmentIds(ctx: RequestContext, orgId: string, names: string[] | undefined): Promise<string[] | null> {
    const kept = await keptTo(ctx);
    const named = names === undefined ? null : await environmentsRepo.findManyInOrg(db, orgId, names);
    const missing = names?.filter((n) => !named!.some((r) => r.id === n || r.name === n)) ?? [];
    if (missing.length > 0) throw errors.notFound('environment', missing.join('", "'));
    if (kept === null) return named === null ? null : named.map((r) => r.id);
    const allowed = await environmentsRepo.findManyInOrg(db, orgId, kept);
    const allowedNames = allowed.map((r) => r.name).sort().join(', ');
    if (named === null) {
      if (allowed.length === 0) throw errors.forbidden('This runner is kept to environments that no longer exist: give it others (its service user\'s `environments`), or all of them (null).');
      return allowed.map((r) => r.id);
    }
    const outside = named.filter((r) => !kept.includes(r.id));
    if (outside.length > 0) {
      throw errors.forbidden(`This runner may take the deployments of ${allowedNames === '' ? 'no environment that still exists' : allowedNames} only, not of ${outside.map((r) => r.name).sort().join(', ')}: claim those, or change its service user's \`environments\`.`);
    }
    return named.map((r) => r.id);
  }

  /**
   * Takes the oldest claimable deployment, if any, and resolves its secrets. A deployment whose
   * pinned secret versions are gone (destroyed since) cannot ever run: it fails with the reason,
   * and the claim moves on.
   */
  async function claimOnce(ctx: RequestContext, orgId: string, envIds: string[] | null, host: string | undefined, since: number): Promise<ClaimOutcome> {
    const now = nowDate();
    const at = now.toISOString();
    // A runner that lost a deployment's lease is not handed it again before its claims waiting then
    // have run out: one frozen with its lease may still be frozen.
    const avoid = host !== undefined ? { host, lostSince: new Date(now.getTime() - CLAIM_WAIT_MAX_SECONDS * 1000).toISOString() } : undefined;
    // A plain read first: an empty poll must not take SQLite's write lock.
    if ((await deploymentsRepo.findClaimable(db, orgId, envIds, false, avoid)) === undefined) return 'none';
    try {
      return await db.transaction().execute(async (trx): Promise<ClaimOutcome> => {
        const id = await deploymentsRepo.findClaimable(trx, orgId, envIds, deps.dialect === 'postgres', avoid);
        if (id === undefined) return 'none';
        const row = await compareAndSet(trx, ctx, {
          orgId, id, from: 'queued', to: 'in_progress', eventData: { runner: ctx.actor.id },
          set: {
            lease_token: randomBytes(24).toString('base64url'), lease_expires_at: new Date(now.getTime() + leaseMs).toISOString(),
            claimed_by: ctx.actor.id, started_at: at, reason: null,
            // The runner that runs it from now on, if it names itself (it reports it while it does);
            // one that does not is no host, and what it runs is never handed to another runner.
            host_id: host ?? null, host_seen_at: host !== undefined ? at : null,
          },
        }, at);
        if (!row) return 'retry';
        const run = await runSpecOf(trx, orgId, row);
        if (isAppError(run)) {
          await failUnresolvable(trx, ctx, row, run, at);
          return 'retry';
        }
        return { deployment: toDeployment(row), lease: leaseOf(row, since), run };
      });
    } catch (error) {
      // PostgreSQL: another node took the last slot of this service and environment first.
      if (isUniqueViolation(error)) return 'retry';
      throw error;
    }
  }

  /** A claimed deployment whose pinned secret versions are gone cannot run: it fails, with why. */
  async function failUnresolvable(trx: Executor, ctx: RequestContext, row: DeploymentRow, why: AppError, at: string): Promise<void> {
    await compareAndSet(trx, ctx, {
      orgId: row.org_id, id: row.id, from: 'in_progress', to: 'failed', leaseToken: row.lease_token!,
      set: { lease_token: null, lease_expires_at: null, finished_at: at, reason: `Its secrets cannot be resolved: ${why.detail}` },
    }, at);
  }

  async function runSpecOf(trx: Executor, orgId: string, row: DeploymentRow): Promise<RunSpecT | AppError> {
    const { spec } = JSON.parse(row.snapshot) as Snapshot;
    const { variables, secrets: _pinned, ...run } = spec;
    try {
      const values = await deps.secrets.resolveValues(trx, orgId, pinnedVersions(spec));
      return { ...run, variables, secrets: secretVariables(spec, values) };
    } catch (error) {
      if (isAppError(error)) return error;
      throw error;
    }
  }

  /**
   * Why a fenced call changed nothing, as the problem the runner acts on. `to` is the state a
   * completion asked for: on a deployment that already ended under this lease, that is a move
   * the graph does not have.
   */
  async function refusal(executor: Executor, orgId: string, id: string, token: string, to?: DeploymentState): Promise<AppError> {
    const row = await deploymentsRepo.findInOrg(executor, orgId, id);
    if (!row) return errors.notFound('deployment', id);
    if (row.state === 'cancelled') return errors.deploymentCancelled(id);
    if (row.lease_token !== token || row.state === 'in_progress') return errors.leaseLost(id);
    return to !== undefined ? transitionConflict(id, row.state as DeploymentState, to) : errors.deploymentFinished(id, row.state);
  }

  /**
   * One orphan made `host`'s, with what to run and its event; null when another runner took it
   * first, or when it cannot run (its pinned secret versions are gone): its process is `stopped`
   * then, with the reason and a `deployment.process_stopped` event, and no runner is offered it again.
   */
  async function adoptOne(ctx: RequestContext, orgId: string, id: string, host: string, at: string, cutoff: string): Promise<AdoptResponseT['adopted'][number] | null> {
    return db.transaction().execute(async (trx) => {
      const before = await deploymentsRepo.findInOrg(trx, orgId, id);
      const row = await deploymentsRepo.adopt(trx, orgId, id, host, at, cutoff);
      if (!row) return null;
      const subject = { type: 'deployment', id };
      const previousHost = before?.host_id ?? null;
      const run = await runSpecOf(trx, orgId, row);
      if (isAppError(run)) {
        const reason = `Its runner went away, and it cannot be started again: ${run.detail.charAt(0).toLowerCase()}${run.detail.slice(1)}`;
        await deploymentsRepo.setStopped(trx, id, previousHost ?? host, reason, before ?? { process_exits: null, process_last_exit: null }, at);
        await appendEvents(trx, ctx, [{ orgId, type: 'deployment.process_stopped', subject, data: { host, previousHost, reason } }], at);
        return null;
      }
      await appendEvents(trx, ctx, [{ orgId, type: 'deployment.adopted', subject, data: { host, runner: ctx.actor.id, previousHost } }], at);
      return { deployment: toDeployment(row), run };
    });
  }

  /**
   * Keeps what `host` reports of the processes of the deployments it was just answered for; a
   * report of new exits is a `deployment.process_exited` event. Unchanged reports only move when it was reported.
   */
  async function recordProcesses(trx: Executor, ctx: RequestContext, orgId: string, host: string, reports: ProcessReportT[], at: string): Promise<void> {
    const known = new Map((await deploymentsRepo.processesOf(trx, orgId, reports.map((r) => r.deployment), host)).map((row) => [row.id, row]));
    const events: NewEvent[] = [];
    const unchanged: string[] = [];
    for (const report of reports) {
      const row = known.get(report.deployment);
      if (row === undefined) continue;
      // A runner counts a deployment's exits up for as long as it runs it: fewer than already
      // kept is an older report that arrived late (a retry that overtook it), not news.
      if (row.process_exits !== null && report.exits < row.process_exits) continue;
      const exit = report.lastExit === undefined ? undefined : { code: report.lastExit.code, signal: report.lastExit.signal, at: utc(report.lastExit.at, at) };
      const lastExit = exit === undefined ? null : JSON.stringify(exit);
      const address = { process_hostname: report.address?.hostname ?? null, process_port: report.address?.port ?? null };
      if (row.process_state === report.state && row.process_exits === report.exits && row.process_last_exit === lastExit
        && row.process_hostname === address.process_hostname && row.process_port === address.process_port) {
        unchanged.push(row.id);
        continue;
      }
      // A runner that still runs one marked stopped: it was not gone after all, and the reason no longer holds.
      const changed = await deploymentsRepo.setProcess(trx, row.id, host, row, {
        process_state: report.state, process_exits: report.exits, process_last_exit: lastExit, process_reported_at: at, ...address, ...(row.process_state === 'stopped' ? { reason: null } : {}),
      });
      if (!changed) continue;
      const before = row.process_exits ?? 0;
      if (report.exits > before) {
        events.push({
          orgId, type: 'deployment.process_exited', subject: { type: 'deployment', id: row.id },
          data: { host, exits: report.exits, newExits: report.exits - before, lastExit: exit ?? null, state: report.state },
        });
      }
    }
    await deploymentsRepo.processReportedAgain(trx, unchanged, host, at);
    await appendEvents(trx, ctx, events, at);
  }

  function renewal(): string {
    return new Date(nowMs() + leaseMs).toISOString();
  }

  return {
    /**
     * Long poll: looks, and while nothing is claimable waits for a signal (or a short poll) until
     * the deadline. Null when nothing came in time, the caller went away or the server is stopping.
     * After each wait `reauthenticate` checks the caller again (it throws if it may no longer
     * claim): a runner disabled while it waited must not receive secret values. The environments
     * its service user is kept to are read again then too: one narrowed while it waited is handed
     * nothing of the environments taken from it (403 once it names one of them). `accepted` runs
     * once the claim's environments are known to be the runner's to take, before any wait: a claim
     * refused for them records nothing.
     */
    async claim(ctx: RequestContext, orgId: string, request: ClaimRequestT, abort?: AbortSignal, reauthenticate?: () => Promise<void>, accepted?: () => Promise<void>): Promise<ClaimResponseT | null> {
      const since = nowMs();
      let envIds = await environmentIds(ctx, orgId, request?.environments);
      await accepted?.();
      const deadline = nowMs() + (request?.waitSeconds ?? CLAIM_WAIT_DEFAULT_SECONDS) * 1000;
      let sweep = true;
      for (let waited = false; ; waited = true) {
        if (abort?.aborted || signals.closed) return null;
        if (waited) {
          await reauthenticate?.();
          envIds = await environmentIds(ctx, orgId, request?.environments);
        }
        const seen = signals.version(orgId);
        if (sweep) await expire(orgId);
        const outcome = await claimOnce(ctx, orgId, envIds, request?.host, since);
        if (outcome === 'retry') continue;
        if (outcome !== 'none') return outcome;
        const left = deadline - nowMs();
        if (left <= 0) return null;
        await signals.wait(orgId, seen, left, abort);
        // Woken by a signal: go straight for the new deployment. A quiet poll: a lease may have run out.
        sweep = signals.version(orgId) === seen;
      }
    },

    /**
     * The answer to a claim again, for a retry under the claim's Idempotency-Key whose first answer
     * was lost: the same deployment and lease, with what to run resolved again from its pinned
     * versions, while the lease is still held. The values were never kept with the key.
     */
    async claimAgain(ctx: RequestContext, orgId: string, id: string, leaseToken: string): Promise<ClaimResponseT> {
      const since = nowMs();
      // Its secret values go out again only to a runner that may still take its environment.
      const kept = await keptTo(ctx);
      const answer = await db.transaction().execute(async (trx) => {
        const row = await deploymentsRepo.findInOrg(trx, orgId, id);
        if (row?.state !== 'in_progress' || row.lease_token !== leaseToken) throw await refusal(trx, orgId, id, leaseToken);
        if (kept !== null && !kept.includes(row.environment_id)) {
          throw errors.forbidden('This runner is no longer kept to the environment of the deployment this claim took: its secret values are not handed out again. Its lease runs out, and a runner of that environment takes it.');
        }
        const run = await runSpecOf(trx, orgId, row);
        if (!isAppError(run)) return { deployment: toDeployment(row), lease: leaseOf(row, since), run };
        // Deleted for good since the first answer: it cannot run, as a claim would have found. The
        // failure commits; the refusal goes out after it (thrown here, it would roll the failure back).
        await failUnresolvable(trx, ctx, row, run, nowIso());
        return 'failed' as const;
      });
      if (answer === 'failed') throw errors.deploymentFinished(id, 'failed');
      return answer;
    },

    async heartbeat(orgId: string, id: string, token: string): Promise<{ lease: LeaseT }> {
      const since = nowMs();
      const row = await deploymentsRepo.renewLease(db, { orgId, id, leaseToken: token, expiresAt: renewal(), lines: 0 });
      if (!row) throw await refusal(db, orgId, id, token);
      if (row.host_id !== null && row.claimed_by !== null) await deps.runners.heard(orgId, row.host_id, row.claimed_by);
      return { lease: leaseOf(row, since) };
    },

    /** Appends in order after every stored line; the sequence numbers are reserved under the row's lock. */
    async appendLogs(ctx: RequestContext, orgId: string, id: string, request: AppendLogsRequestT): Promise<AppendLogsResponseT> {
      const now = nowIso();
      const { lines } = request;
      return db.transaction().execute(async (trx) => {
        const row = await deploymentsRepo.renewLease(trx, { orgId, id, leaseToken: request.leaseToken, expiresAt: renewal(), lines: lines.length });
        if (!row) throw await refusal(trx, orgId, id, request.leaseToken);
        const first = row.log_seq - lines.length + 1;
        await deploymentsRepo.insertLogs(trx, lines.map((l, i) => ({
          deployment_id: id, seq: first + i, attempt: row.attempt, stream: l.stream ?? 'stdout', line: l.line, at: l.at === undefined ? now : utc(l.at, now),
        })));
        await markCommitted(trx, ctx, now);
        return { appended: lines.length, lastSeq: row.log_seq, lease: leaseOf(row) };
      });
    },

    /**
     * in_progress → succeeded or failed under this lease. A success supersedes the deployment that
     * served before it. Repeating the same completion answers the same deployment again.
     */
    async complete(ctx: RequestContext, orgId: string, id: string, token: string, outcome: OutcomeT, reason?: string): Promise<Deployment> {
      const now = nowIso();
      const row = await db.transaction().execute(async (trx) => {
        const done = await compareAndSet(trx, ctx, {
          orgId, id, from: 'in_progress', to: outcome, leaseToken: token,
          // Seen now: however long the start took, its runner's reports take over from here.
          set: { lease_expires_at: null, finished_at: now, host_seen_at: now, reason: outcome === 'failed' ? reason ?? 'The runner reported a failure without a reason.' : null },
        }, now);
        if (!done) {
          const current = await deploymentsRepo.findInOrg(trx, orgId, id);
          const repeated = current?.lease_token === token && (current.state === outcome || (outcome === 'succeeded' && current.state === 'superseded'));
          if (repeated) return current;
          throw await refusal(trx, orgId, id, token, outcome);
        }
        if (outcome === 'succeeded') {
          const previous = await deploymentsRepo.succeededOf(trx, done.service_id, done.environment_id, done.id);
          if (previous) {
            await compareAndSet(trx, ctx, { orgId, id: previous.id, from: 'succeeded', to: 'superseded', set: { reason: `Superseded by ${done.id}.` }, eventData: { by: done.id } }, now);
          }
        }
        return done;
      });
      // The next queued deployment of this service and environment is claimable now.
      signals.notify(orgId);
      return toDeployment(row);
    },

    /**
     * The runner gives back a deployment it cannot finish (it is stopping): the attempt ends now, as
     * if its lease had run out, and a waiting runner is woken for it. Only under the lease it holds.
     */
    async abandon(ctx: RequestContext, orgId: string, id: string, token: string, reason?: string): Promise<Deployment> {
      const now = nowIso();
      const row = await db.transaction().execute(async (trx) => {
        const current = await deploymentsRepo.findInOrg(trx, orgId, id);
        if (current?.state !== 'in_progress' || current.lease_token !== token) throw await refusal(trx, orgId, id, token);
        const why = `Attempt ${current.attempt} was given back by its runner${reason !== undefined ? `: ${reason}` : ''}`;
        const moved = await endAttempt(trx, ctx, current, { maxAttempts: deps.maxAttempts, why, now });
        if (!moved) throw await refusal(trx, orgId, id, token);
        return moved;
      });
      signals.notify(orgId);
      return toDeployment(row);
    },

    /**
     * Which of these deployments still serve; a runner stops the processes of the others. With
     * `host`, the runner also says it runs them: they are its own, seen now, unless another runner
     * adopted one meanwhile (then that one is not answered either).
     */
    async serving(ctx: RequestContext, orgId: string, request: ServingRequestT): Promise<string[]> {
      const { deployments: ids, host } = request;
      // Those of environments it is no longer kept to do not serve here: it stops them, and a runner of theirs adopts them.
      const kept = await keptTo(ctx);
      if (host === undefined) return deploymentsRepo.servingAmong(db, orgId, ids, kept);
      const at = nowIso();
      // One transaction: a report is kept whole or not at all.
      return db.transaction().execute(async (trx) => {
        const answered = await deploymentsRepo.reportHosted(trx, orgId, ids, host, at, kept);
        const reports = request.processes?.filter((report) => answered.includes(report.deployment)) ?? [];
        if (reports.length > 0) await recordProcesses(trx, ctx, orgId, host, reports, at);
        return answered;
      });
    },

    /**
     * Hands orphans (serving deployments whose runner went away) to `host`, each to one runner, with
     * what to run. Their state stays `succeeded`; each adoption is a `deployment.adopted` event. One
     * whose pinned secret versions are gone cannot run again: it is marked stopped instead (see adoptOne).
     * `accepted` runs once the environments are known to be the runner's: a refused adoption records nothing.
     */
    async adopt(ctx: RequestContext, orgId: string, request: AdoptRequestT, accepted?: () => Promise<void>): Promise<AdoptResponseT> {
      const envIds = await environmentIds(ctx, orgId, request.environments);
      await accepted?.();
      const now = nowDate();
      const at = now.toISOString();
      const cutoff = new Date(now.getTime() - startedAt >= hostTimeoutMs ? now.getTime() - hostTimeoutMs : 0).toISOString();
      const limit = request.limit ?? 10;
      const adopted: AdoptResponseT['adopted'] = [];
      // Runners asking at once would all try the same oldest few and each lose most of them: each
      // tries a shuffle of more than it may take.
      for (const id of shuffled(await deploymentsRepo.orphans(db, orgId, envIds, cutoff, limit * 4))) {
        if (adopted.length >= limit) break;
        let taken;
        try {
          taken = await adoptOne(ctx, orgId, id, request.host, at, cutoff);
        } catch (error) {
          // Those adopted already are this runner's now: they go out, or they would wait a whole timeout unrun.
          if (adopted.length > 0) break;
          throw error;
        }
        if (taken !== null) adopted.push(taken);
      }
      return { adopted, hostTimeoutSeconds: deps.hostTimeoutSeconds, acceptsProcessReports: true, acceptsProcessAddresses: true, acceptsRunnerDetails: true, acceptsStopNotice: true };
    },

    /**
     * `host` stopped the processes of these deployments: orphans at once, for another runner (or its
     * next start) to adopt. Only those of environments the runner is kept to, as its reports: a
     * runner kept to staging cannot make production's deployments orphans.
     */
    async release(ctx: RequestContext, orgId: string, ids: string[], host: string): Promise<string[]> {
      if (ids.length === 0) return [];
      return deploymentsRepo.release(db, orgId, ids, host, await keptTo(ctx));
    },

    /** The periodic sweep: every organization's expired leases. */
    sweep: () => expire(null),

    /** The server listens from now: runners' retried heartbeats and reports can reach it. */
    listening(): void {
      startedAt = nowMs();
    },


    /** Sweeps every `intervalMs` (never two at once) until the returned function is called. */
    startSweeper(intervalMs: number, onError: (error: unknown) => void): () => void {
      let running = false;
      let lastTick = performance.now();
      const timer = setInterval(() => {
        // A process that was frozen (stopped, paused by its host, swapped out) longer than a lease
        // heard no heartbeat meanwhile: as after a start, the runners' retries land first.
        const now = performance.now();
        if (now - lastTick > leaseMs) startedAt = nowMs();
        lastTick = now;
        if (running) return;
        running = true;
        expire(null).catch(onError).finally(() => { running = false; });
      }, intervalMs);
      timer.unref();
      return () => clearInterval(timer);
    },
  };
}

export type RunnerService = ReturnType<typeof createRunnerService>;
