// Deployments: one service into one environment, with the spec and secret versions frozen at
// creation so that it (and any rollback to it) runs exactly what was asked for. Creation is one
// transaction of a few queries, then a signal wakes a waiting runner.
import type { Limits } from '../../platform/config.js';
import type { RequestContext } from '../../platform/context.js';
import { isForeignKeyViolation, type Db, type Dialect, type Executor } from '../../platform/db/database.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { cursorList, pageRequest, toPage, type Page } from '../../platform/pagination.js';
import { allows } from '../auth/roles.js';
import { assertUnlocked, configurationOf, loadEnvironment } from '../environments/environments.service.js';
import type { EnvironmentRow } from '../environments/environments.repo.js';
import { appendEvents } from '../events/event-log.js';
import { pinnedVersions, pinToCurrentVersions, type SecretStore, type SecretVersionInfo, type SecretVersionSource } from '../services/service-spec.js';
import { SPEC_LIMITS, type DeploymentSpecT, type PinnedSecretReferenceT, type ServiceSpec } from '../services/services.schemas.js';
import { loadService } from '../services/services.service.js';
import type { DeploymentSignals } from './deployment-signals.js';
import { moveDeployment } from './deployment-state.js';
import type { DeploymentState } from './deployment-states.js';
import { deploymentsRepo, type DeploymentRow } from './deployments.repo.js';
import { LOG_PAGE_DEFAULT, type CreateDeploymentInput, type Deployment, type DeploymentProcessT, type LogLineT, type LogStreamT, type ProcessExitT } from './deployments.schemas.js';
import { nowIso, nowDate } from '../../platform/clock.js';

/** What a deployment froze at creation. */
export interface Snapshot {
  service: { id: string; name: string; version: number };
  environment: { id: string; name: string };
  spec: DeploymentSpecT;
  /** What the spec was laid from; absent on deployments made before promotions, which cannot be promoted. */
  sources?: SpecSources;
}

/**
 * Which parts of a frozen spec are the service's, for a promotion to carry them into another
 * environment without the environment's: the service's own variables (absent when the spec's are
 * those alone, as when neither the environment nor the deployment laid any over them), the
 * deployment's own `variables`, and how many of the pinned secrets, the last ones, are the
 * environment's. A few bytes a deployment, and none of them a value that is not in the spec already.
 */
export interface SpecSources {
  serviceVariables?: Record<string, string>;
  overrides?: Record<string, string>;
  environmentSecrets?: number;
}

/** `snapshot` when the caller has it parsed already (it is the row's `snapshot` column). */
/** Deployments whose logs are removed in one transaction (SQLite holds its write lock meanwhile). */
const LOG_REMOVAL_BATCH = 50;

export function toDeployment(row: DeploymentRow, snapshot = JSON.parse(row.snapshot) as Snapshot): Deployment {
  return {
    id: row.id,
    service: snapshot.service,
    environment: snapshot.environment,
    state: row.state as DeploymentState,
    attempt: row.attempt,
    revision: row.revision,
    description: row.description,
    spec: snapshot.spec,
    ...(row.rollback_of !== null ? { rollbackOf: row.rollback_of } : {}),
    ...(row.promoted_from !== null ? { promotedFrom: row.promoted_from } : {}),
    createdBy: row.created_by,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    ...(row.started_at !== null ? { startedAt: row.started_at } : {}),
    ...(row.finished_at !== null ? { finishedAt: row.finished_at } : {}),
    ...(row.reason !== null ? { reason: row.reason } : {}),
    ...(row.logs_removed_at !== null ? { logsRemovedAt: row.logs_removed_at } : {}),
    ...(row.state === 'in_progress' && row.claimed_by !== null && row.lease_expires_at !== null
      ? { lease: { runner: row.claimed_by, expiresAt: row.lease_expires_at } } : {}),
    ...(row.state === 'succeeded' && row.process_state !== null && row.host_seen_at !== null ? { process: processOf(row, row.process_reported_at ?? row.host_seen_at) } : {}),
  };
}

function processOf(row: DeploymentRow, reportedAt: string): DeploymentProcessT {
  return {
    state: row.process_state as DeploymentProcessT['state'],
    exits: row.process_exits ?? 0,
    lastExit: row.process_last_exit === null ? null : JSON.parse(row.process_last_exit) as ProcessExitT,
    // A process that cannot be started again answers nowhere.
    ...(row.process_hostname !== null && row.process_port !== null && row.process_state !== 'stopped' ? { address: { hostname: row.process_hostname, port: row.process_port } } : {}),
    reportedAt,
  };
}

