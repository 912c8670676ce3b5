// Service users: machine identities of one organization with one role and up to two live client
// secrets (rotate without downtime: add the second, roll it out, remove the first).
import type { RequestContext } from '../../platform/context.js';
import { generateClientSecret, hashClientSecret, secretHint } from '../../platform/crypto/client-secret.js';
import { isUniqueViolation, type Db, type Executor } from '../../platform/db/database.js';
import { errors } from '../../platform/errors.js';
import { isId, newId } from '../../platform/ids.js';
import { cursorList, pageRequest, toPage, type Page } from '../../platform/pagination.js';
import { allows, canGrant, effectiveRole, type Role } from '../auth/roles.js';
import { appendEvents, changesOf } from '../events/event-log.js';
import { environmentsRepo } from '../environments/environments.repo.js';
import { orgsRepo } from '../orgs/orgs.repo.js';
import { serviceUsersRepo, type ClientSecretRow, type ServiceUserRow } from './service-users.repo.js';
import type { CredentialsT, ServiceUser } from './service-users.schemas.js';
import { nowIso } from '../../platform/clock.js';

export const MAX_LIVE_SECRETS = 2;

const withArticle = (role: Role) => `${/^[aeiou]/.test(role) ? 'An' : 'A'} ${role}`;

/** The environment ids a runner is kept to (null: all), as stored. */
export function runnerEnvironmentIds(row: Pick<ServiceUserRow, 'runner_environments'>): string[] | null {
  return row.runner_environments === null ? null : (JSON.parse(row.runner_environments) as string[]);
}

/** The names of the environments these service users are kept to, by id (those that still exist). */
async function environmentNames(executor: Executor, orgId: string, rows: ServiceUserRow[]): Promise<Map<string, string>> {
  const ids = [...new Set(rows.flatMap((r) => runnerEnvironmentIds(r) ?? []))];
  return new Map((await environmentsRepo.findManyInOrg(executor, orgId, ids)).map((e) => [e.id, e.name]));
}

