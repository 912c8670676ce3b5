import type { RequestContext } from '../../platform/context.js';
import { isUniqueViolation, type Db, type Executor } from '../../platform/db/database.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { cursorList, pageRequest, toPage, type Page } from '../../platform/pagination.js';
import { ReadThroughCache } from '../../platform/read-through-cache.js';
import { appendEvents, changesOf } from '../events/event-log.js';
import { instanceRepo } from '../instance/instance.repo.js';
import { assertDeletable, purgeOrganization, type Forgotten, type PurgeCounts } from './org-deletion.js';
import { orgsRepo, type OrgRow } from './orgs.repo.js';
import type { Organization } from './orgs.schemas.js';
import { nowIso, nowMs } from '../../platform/clock.js';

export function toOrganization(row: OrgRow): Organization {
  return {
    id: row.id, slug: row.slug, name: row.name, ...(row.external_id !== null ? { externalId: row.external_id } : {}),
    createdAt: row.created_at, updatedAt: row.updated_at,
  };
}

const slugTaken = (slug: string) =>
  errors.conflict('org_slug_taken', `An organization with the slug "${slug}" already exists.`, { conflicts: [{ pointer: '/slug', slug }] });
const slugRetired = (slug: string, at: string, holder: string) =>
  errors.conflict('org_slug_taken', `The slug "${slug}" belonged to the organization ${holder} until ${at}, and stays reserved to it: requests still sent to "${slug}" (scripts, an instance administrator's) must not reach a different organization. Choose another slug.`,
    { conflicts: [{ pointer: '/slug', slug, organization: holder }] });
/**
 * What the owner of one organization is told of a slug another organization has or had: only that
 * it is not to be had. Whether that organization still uses it, was renamed or deleted, and when,
 * is for those who see every organization (an instance administrator, the CLI).
 */
const slugUnavailable = (slug: string) =>
  errors.conflict('org_slug_taken', `The slug "${slug}" is taken: another organization has it, or had it and keeps it reserved (a slug given up stays reserved to its organization). Choose another slug.`,
    { conflicts: [{ pointer: '/slug', slug }] });
const seesEveryOrg = (ctx: RequestContext) => ctx.actor.instanceAdmin;

/**
 * Organizations are created and changed one at a time, instance-wide: a slug one gives up must be
 * reserved before another can check for it, and two changes of one organization must each start
 * from what the other did (the slug it retires, the `from` of its event). They are rare, so one
 * lock serves (PostgreSQL; SQLite writes one transaction at a time anyway).
 */
const ORGS_LOCK = 'organizations';
/** The most slugs an organization gave up that stay reserved to it (it takes one back to change again). */
export const MAX_RETIRED_SLUGS = 10;

/** A slug another organization gave up is not to be had; one this organization gave up is its own again. */
async function claimSlug(trx: Executor, ctx: RequestContext, slug: string, orgId: string): Promise<void> {
  const retired = await orgsRepo.retiredSlug(trx, slug);
  if (retired === undefined) return;
  if (retired.org_id !== orgId) throw seesEveryOrg(ctx) ? slugRetired(slug, retired.retired_at, retired.org_id) : slugUnavailable(slug);
  await orgsRepo.reclaimSlug(trx, slug, orgId);
}

const externalIdTaken = (externalId: string, holder: string) =>
  errors.conflict('org_external_id_taken', `The external organization "${externalId}" is already linked to the organization "${holder}"; unlink it there first.`,
    { conflicts: [{ pointer: '/externalId', externalId, orgSlug: holder }] });

/** What an update may change, by field of the representation and column. */
const FIELDS = { slug: 'slug', name: 'name', externalId: 'external_id' } as const;
type Field = keyof typeof FIELDS;
export type OrgPatch = { slug?: string; name?: string; externalId?: string | null };

/** How long a node may answer from its memory of an organization (a rename elsewhere shows within this). */
const CACHE_TTL_MS = 5_000;

/** The organizations list has no filters or parent: one scope for every request. */
const ORGS_LIST = cursorList('orgs');