export async function loadDeployment(executor: Executor, orgId: string, id: string): Promise<DeploymentRow> {
  const row = await deploymentsRepo.findInOrg(executor, orgId, id);
  if (!row) throw errors.notFound('deployment', id);
  return row;
}

/**
 * Protected environments take deployments, and have them cancelled, by admins and owners only (and
 * the CLI operator).
 */
function assertMayDeploy(ctx: RequestContext, environment: EnvironmentRow, what?: string): void {
  if (environment.protected !== 1 || ctx.actor.kind === 'cli') return;
  if (!allows('admin', ctx.actor.role!, ctx.actor.instanceAdmin)) throw errors.protectedEnvironment(environment.name, ctx.actor.role ?? 'none', what);
}

/**
 * The spec a deployment freezes is bounded as a service's is (SLIPWAY_MAX_SPEC_BYTES): the service's
 * with the environment's configuration and the deployment's variables laid over, measured before its
 * secrets are pinned so that a service that fits deploys as it is. The refusal points at what to
 * change: the service when its own spec is over the bound (saved before it, or under a higher one),
 * else the environment when what it adds is enough to put it over (`withEnvironment`: the service's
 * spec with only the environment's laid over), else the deployment's own variables.
 */
function assertSpecFits(serviceSpec: string, withEnvironment: string, frozenSpec: string, limit: number): void {
  const bytes = Buffer.byteLength(frozenSpec);
  if (bytes <= limit) return;
  const own = frozenSpec === serviceSpec ? bytes : Buffer.byteLength(serviceSpec);
  if (own > limit) throw errors.specTooLarge('The service\'s spec', own, limit, '/service');
  const environment = withEnvironment === serviceSpec ? own : Buffer.byteLength(withEnvironment);
  throw environment > limit
    ? errors.specTooLarge('The deployment\'s spec (the service\'s, with the environment\'s variables and secrets laid over)', environment, limit, '/environment')
    : errors.specTooLarge('The deployment\'s spec (the service\'s, with the environment\'s variables and secrets and `variables` laid over)', bytes, limit, '/variables');
}

/** An environment's configuration columns when it has none (most): nothing to parse or lay over. */
const NONE = { variables: '{}', secrets: '[]' } as const;

/** Rollback targets and promotion sources: deployments that succeeded, whether or not something has superseded them since. */
const ROLLBACK_FROM: readonly DeploymentState[] = ['succeeded', 'superseded'];

/** The service's part of a promotion's source: its spec with the environment's taken out, its references unpinned, and its versions. */
function servicePartOf(snapshot: Snapshot & { sources: SpecSources }): { spec: ServiceSpec; pinned: PinnedSecretReferenceT[]; overrides: Record<string, string> | undefined } {
  const { spec, sources } = snapshot;
  const pinned = spec.secrets.slice(0, spec.secrets.length - (sources.environmentSecrets ?? 0));
  return {
    spec: {
      ...(spec.command !== undefined ? { command: spec.command } : {}),
      ...(spec.image !== undefined ? { image: spec.image } : {}),
      ...(spec.port !== undefined ? { port: spec.port } : {}),
      ...(spec.healthCheck !== undefined ? { healthCheck: spec.healthCheck } : {}),
      ...(spec.minReadySeconds !== undefined ? { minReadySeconds: spec.minReadySeconds } : {}),
      variables: sources.serviceVariables ?? spec.variables,
      secrets: pinned.map((r) => ({ secret: r.secret, ...(r.key !== undefined ? { key: r.key } : {}), ...(r.as !== undefined ? { as: r.as } : {}) })),
    },
    pinned,
    overrides: sources.overrides,
  };
}

export interface DeploymentsDeps {
  db: Db;
  dialect: Dialect;
  secrets: SecretVersionSource & Pick<SecretStore, 'missingVersions' | 'pinnedKeys'>;
  signals: Pick<DeploymentSignals, 'notify'>;
  limits: Pick<Limits, 'specBytes'>;
}

/**
 * A service's variables with the environment's and a deployment's laid over them are held to a
 * service's own bound; the refusal points at the environment when the service's and its own are
 * over it already (`withEnvironment`), else at the deployment's variables.
 */
