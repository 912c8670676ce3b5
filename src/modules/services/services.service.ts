// Services: what a deployment runs. Saving one checks its secret references against the secret
// store (an unknown secret or key is refused now, not at deploy time); deleting one is refused
// while a deployment of it is queued or in progress.
import type { Limits } from '../../platform/config.js';
import type { RequestContext } from '../../platform/context.js';
import { isUniqueViolation, type Db, type Dialect, type Executor } from '../../platform/db/database.js';
import { transaction } from '../../platform/db/dry-run.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { cursorList, pageRequest, toPage, type Page } from '../../platform/pagination.js';
import { deleteWithDeployments } from '../deployments/deployment-history.js';
import { checkExpected, type Expected } from '../../platform/etags.js';
import { appendEvents, changesOf } from '../events/event-log.js';
import { byName, configurationSummary, normalizeSpec, runFieldChanges, pinToCurrentVersions, type SecretVersionSource } from './service-spec.js';
import { assertUnlocked } from '../environments/environments.service.js';
import { environmentsRepo } from '../environments/environments.repo.js';
import { servicesRepo, type ServiceRow } from './services.repo.js';
import type { Service, ServiceSpec, ServiceSpecInput } from './services.schemas.js';
import { nowIso } from '../../platform/clock.js';

export function toService(row: ServiceRow): Service {
  return {
    id: row.id, name: row.name, description: row.description, version: row.version, spec: JSON.parse(row.spec) as ServiceSpec,
    createdAt: row.created_at, updatedAt: row.updated_at,
  };
}

/**
 * The service, by id or name, or the 404 (pointing at `pointer` when a body names it); `lock` holds
 * its row (PostgreSQL) until the transaction ends.
 */
export async function loadService(executor: Executor, orgId: string, idOrName: string, lock = false, pointer?: string): Promise<ServiceRow> {
  const row = await servicesRepo.findInOrg(executor, orgId, idOrName, lock);
  if (!row) throw errors.notFound('service', idOrName, pointer);
  return row;
}

/** A service as its preconditions see it. */
const tagOf = (row: ServiceRow) => ({ kind: 'service', name: row.name, version: row.version, createdAt: row.created_at });

/** A stored spec as it would be saved now (its variables in the order of their names). */
function resaved(json: string): string {
  const spec = JSON.parse(json) as ServiceSpec;
  return JSON.stringify({ ...spec, variables: byName(spec.variables) });
}

/**
 * What a `service.updated` event says of a changed spec: its configuration's summary, and the run
 * fields that differ, with both sides (what GET shows any viewer), so that the log answers who
 * changed what runs, and to what.
 */
const specSummary = (spec: ServiceSpec, before: ServiceSpec) => ({ ...configurationSummary(spec, before), specChanges: runFieldChanges(before, spec) });

const nameTaken = (name: string) =>
  errors.conflict('service_name_taken', `A service named "${name}" already exists in this organization.`, { conflicts: [{ pointer: '/name', name }] });

export interface ServiceInput {
  name: string;
  description?: string | undefined;
  spec: ServiceSpecInput;
}

