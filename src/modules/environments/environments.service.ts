// Environments: where deployments go (`production`, `staging`, …), with the variables and secret
// references every deployment into one gets besides its service's. A protected environment takes
// deployments from admins and owners only. Deleting one is refused while a deployment into it is
// queued or in progress.
import type { Limits } from '../../platform/config.js';
import type { RequestContext } from '../../platform/context.js';
import { isUniqueViolation, type Db, type Dialect, type Executor } from '../../platform/db/database.js';
import { transaction } from '../../platform/db/dry-run.js';
import { errors } from '../../platform/errors.js';
import { checkExpected, type Expected } from '../../platform/etags.js';
import { newId } from '../../platform/ids.js';
import { cursorList, pageRequest, toPage, type Page } from '../../platform/pagination.js';
import { deleteWithDeployments } from '../deployments/deployment-history.js';
import { appendEvents, changesOf } from '../events/event-log.js';
import { byName, configurationSummary, normalizeReferences, pinToCurrentVersions, type Configuration, type SecretVersionSource } from '../services/service-spec.js';
import type { SecretReferenceT } from '../services/services.schemas.js';
import { environmentsRepo, type EnvironmentLock, type EnvironmentRow } from './environments.repo.js';
import type { Environment } from './environments.schemas.js';
import { nowIso } from '../../platform/clock.js';

/** The variables and secret references of an environment's row. */
export function configurationOf(row: Pick<EnvironmentRow, 'variables' | 'secrets'>): Configuration {
  return { variables: JSON.parse(row.variables) as Record<string, string>, secrets: JSON.parse(row.secrets) as SecretReferenceT[] };
}

export function toEnvironment(row: EnvironmentRow): Environment {
  return {
    id: row.id, name: row.name, description: row.description, protected: row.protected === 1, ...configurationOf(row),
    lock: lockOf(row),
    version: row.version, createdAt: row.created_at, updatedAt: row.updated_at,
  };
}

/** Why an environment is locked, by whom and since when; null while it is not. */
export function lockOf(row: Pick<EnvironmentRow, 'lock_reason' | 'locked_by' | 'locked_at'>): Environment['lock'] {
  return row.locked_at === null ? null : { reason: row.lock_reason ?? '', lockedBy: row.locked_by, lockedAt: row.locked_at };
}

/**
 * A locked environment takes no new deployment (created, rolled back to, promoted into), whoever
 * asks: it is unlocked first. `what` says what was refused.
 */
export function assertUnlocked(environment: EnvironmentRow, what = 'deploy to it'): void {
  const lock = lockOf(environment);
  if (lock !== null) throw errors.environmentLocked(environment.name, lock, what);
}

const tagOf = (row: EnvironmentRow) => ({ kind: 'environment', name: row.name, version: row.version, createdAt: row.created_at });

const nameTaken = (name: string) =>
  errors.conflict('environment_name_taken', `An environment named "${name}" already exists in this organization.`, { conflicts: [{ pointer: '/name', name }] });

/** The environment, by id or name, or the 404 (pointing at `pointer` when a body names it); `lock` holds its row (PostgreSQL) until the transaction ends. */
export async function loadEnvironment(executor: Executor, orgId: string, idOrName: string, lock: EnvironmentLock = false, pointer?: string): Promise<EnvironmentRow> {
  const row = await environmentsRepo.findInOrg(executor, orgId, idOrName, lock);
  if (!row) throw errors.notFound('environment', idOrName, pointer);
  return row;
}

export interface EnvironmentInput {
  name: string;
  description?: string | undefined;
  protected?: boolean | undefined;
  variables?: Record<string, string> | undefined;
  secrets?: SecretReferenceT[] | undefined;
}