function assertVariablesFit(withEnvironment: Record<string, string>, variables: Record<string, string>): void {
  const count = Object.keys(variables).length;
  if (count <= SPEC_LIMITS.variables) return;
  const before = Object.keys(withEnvironment).length;
  if (before > SPEC_LIMITS.variables) {
    throw errors.limitExceeded(`The service's variables with the environment's come to ${before}; a spec holds at most ${SPEC_LIMITS.variables}.`,
      { name: 'variables', value: SPEC_LIMITS.variables }, [{ pointer: '/environment', message: `would make ${before} variables with the service's, more than ${SPEC_LIMITS.variables}` }]);
  }
  throw errors.limitExceeded(`The service's variables with the environment's and this deployment's overrides come to ${count}; a spec holds at most ${SPEC_LIMITS.variables}.`,
    { name: 'variables', value: SPEC_LIMITS.variables }, [{ pointer: '/variables', message: `would make ${count} variables with the service's and the environment's, more than ${SPEC_LIMITS.variables}` }]);
}

export function createDeploymentsService(deps: DeploymentsDeps) {
  const { db, signals } = deps;
  /**
   * The environment a deployment goes into, read as a lock or an unlock being made leaves it
   * (PostgreSQL: they wait for each other), and refused while it is locked or, to roles below
   * admin, protected.
   */
  async function targetEnvironment(trx: Executor, ctx: RequestContext, orgId: string, idOrName: string, pointer?: string): Promise<EnvironmentRow> {
    const environment = await loadEnvironment(trx, orgId, idOrName, deps.dialect === 'postgres' ? 'deploy' : false, pointer);
    assertUnlocked(environment);
    assertMayDeploy(ctx, environment);
    return environment;
  }

  /**
   * Runs a transaction that enqueues a deployment. PostgreSQL: its service or environment deleted
   * by a concurrent request is found gone by the foreign key at the insert, and is a 404 like one
   * deleted before.
   */
  async function enqueueing(work: (trx: Executor) => Promise<Deployment>, named: () => { service: string; environment: string }): Promise<Deployment> {
    try {
      return await db.transaction().execute(work);
    } catch (error) {
      if (!isForeignKeyViolation(error)) throw error;
      const constraint = String((error as { constraint?: unknown }).constraint ?? '');
      throw constraint.includes('service') ? errors.notFound('service', named().service) : errors.notFound('environment', named().environment);
    }
  }

  /**
   * The spec a deployment into `environment` freezes: `spec` (the service's, as `specJson`) with the
   * environment's configuration and `overrides` laid over, checked against the bounds and its
   * secrets pinned (for a promotion, the spec's own references to the versions `promoted.pinned`
   * names), and what it was laid from. `spec` becomes the frozen one.
   */
  async function freeze(
    trx: Executor, orgId: string, spec: ServiceSpec, specJson: string, environment: EnvironmentRow,
    overrides: Record<string, string> | undefined, promoted?: { pinned: ReadonlyMap<string, SecretVersionInfo>; overridesAre: string },
  ): Promise<{ spec: DeploymentSpecT; sources: SpecSources }> {
    // The environment's configuration goes over the service's, the deployment's own variables over both.
    const configured = environment.variables !== NONE.variables || environment.secrets !== NONE.secrets;
    const envConfig = configured ? configurationOf(environment) : undefined;
    const serviceVariables = spec.variables;
    const environmentVariables = { ...serviceVariables, ...envConfig?.variables };
    const variables = { ...environmentVariables, ...overrides };
    assertVariablesFit(environmentVariables, variables);
    const allSecrets = [...spec.secrets, ...envConfig?.secrets ?? []];
    const withEnvironment = configured ? JSON.stringify({ ...spec, variables: environmentVariables, secrets: allSecrets }) : specJson;
    assertSpecFits(specJson, withEnvironment, overrides === undefined ? withEnvironment : JSON.stringify({ ...spec, variables, secrets: allSecrets }), deps.limits.specBytes);
    // Secrets may have changed since the service was saved: check again, against the versions pinned now.
    const secrets = await pinToCurrentVersions(deps.secrets, trx, orgId, spec, { spec: '/service/spec', environment: envConfig, overrides, ...promoted, hold: true });
    const environmentSecrets = envConfig?.secrets.length ?? 0;
    return {
      // The freshly parsed spec becomes the deployment's, with its variables and secrets resolved.
      spec: Object.assign(spec, { variables, secrets }),
      sources: {
        ...(configured || overrides !== undefined ? { serviceVariables } : {}),
        ...(overrides !== undefined ? { overrides } : {}),
        ...(environmentSecrets > 0 ? { environmentSecrets } : {}),
      },
    };
  }

  /** Inserts a queued deployment and its event; the caller's transaction commits both. */
  async function enqueue(
    trx: Executor, ctx: RequestContext, orgId: string, snapshot: Snapshot,
    fields: Pick<DeploymentRow, 'revision' | 'description' | 'rollback_of'> & Partial<Pick<DeploymentRow, 'promoted_from'>>, now: string,
  ): Promise<Deployment> {
    // Every column written out: a literal that starts with a spread of `fields` costs V8 ~20 µs here.
    const full: DeploymentRow = {
      id: newId('deployment'), org_id: orgId, service_id: snapshot.service.id, environment_id: snapshot.environment.id,
      state: 'queued', attempt: 1, revision: fields.revision, description: fields.description, snapshot: JSON.stringify(snapshot),
      rollback_of: fields.rollback_of, promoted_from: fields.promoted_from ?? null, reason: null, lease_token: null, lease_expires_at: null, claimed_by: null,
      log_seq: 0, logs_removed_at: null, created_by: ctx.actor.id, created_at: now, updated_at: now, started_at: null, finished_at: null, host_id: null, host_seen_at: null,
      process_state: null, process_exits: null, process_last_exit: null, process_reported_at: null, process_hostname: null, process_port: null,
    };
    await deploymentsRepo.insert(trx, full);
    await appendEvents(trx, ctx, [{
      orgId, type: 'deployment.created', subject: { type: 'deployment', id: full.id },
      data: {
        service: snapshot.service, environment: snapshot.environment, revision: full.revision, state: 'queued', attempt: 1,
        secretVersions: snapshot.spec.secrets.map((s) => ({ secret: s.secret, version: s.version })),
        ...(full.rollback_of !== null ? { rollbackOf: full.rollback_of } : {}),
        ...(full.promoted_from !== null ? { promotedFrom: full.promoted_from } : {}),
      },
    }], now);
    return toDeployment(full, snapshot);
  }

  return {
    async create(ctx: RequestContext, orgId: string, input: CreateDeploymentInput): Promise<Deployment> {
      const now = nowIso();
      const deployment = await enqueueing(async (trx) => {
        const service = await loadService(trx, orgId, input.service, false, '/service');
        const environment = await targetEnvironment(trx, ctx, orgId, input.environment, '/environment');
        const frozen = await freeze(trx, orgId, JSON.parse(service.spec) as ServiceSpec, service.spec, environment, input.variables);
        const snapshot: Snapshot = {
          service: { id: service.id, name: service.name, version: service.version },
          environment: { id: environment.id, name: environment.name },
          ...frozen,
        };
        return enqueue(trx, ctx, orgId, snapshot, { revision: input.revision ?? null, description: input.description ?? '', rollback_of: null }, now);
      }, () => input);
      signals.notify(orgId);
      return deployment;
    },

    async list(orgId: string, query: { limit?: number; cursor?: string; service?: string; environment?: string; state?: string[] }): Promise<Page<Deployment>> {
      const serviceId = query.service !== undefined ? (await loadService(db, orgId, query.service)).id : undefined;
      const environmentId = query.environment !== undefined ? (await loadEnvironment(db, orgId, query.environment)).id : undefined;
      // Bound to ids, not the names a caller may give instead.
      const list = cursorList('deployments', { org: orgId, service: serviceId, environment: environmentId, state: query.state });
      const page = pageRequest(list, query);
      const rows = await deploymentsRepo.list(db, deps.dialect, orgId, { ...page, serviceId, environmentId, states: query.state });
      const result = toPage(list, rows, page.limit, (r) => r.id);
      return { items: result.items.map((r) => toDeployment(r)), nextCursor: result.nextCursor };
    },

    async get(orgId: string, id: string): Promise<Deployment> {
      return toDeployment(await loadDeployment(db, orgId, id));
    },

    /** Queued or in progress → cancelled; a runner working on it is told to stop at its next call. */
    async cancel(ctx: RequestContext, orgId: string, id: string, reason?: string): Promise<Deployment> {
      const now = nowIso();
      const { row } = await db.transaction().execute(async (trx) => {
        const target = await loadDeployment(trx, orgId, id);
        // Read as a change of its protection being made leaves it (PostgreSQL: they wait for each
        // other), as for a deployment into it: once protecting it has answered, no developer cancels there.
        assertMayDeploy(ctx, await loadEnvironment(trx, orgId, target.environment_id, deps.dialect === 'postgres' ? 'deploy' : false), 'cancel its deployments');
        return moveDeployment(trx, ctx, {
          orgId, id, to: 'cancelled', set: { finished_at: now, lease_expires_at: null, reason: reason ?? `Cancelled by ${ctx.actor.id}.` },
        }, target);
      });
      // The next deployment of the same service and environment may be claimable now.
      signals.notify(orgId);
      return toDeployment(row);
    },

    /** A new deployment from an earlier succeeded one's snapshot: same spec, same secret versions, same revision. */
    async rollback(ctx: RequestContext, orgId: string, id: string, input: { description?: string | undefined }): Promise<Deployment> {
      const now = nowIso();
      let snapshot: Snapshot | undefined;
      const deployment = await enqueueing(async (trx) => {
        const target = await loadDeployment(trx, orgId, id);
        if (!ROLLBACK_FROM.includes(target.state as DeploymentState)) {
          throw errors.conflict('not_rollbackable', `Deployment ${id} is ${target.state}: only a deployment that succeeded (succeeded or superseded) can be rolled back to.`, {
            state: target.state, rollbackFrom: ROLLBACK_FROM,
          });
        }
        const environment = await targetEnvironment(trx, ctx, orgId, target.environment_id);
        snapshot = JSON.parse(target.snapshot) as Snapshot;
        // The spec, its version and the secret versions are the earlier deployment's; the names are
        // today's, as a new deployment's are: a service or environment renamed since shows as it is now.
        const service = await loadService(trx, orgId, target.service_id);
        snapshot.service = { ...snapshot.service, name: service.name };
        snapshot.environment = { ...snapshot.environment, name: environment.name };
        // A pinned version destroyed since would only fail at the claim: refuse now, with nothing written.
        const missing = await deps.secrets.missingVersions(trx, orgId, pinnedVersions(snapshot.spec));
        if (missing.length > 0) throw errors.secretVersionsGone(missing, `Deployment ${id} cannot be rolled back to`);
        return enqueue(trx, ctx, orgId, snapshot, {
          revision: target.revision, description: input.description ?? `Rollback to ${target.id}`, rollback_of: target.id,
        }, now);
      }, () => ({ service: snapshot!.service.name, environment: snapshot!.environment.name }));
      signals.notify(orgId);
      return deployment;
    },

    /**
     * A new deployment into another environment from one that succeeded: its service's part (the
     * spec, the secret versions the service's references pinned, the revision, the deployment's own
     * variables, with `variables` laid over those) with the target environment's configuration laid
     * over it and its secrets pinned to their current versions, as a deployment there would get.
     */
    async promote(ctx: RequestContext, orgId: string, id: string, input: { environment: string; description?: string | undefined; variables?: Record<string, string> | undefined }): Promise<Deployment> {
      const now = nowIso();
      let serviceName = '';
      const deployment = await enqueueing(async (trx) => {
        const source = await loadDeployment(trx, orgId, id);
        const from = JSON.parse(source.snapshot) as Snapshot;
        if (!ROLLBACK_FROM.includes(source.state as DeploymentState)) {
          throw errors.conflict('not_promotable', `Deployment ${id} is ${source.state}: only a deployment that succeeded (succeeded or superseded) can be promoted.`, {
            state: source.state, promoteFrom: ROLLBACK_FROM,
          });
        }
        if (from.sources === undefined) {
          throw errors.conflict('not_promotable', `Deployment ${id} was made by an earlier version of Slipway, which did not record which of its variables and secrets were its environment's: deploy the service into the other environment instead (POST …/deployments).`, {
            state: source.state, promoteFrom: ROLLBACK_FROM,
          });
        }
        const environment = await targetEnvironment(trx, ctx, orgId, input.environment, '/environment');
        if (environment.id === source.environment_id) {
          throw errors.invalidRequest(`Deployment ${id} is in ${environment.name} already: a promotion goes into another environment. To run it here again, roll it back to it (POST …/deployments/${id}/rollback).`,
            [{ pointer: '/environment', message: `is the deployment's own environment (${environment.name})` }]);
        }
        const service = await loadService(trx, orgId, source.service_id);
        serviceName = service.name;
        const part = servicePartOf(from as Snapshot & { sources: SpecSources });
        // The versions the service's references pinned, carried over; refused up front, with nothing written, when one is gone.
        const { versions, missing } = await deps.secrets.pinnedKeys(trx, orgId, pinnedVersions({ secrets: part.pinned }));
        if (missing.length > 0) throw errors.secretVersionsGone(missing, `Deployment ${id} cannot be promoted`);
        const overrides = part.overrides !== undefined || input.variables !== undefined ? { ...part.overrides, ...input.variables } : undefined;
        // A clash of the variables carried over with the target environment is fixed there, or by deploying instead: said so.
        const overridesAre = part.overrides !== undefined ? `the variables deployment ${id} was made with${input.variables !== undefined ? ' and this request\'s' : ''}, which a promotion carries over` : 'the deployment\'s variables';
        const frozen = await freeze(trx, orgId, part.spec, JSON.stringify(part.spec), environment, overrides, { pinned: versions, overridesAre });
        const snapshot: Snapshot = {
          // The service's part is the source's, and so the version it was taken from; the names are today's.
          service: { id: service.id, name: service.name, version: from.service.version },
          environment: { id: environment.id, name: environment.name },
          ...frozen,
        };
        const description = input.description ?? `Promotion of ${source.id} from ${(await loadEnvironment(trx, orgId, source.environment_id)).name}`;
        return enqueue(trx, ctx, orgId, snapshot, {
          revision: source.revision, description, rollback_of: null, promoted_from: source.id,
        }, now);
      }, () => ({ service: serviceName, environment: input.environment }));
      signals.notify(orgId);
      return deployment;
    },

    /** What serves in an environment: its succeeded deployment per service. */
    async active(orgId: string, environment: string, query: { limit?: number; cursor?: string; service?: string }): Promise<Page<Deployment>> {
      const env = await loadEnvironment(db, orgId, environment);
      const serviceId = query.service !== undefined ? (await loadService(db, orgId, query.service)).id : undefined;
      // Cursors name a service (those of the list's earlier form, which named a deployment, are refused).
      const list = cursorList('active-by-service', { org: orgId, environment: env.id, service: serviceId });
      const page = pageRequest(list, query);
      const result = toPage(list, await deploymentsRepo.activeIn(db, orgId, env.id, { ...page, serviceId }), page.limit, (r) => r.service_id);
      return { items: result.items.map((r) => toDeployment(r)), nextCursor: result.nextCursor };
    },

    async logs(orgId: string, id: string, query: { after?: number; limit?: number; tail?: number }) {
      if (query.tail !== undefined && (query.after !== undefined || query.limit !== undefined)) {
        const other = query.after !== undefined ? 'after' : 'limit';
        throw errors.invalidRequest(`tail reads the last lines, a page from after reads on: send one or the other, not tail with ${other}.`, [{ pointer: `/query/${other}`, message: 'is not taken with tail' }]);
      }
      const after = query.after ?? 0;
      const limit = query.tail ?? query.limit ?? LOG_PAGE_DEFAULT;
      // The state is read first: a follower that sees a final state then gets every line written before it.
      const row = await loadDeployment(db, orgId, id);
      const lines = query.tail !== undefined ? await deploymentsRepo.readLastLogs(db, id, query.tail) : await deploymentsRepo.readLogs(db, id, after, limit);
      const page = lines.slice(0, limit);
      return {
        lines: page.map((l): LogLineT => ({ seq: l.seq, attempt: l.attempt, stream: l.stream as LogStreamT, line: l.line, at: l.at })),
        nextAfter: page.length > 0 ? page[page.length - 1]!.seq : after,
        hasMore: query.tail === undefined && lines.length > limit,
        state: row.state as DeploymentState,
        ...(row.logs_removed_at !== null ? { removedAt: row.logs_removed_at } : {}),
      };
    },

    /**
     * Removes the logs of deployments that ended (failed, cancelled, superseded) more than
     * `retentionDays` ago, a batch per transaction; those serving keep theirs. Returns how many
     * deployments' logs went.
     */
    async removeExpiredLogs(retentionDays: number, now = nowDate()): Promise<number> {
      const cutoff = new Date(now.getTime() - retentionDays * 86_400_000).toISOString();
      let removed = 0;
      for (;;) {
        const batch = await db.transaction().execute((trx) => deploymentsRepo.removeLogsEndedBefore(trx, cutoff, now.toISOString(), LOG_REMOVAL_BATCH, deps.dialect === 'postgres'));
        removed += batch.removed;
        if (batch.found < LOG_REMOVAL_BATCH) return removed;
      }
    },

    /** Across every organization: deployments waiting and running, and the oldest one waiting (metrics). */
    pending() {
      return deploymentsRepo.pending(db);
    },
  };
}

export type DeploymentsService = ReturnType<typeof createDeploymentsService>;