export function createServicesService(deps: { db: Db; dialect: Dialect; secrets: SecretVersionSource; limits: Pick<Limits, 'specBytes'> }) {
  const { db } = deps;
  /** Read for a change: locked on PostgreSQL, where two requests could otherwise both pass If-Match. */
  const loadForChange = (executor: Executor, orgId: string, idOrName: string) => loadService(executor, orgId, idOrName, deps.dialect === 'postgres');

  /**
   * Structural rules, its size as stored (every list of services, and of their deployments, carries
   * specs whole), then every secret and key must exist and no variable may be set twice.
   */
  async function checkedSpec(executor: Executor, orgId: string, input: ServiceSpecInput): Promise<{ spec: ServiceSpec; json: string }> {
    const spec = normalizeSpec(input);
    const json = JSON.stringify(spec);
    const bytes = Buffer.byteLength(json);
    if (bytes > deps.limits.specBytes) throw errors.specTooLarge('The spec', bytes, deps.limits.specBytes, '/spec');
    await pinToCurrentVersions(deps.secrets, executor, orgId, spec);
    return { spec, json };
  }

  return {
    async create(ctx: RequestContext, orgId: string, input: ServiceInput, dryRun = false): Promise<Service> {
      const now = nowIso();
      try {
        return await transaction(db, dryRun, async (trx) => {
          const { spec, json } = await checkedSpec(trx, orgId, input.spec);
          const row: ServiceRow = {
            id: newId('service'), org_id: orgId, name: input.name, description: input.description ?? '', spec: json, version: 1,
            created_at: now, updated_at: now,
          };
          await servicesRepo.insert(trx, row);
          await appendEvents(trx, ctx, [{ orgId, type: 'service.created', subject: { type: 'service', id: row.id }, data: { name: row.name, version: 1, ...configurationSummary(spec) } }], now);
          return toService(row);
        });
      } catch (error) {
        if (isUniqueViolation(error)) throw nameTaken(input.name);
        throw error;
      }
    },

    async list(orgId: string, query: { limit?: number; cursor?: string }): Promise<Page<Service>> {
      const list = cursorList('services', { org: orgId });
      const page = pageRequest(list, query);
      const result = toPage(list, await servicesRepo.list(db, orgId, page), page.limit, (r) => r.id);
      return { items: result.items.map(toService), nextCursor: result.nextCursor };
    },

    async get(orgId: string, idOrName: string): Promise<Service> {
      return toService(await loadService(db, orgId, idOrName));
    },

    /**
     * Top-level fields are replaced as given; `spec` is replaced whole. Deployments already made
     * keep their snapshot. A patch that changes nothing makes no new version and no event.
     */
    async update(ctx: RequestContext, orgId: string, idOrName: string, patch: Partial<ServiceInput>, opts: { expected?: Expected; dryRun?: boolean } = {}): Promise<Service> {
      const { expected, dryRun = false } = opts;
      const now = nowIso();
      try {
        return await transaction(db, dryRun, async (trx) => {
          const current = await loadForChange(trx, orgId, idOrName);
          checkExpected(tagOf(current), expected);
          const checked = patch.spec !== undefined ? await checkedSpec(trx, orgId, patch.spec) : undefined;
          const { changed, from, to } = changesOf(['name', 'description'] as const, current, patch);
          // Against the stored spec as it would be saved now: one saved before its variables were
          // kept in the order of their names is no change for being given in another order.
          const specChanged = checked !== undefined && checked.json !== resaved(current.spec);
          if (changed.length === 0 && !specChanged) return toService(current);
          const row = await servicesRepo.update(trx, current.id, current.version, {
            ...(changed.includes('name') ? { name: patch.name! } : {}),
            ...(changed.includes('description') ? { description: patch.description! } : {}),
            ...(specChanged ? { spec: checked.json } : {}),
            updated_at: now,
          });
          // Changed by a request since it was read: not while the row is held (PostgreSQL) or the
          // transaction runs alone (SQLite), but the compare-and-set does not rely on either.
          if (row === undefined) throw errors.writeConflict();
          await appendEvents(trx, ctx, [{
            orgId, type: 'service.updated', subject: { type: 'service', id: row.id },
            data: {
              name: row.name, version: row.version, changed: specChanged ? [...changed, 'spec'] : changed, from, to,
              ...(specChanged ? specSummary(checked.spec, JSON.parse(current.spec) as ServiceSpec) : {}),
            },
          }], now);
          return toService(row);
        });
      } catch (error) {
        if (isUniqueViolation(error)) throw nameTaken(patch.name ?? '');
        throw error;
      }
    },

    /**
     * Refused while a deployment of it is queued or in progress, and, unless `force`, while it
     * serves somewhere; its finished deployments go with it.
     */
    async remove(ctx: RequestContext, orgId: string, idOrName: string, opts: { force: boolean; expected?: Expected } = { force: false }): Promise<void> {
      await deleteWithDeployments(db, deps.dialect, ctx, orgId, idOrName, {
        kind: 'service', load: loadForChange, delete: servicesRepo.delete, refuseServing: !opts.force,
        check: async (row, executor) => {
          checkExpected(tagOf(row), opts.expected);
          // What serves in a locked environment stays, as everything else there does, until it is
          // unlocked: said first, before "it serves, give force", which the lock would then refuse.
          const locked = await environmentsRepo.lockedWhereServing(executor, row.id, deps.dialect === 'postgres');
          if (locked !== undefined) assertUnlocked(locked, `stop what serves in it (deleting service "${row.name}" would)`);
        },
      });
    },
  };
}

export type ServicesService = ReturnType<typeof createServicesService>;