export function createOrgsService(deps: {
  db: Db;
  onDeleted?: (orgId: string, forgotten: Forgotten) => void;
  /** How recently a runner was heard from to count as online (runners.service's onlineWithinSeconds). */
  runnersOnlineWithinSeconds: number;
}) {
  const { db } = deps;
  /** Organizations by one of their keys, remembered a few seconds (null: there is none). */
  const lookup = (read: (key: string) => Promise<OrgRow | undefined>) =>
    new ReadThroughCache<string, Organization>({ max: 10_000, ttlMs: CACHE_TTL_MS, load: async (key) => { const row = await read(key); return row && toOrganization(row); } });
  // Every organization-scoped request resolves `:orgId`; organizations change rarely, so the
  // answer is kept a few seconds (and forgotten at once when this node changes one).
  const byKey = lookup((idOrSlug) => orgsRepo.findByIdOrSlug(db, idOrSlug));
  // An external issuer's token names its organization by that issuer's id: resolved on each of its requests.
  const byExternalId = lookup((externalId) => orgsRepo.findByExternalId(db, externalId));
  // Pages of the instance-wide list, for instance administrators, kept the same few seconds.
  const pages = new ReadThroughCache<string, Page<Organization>>({ max: 1_000, ttlMs: CACHE_TTL_MS });
  const forget = () => {
    for (const cache of [byKey, byExternalId, pages]) cache.forget();
  };
  const find = (idOrSlug: string) => byKey.get(idOrSlug);
  const known = (idOrSlug: string) => byKey.known(idOrSlug);

  /** Which unique value a refused write collided with: the external id when another organization holds it, else the slug. */
  async function conflictOf(ctx: RequestContext, error: unknown, input: OrgPatch): Promise<unknown> {
    if (!isUniqueViolation(error)) return error;
    const holder = typeof input.externalId === 'string' ? await orgsRepo.findByExternalId(db, input.externalId) : undefined;
    if (holder) return externalIdTaken(input.externalId!, holder.slug);
    return seesEveryOrg(ctx) ? slugTaken(input.slug ?? '') : slugUnavailable(input.slug ?? '');
  }

  return {
    async create(ctx: RequestContext, input: { slug: string; name: string; externalId?: string }): Promise<Organization> {
      const now = nowIso();
      const row: OrgRow = { id: newId('org'), slug: input.slug, name: input.name, external_id: input.externalId ?? null, created_at: now, updated_at: now };
      try {
        await db.transaction().execute(async (trx) => {
          await instanceRepo.lock(trx, ORGS_LOCK);
          await claimSlug(trx, ctx, row.slug, row.id);
          await orgsRepo.insert(trx, row);
          const data = { slug: row.slug, name: row.name, ...(input.externalId !== undefined ? { externalId: input.externalId } : {}) };
          await appendEvents(trx, ctx, [{ orgId: row.id, type: 'organization.created', subject: { type: 'organization', id: row.id }, data }], now);
        });
      } catch (error) {
        throw await conflictOf(ctx, error, input);
      }
      forget();
      return toOrganization(row);
    },

    /** By id or slug; a missing organization is a 404 like any other resource. */
    async get(idOrSlug: string): Promise<Organization> {
      const org = await find(idOrSlug);
      if (!org) throw errors.notFound('organization', idOrSlug);
      return org;
    },

    find,
    known,
    /** The organization linked to an external issuer's organization, as `find` and `known` by id or slug. */
    findByExternalId: (externalId: string) => byExternalId.get(externalId),
    knownByExternalId: (externalId: string) => byExternalId.known(externalId),

    /** The organizations a caller belongs to: its own, or every one for an instance administrator. */
    async list(scope: { orgId: string | null; all: boolean }, query: { limit?: number; cursor?: string }): Promise<Page<Organization>> {
      const page = pageRequest(ORGS_LIST, query);
      if (!scope.all) {
        // A member belongs to exactly one organization.
        const own = scope.orgId === null ? null : await find(scope.orgId);
        return { items: own && (page.after === null || own.id > page.after) ? [own] : [], nextCursor: null };
      }
      return (await pages.get(`${page.after ?? ''}\0${page.limit}`, async () => {
        const result = toPage(ORGS_LIST, await orgsRepo.list(db, { ...page }), page.limit, (r) => r.id);
        return { items: result.items.map(toOrganization), nextCursor: result.nextCursor };
      }))!;
    },

    /**
     * Renames, re-slugs, or links to an external organization (`externalId`, null unlinks); the
     * event says what changed from what, and no change appends none.
     */
    async update(ctx: RequestContext, orgId: string, patch: OrgPatch): Promise<Organization> {
      const now = nowIso();
      try {
        const updated = await db.transaction().execute(async (trx) => {
          await instanceRepo.lock(trx, ORGS_LOCK);
          const row = await orgsRepo.findByIdOrSlug(trx, orgId);
          if (!row) throw errors.notFound('organization', orgId);
          const changes = changesOf(Object.keys(FIELDS) as Field[], { slug: row.slug, name: row.name, externalId: row.external_id }, patch);
          if (changes.changed.length === 0) return toOrganization(row);
          if (changes.changed.includes('slug')) {
            await claimSlug(trx, ctx, patch.slug!, row.id);
            // Each slug given up stays reserved: a few are what renames need, not a stock of names.
            const held = await orgsRepo.retiredSlugsOf(trx, row.id);
            if (held.length >= MAX_RETIRED_SLUGS) {
              throw errors.limitExceeded(`The organization keeps ${held.length} slugs it gave up reserved to itself (${held.join(', ')}), the most it may (${MAX_RETIRED_SLUGS}): changing its slug again would reserve another. Take one of those back as its slug instead.`,
                { name: 'retired slugs per organization', value: MAX_RETIRED_SLUGS }, [{ pointer: '/slug', message: `would reserve one more slug given up; take back one of ${held.join(', ')}` }]);
            }
            await orgsRepo.retireSlug(trx, row.slug, row.id, now);
          }
          const next = (await orgsRepo.update(trx, row.id, Object.fromEntries(changes.changed.map((f) => [FIELDS[f], patch[f]])), now))!;
          await appendEvents(trx, ctx, [{ orgId: row.id, type: 'organization.updated', subject: { type: 'organization', id: row.id }, data: { ...changes } }], now);
          return toOrganization(next);
        });
        forget();
        return updated;
      } catch (error) {
        throw await conflictOf(ctx, error, patch);
      }
    },

    /**
     * Deletes the organization and everything it holds (org-deletion.ts), in one transaction;
     * refused while it holds an instance administrator or a deployment of it is unfinished or
     * serving. Its row stays, holding nothing, so that its slugs stay reserved. The deletion is
     * recorded in the deleting service user's own organization (`organization.deleted`).
     */
    async remove(ctx: RequestContext, idOrSlug: string): Promise<{ organization: Organization; deleted: PurgeCounts }> {
      const now = nowIso();
      const result = await db.transaction().execute(async (trx) => {
        await instanceRepo.lock(trx, ORGS_LOCK);
        const row = await orgsRepo.findByIdOrSlug(trx, idOrSlug);
        if (!row) throw errors.notFound('organization', idOrSlug);
        // First: changing its slug locks its row against every write that references it (PostgreSQL),
        // so a request that wrote into it just before has committed, and its rows are found below.
        await orgsRepo.retireSlug(trx, row.slug, row.id, now);
        await orgsRepo.markDeleted(trx, row.id, now);
        await assertDeletable(trx, row, new Date(nowMs() - deps.runnersOnlineWithinSeconds * 1000).toISOString());
        const { serviceUserIds, dataKeyIds, counts } = await purgeOrganization(trx, row.id);
        if (ctx.actor.orgId !== null && ctx.actor.orgId !== row.id) {
          await appendEvents(trx, ctx, [{
            orgId: ctx.actor.orgId, type: 'organization.deleted', subject: { type: 'organization', id: row.id }, data: { slug: row.slug, name: row.name, deleted: counts },
          }], now);
        }
        return { organization: toOrganization(row), deleted: counts, forgotten: { serviceUserIds, dataKeyIds } };
      });
      forget();
      deps.onDeleted?.(result.organization.id, result.forgotten);
      return { organization: result.organization, deleted: result.deleted };
    },
  };
}

export type OrgsService = ReturnType<typeof createOrgsService>;