export function createEnvironmentsService(deps: { db: Db; dialect: Dialect; secrets: SecretVersionSource; limits: Pick<Limits, 'specBytes'> }) {
  const { db } = deps;

  /**
   * The configuration as stored (JSON), after the checks a service's spec gets: `as` only with
   * `key`, its size, every secret and key exists, nothing sets PORT, no variable comes from two
   * places within it. A clash with a service's own is found when a deployment is created.
   */
  async function checkedConfiguration(executor: Executor, orgId: string, input: Partial<Configuration>, current?: Configuration): Promise<{ config: Configuration; variables: string; secrets: string }> {
    const config: Configuration = {
      // By name: the same variables given in another order are no change.
      variables: input.variables !== undefined ? byName(input.variables) : current?.variables ?? {},
      secrets: input.secrets !== undefined ? normalizeReferences(input.secrets, '') : current?.secrets ?? [],
    };
    const variables = JSON.stringify(config.variables);
    const secrets = JSON.stringify(config.secrets);
    const touched = input.variables !== undefined || input.secrets !== undefined;
    const bytes = Buffer.byteLength(variables) + Buffer.byteLength(secrets);
    // One made under a higher limit than now's can still be renamed, protected, and made smaller.
    const grows = current === undefined || (touched && bytes > Buffer.byteLength(JSON.stringify(current.variables)) + Buffer.byteLength(JSON.stringify(current.secrets)));
    if (bytes > deps.limits.specBytes && grows) {
      throw errors.specTooLarge('The environment\'s variables and secrets', bytes, deps.limits.specBytes, input.variables !== undefined ? '/variables' : '/secrets');
    }
    if (touched) await pinToCurrentVersions(deps.secrets, executor, orgId, config, { spec: '' });
    return { config, variables, secrets };
  }

  /**
   * Read for a change: locked on PostgreSQL, where concurrent changes would otherwise each work
   * out what they change from the same old row (an event per request for one change, a stale `from`).
   */
  const loadForChange = (executor: Executor, orgId: string, idOrName: string) => loadEnvironment(executor, orgId, idOrName, deps.dialect === 'postgres');

  /** Sets (`reason`) or lifts (null) the lock, with its event; the same lock again, or none lifted, is no change and appends none. */
  async function changeLock(ctx: RequestContext, orgId: string, idOrName: string, reason: string | null, expected?: Expected): Promise<Environment> {
    const now = nowIso();
    return db.transaction().execute(async (trx) => {
      const current = await loadEnvironment(trx, orgId, idOrName, deps.dialect === 'postgres' ? 'freeze' : false);
      checkExpected(tagOf(current), expected);
      const was = lockOf(current);
      if (reason === null ? was === null : was?.reason === reason) return toEnvironment(current);
      const version = current.version + 1;
      const row = await environmentsRepo.update(trx, current.id, reason === null
        ? { lock_reason: null, locked_by: null, locked_at: null, version, updated_at: now }
        : { lock_reason: reason, locked_by: ctx.actor.id, locked_at: now, version, updated_at: now });
      if (row === undefined) throw errors.notFound('environment', idOrName);
      await appendEvents(trx, ctx, [reason === null
        ? { orgId, type: 'environment.unlocked', subject: { type: 'environment', id: current.id }, data: { name: row.name, lock: was } }
        : { orgId, type: 'environment.locked', subject: { type: 'environment', id: current.id }, data: { name: row.name, reason, ...(was !== null ? { replaced: was } : {}) } }], now);
      return toEnvironment(row);
    });
  }

  return {
    async create(ctx: RequestContext, orgId: string, input: EnvironmentInput, dryRun = false): Promise<Environment> {
      const now = nowIso();
      let row: EnvironmentRow | undefined;
      try {
        await transaction(db, dryRun, async (trx) => {
          const { config, variables, secrets } = await checkedConfiguration(trx, orgId, input);
          row = {
            id: newId('environment'), org_id: orgId, name: input.name, description: input.description ?? '', protected: input.protected ? 1 : 0,
            variables, secrets, lock_reason: null, locked_by: null, locked_at: null, version: 1, created_at: now, updated_at: now,
          };
          await environmentsRepo.insert(trx, row);
          await appendEvents(trx, ctx, [{
            orgId, type: 'environment.created', subject: { type: 'environment', id: row.id }, data: { name: row.name, protected: row.protected === 1, ...configurationSummary(config) },
          }], now);
        });
      } catch (error) {
        if (isUniqueViolation(error)) throw nameTaken(input.name);
        throw error;
      }
      return toEnvironment(row!);
    },

    async list(orgId: string, query: { limit?: number; cursor?: string }): Promise<Page<Environment>> {
      const list = cursorList('environments', { org: orgId });
      const page = pageRequest(list, query);
      const result = toPage(list, await environmentsRepo.list(db, orgId, page), page.limit, (r) => r.id);
      return { items: result.items.map(toEnvironment), nextCursor: result.nextCursor };
    },

    async get(orgId: string, idOrName: string): Promise<Environment> {
      return toEnvironment(await loadEnvironment(db, orgId, idOrName));
    },

    async update(ctx: RequestContext, orgId: string, idOrName: string, patch: Partial<EnvironmentInput>, opts: { expected?: Expected; dryRun?: boolean } = {}): Promise<Environment> {
      const dryRun = opts.dryRun === true;
      const now = nowIso();
      try {
        return await transaction(db, dryRun, async (trx) => {
          // Held as a lock is (FOR UPDATE): a change of its protection or its configuration waits for
          // the deployments being made into it, which read the row FOR KEY SHARE, and they for it.
          // Once it has answered, none is made as the environment was before.
          const current = await loadEnvironment(trx, orgId, idOrName, deps.dialect === 'postgres' ? 'freeze' : false);
          checkExpected(tagOf(current), opts.expected);
          // As an organization's: the event says what changed from what, and no change appends none.
          const before = toEnvironment(current);
          const changes = changesOf(['name', 'description', 'protected'], before, patch);
          const checked = await checkedConfiguration(trx, orgId, patch, before);
          // Values are not in the event: which parts changed, and the names they hold now.
          const configChanged = [
            ...(checked.variables !== current.variables ? ['variables'] : []),
            ...(checked.secrets !== current.secrets ? ['secrets'] : []),
          ];
          const changed = [...changes.changed, ...configChanged];
          if (changed.length === 0) return before;
          const row = await environmentsRepo.update(trx, current.id, {
            ...(changed.includes('name') ? { name: patch.name! } : {}),
            ...(changed.includes('description') ? { description: patch.description! } : {}),
            ...(changed.includes('protected') ? { protected: patch.protected ? 1 : 0 } : {}),
            ...(changed.includes('variables') ? { variables: checked.variables } : {}),
            ...(changed.includes('secrets') ? { secrets: checked.secrets } : {}),
            version: current.version + 1,
            updated_at: now,
          });
          // PostgreSQL: deleted by a concurrent request since it was read.
          if (row === undefined) throw errors.notFound('environment', idOrName);
          await appendEvents(trx, ctx, [{
            orgId, type: 'environment.updated', subject: { type: 'environment', id: current.id },
            data: { name: row.name, protected: row.protected === 1, ...changes, changed, ...(configChanged.length > 0 ? configurationSummary(checked.config, before) : {}) },
          }], now);
          return toEnvironment(row);
        });
      } catch (error) {
        if (isUniqueViolation(error)) throw nameTaken(patch.name ?? '');
        throw error;
      }
    },

    /**
     * Locks it (a deploy freeze), or says why anew; the deployments queued or running in it go on.
     * Holds the row against the deployments being made into it (PostgreSQL): once this answers, no
     * deployment into it is created until it is unlocked.
     */
    async lock(ctx: RequestContext, orgId: string, idOrName: string, reason: string, expected?: Expected): Promise<Environment> {
      return changeLock(ctx, orgId, idOrName, reason, expected);
    },

    /** Lifts its lock; nothing to do when it has none. */
    async unlock(ctx: RequestContext, orgId: string, idOrName: string, expected?: Expected): Promise<Environment> {
      return changeLock(ctx, orgId, idOrName, null, expected);
    },

    /**
     * Refused while a deployment into it is queued or in progress, and, unless `force`, while a
     * service serves in it; its finished deployments go with it.
     */
    async remove(ctx: RequestContext, orgId: string, idOrName: string, opts: { force: boolean; expected?: Expected } = { force: false }): Promise<void> {
      // A locked environment is left as it is, deployments and all, until it is unlocked.
      await deleteWithDeployments(db, deps.dialect, ctx, orgId, idOrName, {
        kind: 'environment', load: loadForChange, delete: environmentsRepo.delete, refuseServing: !opts.force, check: (row) => {
          checkExpected(tagOf(row), opts.expected);
          assertUnlocked(row, 'delete it');
        },
      });
    },
  };
}

export type EnvironmentsService = ReturnType<typeof createEnvironmentsService>;