function toServiceUser(row: ServiceUserRow, secrets: ClientSecretRow[], names: Map<string, string>): ServiceUser {
  const environments = runnerEnvironmentIds(row);
  return {
    id: row.id,
    clientId: row.id,
    orgId: row.org_id,
    name: row.name,
    description: row.description,
    role: row.role as Role,
    instanceAdmin: row.instance_admin === 1,
    disabled: row.disabled_at !== null,
    disabledAt: row.disabled_at,
    environments: environments === null ? null : environments.flatMap((id) => (names.has(id) ? [{ id, name: names.get(id)! }] : [])),
    secrets: secrets.map((s) => ({ id: s.id, hint: s.hint, createdAt: s.created_at, lastUsedAt: s.last_used_at })),
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

export interface ServiceUsersDeps {
  db: Db;
  pepper: Buffer;
  tokenUrl: string;
  scope: string;
  /** The API's public base URL, handed out with credentials. */
  baseUrl: string;
  /**
   * Told once a change to a service user has committed, so this process's caches of it (the API's
   * token checks, the token endpoint's client records) see it at once. A new one needs no call: the
   * token endpoint remembers only clients it has found.
   */
  onChanged: (serviceUserId: string) => void;
}

export interface NewServiceUser {
  name: string;
  description?: string | undefined;
  role: Role;
  instanceAdmin?: boolean;
  /** A runner's environments, by name or id; undefined: all. */
  environments?: string[] | undefined;
}

/**
 * A runner does the runner protocol and nothing else, while an instance administrator acts as an
 * owner everywhere: one service user cannot be both.
 */
function runnerNotAdmin(pointer: string) {
  return errors.invalidRequest('A runner cannot be an instance administrator: a runner carries deployments out and may do nothing else. Give the runner its own service user.',
    [{ pointer, message: pointer === '/role' ? 'an instance administrator cannot be made a runner' : 'a runner cannot be an instance administrator' }]);
}

export function createServiceUsersService(deps: ServiceUsersDeps) {
  const { db } = deps;

  /** The actor's role in this organization; the CLI acts as an instance administrator. */
  function actorRole(ctx: RequestContext): Role {
    return ctx.actor.kind === 'cli' ? 'owner' : effectiveRole(ctx.actor.role!, ctx.actor.instanceAdmin);
  }

  function assertMayGrant(ctx: RequestContext, role: Role): void {
    const mine = actorRole(ctx);
    if (!canGrant(mine, role)) throw errors.forbidden(`${withArticle(mine)} cannot hand out the role ${role}; ask an owner.`);
  }

  /**
   * An admin manages service users up to admin; anything about an owner (its role, name, secrets,
   * existence) takes an owner, and anything about an instance administrator, who acts as owner in
   * every organization, takes an instance administrator.
   */
  function assertMayManage(ctx: RequestContext, row: ServiceUserRow): void {
    if (row.instance_admin === 1 && !ctx.actor.instanceAdmin) {
      throw errors.forbidden(`"${row.name}" is an instance administrator; only an instance administrator can change it.`);
    }
    if (row.role === 'owner' && !canGrant(actorRole(ctx), 'owner')) {
      throw errors.forbidden(`"${row.name}" is an owner; only an owner can change it, its secrets or its existence.`);
    }
  }

  async function load(executor: Executor, orgId: string, idOrName: string): Promise<ServiceUserRow> {
    const row = await serviceUsersRepo.findInOrg(executor, orgId, idOrName);
    if (!row) throw errors.notFound('service user', idOrName);
    return row;
  }

  /**
   * The caller as its service user is now, read once the organization is held: a change made to it
   * by a request that ran just before (another owner demoting or disabling it, on any node) is seen,
   * and the caller acts with the role it has now, or not at all. Its token was checked as it was
   * when the request came in: two owners demoting or disabling each other at once both went through.
   */
  async function actingNow(trx: Executor, ctx: RequestContext): Promise<RequestContext> {
    if (ctx.actor.kind !== 'service_user' || !isId('serviceUser', ctx.actor.id)) return ctx;
    const me = await trx.selectFrom('service_users').select(['role', 'instance_admin', 'disabled_at']).where('id', '=', ctx.actor.id).executeTakeFirst();
    if (me === undefined || me.disabled_at !== null) {
      throw errors.invalidToken(`The service user of this token ${me === undefined ? 'no longer exists' : 'was disabled'} meanwhile.`);
    }
    const role = me.role as Role;
    const instanceAdmin = me.instance_admin === 1;
    if (role === ctx.actor.role && instanceAdmin === ctx.actor.instanceAdmin) return ctx;
    if (!allows('admin', role, instanceAdmin)) throw errors.forbidden(`This service user is ${withArticle(role).toLowerCase()} now, which does not manage service users.`);
    return { ...ctx, actor: { ...ctx.actor, role, instanceAdmin } };
  }

  /**
   * Runs a change to one service user the caller may manage. The organization's row is held for the
   * transaction, so changes to its service users run one after another and each check ("the last
   * owner", "two live secrets", the caller's own role) sees every change made before it, on
   * PostgreSQL as on SQLite. `run` gets the caller as it is now (actingNow).
   * Once it commits, this node's caches of that service user (token checks, client secrets) forget it.
   */
  async function change<T>(ctx: RequestContext, orgId: string, idOrName: string, run: (trx: Executor, row: ServiceUserRow, acting: RequestContext) => Promise<T>): Promise<T> {
    let changed: string | null = null;
    const result = await db.transaction().execute(async (trx) => {
      await orgsRepo.hold(trx, orgId);
      const acting = await actingNow(trx, ctx);
      const row = await load(trx, orgId, idOrName);
      assertMayManage(acting, row);
      changed = row.id;
      return run(trx, row, acting);
    });
    if (changed !== null) deps.onChanged(changed);
    return result;
  }

  async function view(executor: Executor, row: ServiceUserRow): Promise<ServiceUser> {
    return toServiceUser(row, await serviceUsersRepo.secretsOf(executor, [row.id]), await environmentNames(executor, row.org_id, [row]));
  }

  /**
   * The environments a runner is to be kept to, as stored (sorted ids), with their names for its
   * events; refused for any other role, and 404 for one that is not the organization's.
   */
  async function keptTo(executor: Executor, orgId: string, role: Role, given: string[]): Promise<{ stored: string; names: string[] }> {
    if (role !== 'runner') {
      throw errors.invalidRequest('Only a runner is kept to environments: the other roles act on the whole organization.', [{ pointer: '/environments', message: `a${role === 'owner' || role === 'admin' ? 'n' : ''} ${role} takes no environments` }]);
    }
    const rows = await environmentsRepo.findManyInOrg(executor, orgId, given);
    const missing = given.filter((g) => !rows.some((r) => r.id === g || r.name === g));
    if (missing.length > 0) throw errors.notFound('environment', missing.join('", "'), '/environments');
    const sorted = [...rows].sort((a, b) => (a.id < b.id ? -1 : 1));
    return { stored: JSON.stringify(sorted.map((r) => r.id)), names: sorted.map((r) => r.name) };
  }

  /** An organization always keeps one enabled owner, or nobody could administer it again. */
  async function assertNotLastOwner(executor: Executor, row: ServiceUserRow, what: string): Promise<void> {
    if (row.role !== 'owner' || row.disabled_at !== null) return;
    if ((await serviceUsersRepo.countOtherOwners(executor, row.org_id, row.id)) === 0) {
      throw errors.conflict('last_owner', `"${row.name}" is the organization's last enabled owner and cannot be ${what}; make another owner first.`);
    }
  }

  function issueSecret(serviceUserId: string, now: string): { row: ClientSecretRow; secret: string } {
    const secret = generateClientSecret();
    return {
      secret,
      row: { id: newId('clientSecret'), service_user_id: serviceUserId, hash: hashClientSecret(deps.pepper, secret), hint: secretHint(secret), created_at: now, last_used_at: null },
    };
  }

  /** A unique-name violation becomes the problem that names the field; anything else passes. */
  function nameTakenOr(error: unknown, name: string | undefined): unknown {
    if (!isUniqueViolation(error) || name === undefined) return error;
    return errors.conflict('service_user_name_taken', `A service user named "${name}" already exists in this organization.`, { conflicts: [{ pointer: '/name', name }] });
  }

  const event = (orgId: string, row: ServiceUserRow, type: string, data: Record<string, unknown>) =>
    ({ orgId, type: `service_user.${type}`, subject: { type: 'service_user', id: row.id }, data });

  return {
    /**
     * For a replayed answer that hands out a client secret: the caller must still be allowed to
     * manage that service user (404 when it is gone, 403 when the caller may no longer manage it).
     */
    async assertMayStillManage(ctx: RequestContext, orgId: string, idOrName: string): Promise<void> {
      assertMayManage(ctx, await load(db, orgId, idOrName));
    },

    async create(ctx: RequestContext, orgId: string, input: NewServiceUser): Promise<ServiceUser & CredentialsT> {
      assertMayGrant(ctx, input.role);
      if (input.instanceAdmin && !ctx.actor.instanceAdmin) throw errors.forbidden('Only an instance administrator can make another.');
      if (input.instanceAdmin && input.role === 'runner') throw runnerNotAdmin('/instanceAdmin');
      const now = nowIso();
      const row: ServiceUserRow = {
        id: newId('serviceUser'), org_id: orgId, name: input.name, description: input.description ?? '', role: input.role,
        instance_admin: input.instanceAdmin ? 1 : 0, disabled_at: null, token_generation: 0, runner_environments: null, created_at: now, updated_at: now,
      };
      const { row: secretRow, secret } = issueSecret(row.id, now);
      let names = new Map<string, string>();
      try {
        await db.transaction().execute(async (trx) => {
          // As a change's: with the caller's role as it is now, after the changes made before it.
          await orgsRepo.hold(trx, orgId);
          const acting = await actingNow(trx, ctx);
          if (acting !== ctx) assertMayGrant(acting, input.role);
          if (input.instanceAdmin && !acting.actor.instanceAdmin) throw errors.forbidden('Only an instance administrator can make another.');
          const kept = input.environments === undefined ? undefined : await keptTo(trx, orgId, input.role, input.environments);
          if (kept !== undefined) row.runner_environments = kept.stored;
          await serviceUsersRepo.insert(trx, row);
          await serviceUsersRepo.insertSecret(trx, secretRow);
          await appendEvents(trx, ctx, [event(orgId, row, 'created', {
            name: row.name, role: row.role, instanceAdmin: row.instance_admin === 1, ...(kept !== undefined ? { environments: kept.names } : {}),
          })], now);
          names = await environmentNames(trx, orgId, [row]);
        });
      } catch (error) {
        throw nameTakenOr(error, input.name);
      }
      return { ...toServiceUser(row, [secretRow], names), clientId: row.id, clientSecret: secret, tokenUrl: deps.tokenUrl, scope: deps.scope, baseUrl: deps.baseUrl };
    },

    async list(orgId: string, query: { limit?: number; cursor?: string }): Promise<Page<ServiceUser>> {
      const list = cursorList('service-users', { org: orgId });
      const page = pageRequest(list, query);
      const rows = await serviceUsersRepo.list(db, orgId, page);
      const result = toPage(list, rows, page.limit, (r) => r.id);
      const secrets = await serviceUsersRepo.secretsOf(db, result.items.map((r) => r.id));
      const names = await environmentNames(db, orgId, result.items);
      return { items: result.items.map((r) => toServiceUser(r, secrets.filter((s) => s.service_user_id === r.id), names)), nextCursor: result.nextCursor };
    },

    async get(orgId: string, idOrName: string): Promise<ServiceUser> {
      return view(db, await load(db, orgId, idOrName));
    },

    /** Renames, re-describes, changes the role of, disables or enables; one event per kind of change, none for no change. */
    async update(ctx: RequestContext, orgId: string, idOrName: string, patch: { name?: string; description?: string; role?: Role; disabled?: boolean; environments?: string[] | null }): Promise<ServiceUser> {
      const now = nowIso();
      let updated: ServiceUser;
      try {
        updated = await change(ctx, orgId, idOrName, async (trx, row, acting) => {
          const roleChanged = patch.role !== undefined && patch.role !== row.role;
          const disabling = patch.disabled === true && row.disabled_at === null;
          const enabling = patch.disabled === false && row.disabled_at !== null;
          const edits = changesOf(['name', 'description'], row, patch);
          const renamed = edits.changed.includes('name');
          const described = edits.changed.includes('description');
          if (roleChanged) {
            assertMayGrant(acting, patch.role!);
            if (patch.role === 'runner' && row.instance_admin === 1) throw runnerNotAdmin('/role');
            await assertNotLastOwner(trx, row, 'demoted');
          }
          if (disabling) await assertNotLastOwner(trx, row, 'disabled');
          // A runner's environments: as given (null: all), or none kept once it is a runner no more.
          const role = patch.role ?? (row.role as Role);
          const kept = patch.environments === undefined || patch.environments === null
            ? (patch.environments === null || role !== 'runner' ? { stored: null, names: null } : undefined)
            : await keptTo(trx, orgId, role, patch.environments);
          const keptBefore = runnerEnvironmentIds(row);
          const scoped = kept !== undefined && kept.stored !== row.runner_environments;
          if (!roleChanged && !disabling && !enabling && !renamed && !described && !scoped) return view(trx, row);

          const set: Partial<ServiceUserRow> = { updated_at: now };
          if (renamed) set.name = patch.name!;
          if (described) set.description = patch.description!;
          if (roleChanged) set.role = patch.role!;
          if (scoped) set.runner_environments = kept.stored;
          if (disabling || enabling) set.disabled_at = disabling ? now : null;
          // Enabling again does not bring back the tokens that disabling ended.
          if (disabling) set.token_generation = Number(row.token_generation) + 1;
          const next = (await serviceUsersRepo.update(trx, row.id, set))!;
          await appendEvents(trx, ctx, [
            ...(roleChanged ? [event(orgId, row, 'role_changed', { from: row.role, to: patch.role })] : []),
            ...(scoped ? [event(orgId, row, 'environments_changed', { from: keptBefore, to: kept.stored === null ? null : JSON.parse(kept.stored) as string[], names: kept.names })] : []),
            ...(disabling ? [event(orgId, row, 'disabled', {})] : []),
            ...(enabling ? [event(orgId, row, 'enabled', {})] : []),
            ...(renamed || described ? [event(orgId, row, 'updated', { name: next.name, ...edits })] : []),
          ], now);
          return view(trx, next);
        });
      } catch (error) {
        throw nameTakenOr(error, patch.name);
      }
      return updated;
    },

    async remove(ctx: RequestContext, orgId: string, idOrName: string): Promise<void> {
      const now = nowIso();
      await change(ctx, orgId, idOrName, async (trx, row) => {
        await assertNotLastOwner(trx, row, 'removed');
        await serviceUsersRepo.delete(trx, row.id);
        await appendEvents(trx, ctx, [event(orgId, row, 'deleted', { name: row.name })], now);
      });
    },

    /** Adds a second live secret; the first keeps working until it is removed. `serviceUserId`: whose it is. */
    async addSecret(ctx: RequestContext, orgId: string, idOrName: string): Promise<{ id: string; hint: string; createdAt: string; lastUsedAt: null; clientSecret: string; serviceUserId: string }> {
      const now = nowIso();
      return change(ctx, orgId, idOrName, async (trx, row) => {
        const live = await serviceUsersRepo.secretsOf(trx, [row.id]);
        if (live.length >= MAX_LIVE_SECRETS) {
          throw errors.conflict('too_many_client_secrets', `A service user has at most ${MAX_LIVE_SECRETS} live client secrets; remove one first.`, {
            conflicts: live.map((s) => ({ id: s.id, hint: s.hint, createdAt: s.created_at })),
          });
        }
        const { row: secretRow, secret } = issueSecret(row.id, now);
        await serviceUsersRepo.insertSecret(trx, secretRow);
        await appendEvents(trx, ctx, [event(orgId, row, 'secret_added', { secretId: secretRow.id, hint: secretRow.hint })], now);
        return { id: secretRow.id, hint: secretRow.hint, createdAt: now, lastUsedAt: null, clientSecret: secret, serviceUserId: row.id };
      });
    },

    async removeSecret(ctx: RequestContext, orgId: string, idOrName: string, secretId: string): Promise<void> {
      const now = nowIso();
      await change(ctx, orgId, idOrName, async (trx, row) => {
        const live = await serviceUsersRepo.secretsOf(trx, [row.id]);
        if (!live.some((s) => s.id === secretId)) throw errors.notFound('client secret', secretId);
        if (live.length === 1) {
          throw errors.conflict('last_client_secret', 'This is the service user\'s only client secret; add a new one first, or disable the service user.');
        }
        await serviceUsersRepo.deleteSecret(trx, row.id, secretId);
        await appendEvents(trx, ctx, [event(orgId, row, 'secret_removed', { secretId })], now);
      });
    },

    /** CLI rotation in one step: add a new secret and remove every older one. */
    async replaceSecrets(ctx: RequestContext, orgId: string, idOrName: string): Promise<{ clientId: string; clientSecret: string; secretId: string }> {
      const now = nowIso();
      const result = await change(ctx, orgId, idOrName, async (trx, row) => {
        const live = await serviceUsersRepo.secretsOf(trx, [row.id]);
        const { row: secretRow, secret } = issueSecret(row.id, now);
        for (const s of live) await serviceUsersRepo.deleteSecret(trx, row.id, s.id);
        await serviceUsersRepo.insertSecret(trx, secretRow);
        await appendEvents(trx, ctx, [event(orgId, row, 'secret_rotated', { secretId: secretRow.id, removed: live.map((s) => s.id) })], now);
        return { clientId: row.id, clientSecret: secret, secretId: secretRow.id };
      });
      return result;
    },
  };
}

export type ServiceUsersService = ReturnType<typeof createServiceUsersService>;
