import { LRUCache } from 'lru-cache';
import type { RequestContext } from '../../platform/context.js';
import { isUniqueViolation, type Db } from '../../platform/db/database.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { pageRequest, toPage, type Page } from '../../platform/pagination.js';
import { appendEvents } from '../events/event-log.js';
import { orgsRepo, type OrgRow } from './orgs.repo.js';
import type { Organization } from './orgs.schemas.js';

export function toOrganization(row: OrgRow): Organization {
  return { id: row.id, slug: row.slug, name: row.name, createdAt: row.created_at, updatedAt: row.updated_at };
}

const slugTaken = (slug: string) =>
  errors.conflict('org_slug_taken', `An organization with the slug "${slug}" already exists.`, { conflicts: [{ pointer: '/slug', slug }] });

/** How long a node may answer from its memory of an organization (a rename elsewhere shows within this). */
const CACHE_TTL_MS = 5_000;

export function createOrgsService(deps: { db: Db }) {
  const { db } = deps;
  // Every organization-scoped request resolves `:orgId`; organizations change rarely, so the
  // answer is kept a few seconds (and forgotten at once when this node changes one).
  const byKey = new LRUCache<string, Organization | 'missing'>({ max: 10_000, ttl: CACHE_TTL_MS });
  // Pages of the instance-wide list, for instance administrators, kept the same few seconds.
  const pages = new LRUCache<string, Page<Organization>>({ max: 1_000, ttl: CACHE_TTL_MS });
  // Counts what this node forgets, so that a read which started before a change here does not put
  // what it read back.
  let forgotten = 0;
  const forget = () => {
    forgotten++;
    byKey.clear();
    pages.clear();
  };

  /** What this node remembers of an organization (null: there is none), or undefined when it must be read. */
  function known(idOrSlug: string): Organization | null | undefined {
    const hit = byKey.get(idOrSlug);
    return hit === 'missing' ? null : hit;
  }

  async function find(idOrSlug: string): Promise<Organization | null> {
    const hit = known(idOrSlug);
    if (hit !== undefined) return hit;
    const before = forgotten;
    const row = await orgsRepo.findByIdOrSlug(db, idOrSlug);
    const org = row ? toOrganization(row) : null;
    if (forgotten === before) byKey.set(idOrSlug, org ?? 'missing');
    return org;
  }

  return {
    async create(ctx: RequestContext, input: { slug: string; name: string }): Promise<Organization> {
      const now = new Date().toISOString();
      const row: OrgRow = { id: newId('org'), slug: input.slug, name: input.name, created_at: now, updated_at: now };
      try {
        await db.transaction().execute(async (trx) => {
          await orgsRepo.insert(trx, row);
          await appendEvents(trx, ctx, [{ orgId: row.id, type: 'organization.created', subject: { type: 'organization', id: row.id }, data: { slug: row.slug, name: row.name } }], now);
        });
      } catch (error) {
        if (isUniqueViolation(error)) throw slugTaken(input.slug);
        throw error;
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

    /** The organizations a caller belongs to: its own, or every one for an instance administrator. */
    async list(scope: { orgId: string | null; all: boolean }, query: { limit?: number; cursor?: string }): Promise<Page<Organization>> {
      const page = pageRequest(query);
      if (!scope.all) {
        // A member belongs to exactly one organization.
        const own = scope.orgId === null ? null : await find(scope.orgId);
        return { items: own && (page.after === null || own.id > page.after) ? [own] : [], nextCursor: null };
      }
      const key = `${page.after ?? ''}\0${page.limit}`;
      const cached = pages.get(key);
      if (cached) return cached;
      const before = forgotten;
      const rows = await orgsRepo.list(db, { ...page });
      const result = toPage(rows, page.limit, (r) => r.id);
      const listed = { items: result.items.map(toOrganization), nextCursor: result.nextCursor };
      if (forgotten === before) pages.set(key, listed);
      return listed;
    },

    /** Renames or re-slugs; the event says what changed from what, and no change appends none. */
    async update(ctx: RequestContext, orgId: string, patch: { slug?: string; name?: string }): Promise<Organization> {
      const now = new Date().toISOString();
      try {
        const updated = await db.transaction().execute(async (trx) => {
          const row = await orgsRepo.findByIdOrSlug(trx, orgId);
          if (!row) throw errors.notFound('organization', orgId);
          const changed = (['slug', 'name'] as const).filter((field) => patch[field] !== undefined && patch[field] !== row[field]);
          if (changed.length === 0) return toOrganization(row);
          const set = Object.fromEntries(changed.map((field) => [field, patch[field]]));
          const next = (await orgsRepo.update(trx, row.id, set, now))!;
          await appendEvents(trx, ctx, [{
            orgId: row.id, type: 'organization.updated', subject: { type: 'organization', id: row.id },
            data: { changed, from: Object.fromEntries(changed.map((f) => [f, row[f]])), to: set },
          }], now);
          return toOrganization(next);
        });
        forget();
        return updated;
      } catch (error) {
        if (isUniqueViolation(error)) throw slugTaken(patch.slug ?? '');
        throw error;
      }
    },
  };
}

export type OrgsService = ReturnType<typeof createOrgsService>;
