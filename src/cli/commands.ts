// `slipway org …` and `slipway service-user …`: the same domain services the API uses, on the
// same database, whether or not a server is running on it.
import fs from 'node:fs';
import { pino } from 'pino';
import type { Core } from '../app.js';
import { cliContext } from '../platform/context.js';
import type { Config } from '../platform/config.js';
import { sqliteFile } from '../platform/db/facts.js';
import { createLogger } from '../platform/logging.js';
import { isRole, ROLES, type Role } from '../modules/auth/roles.js';
import { CreateOrgBody, EXTERNAL_ID_PATTERN, type Organization } from '../modules/orgs/orgs.schemas.js';
import { CreateServiceUserBody, UpdateServiceUserBody, type ServiceUser } from '../modules/service-users/service-users.schemas.js';
import { environmentsGiven, parse, repeated, required, UsageError, type Parsed } from './args.js';
import { checkedInput } from './checked-input.js';
import { printFields, printJson, printTable } from './output.js';
import { ORG_USAGE, SERVICE_USER_USAGE, wantsHelp } from './usage.js';

type Env = Record<string, string | undefined>;

/**
 * Only `serve` and `migrate` may start a new SQLite database: for any other command a missing one
 * is a mistyped --data-dir, and a new, empty instance there would only hide that.
 */
export function assertDatabaseExists(config: Config): void {
  const file = sqliteFile(config.databaseUrl, config.dataDir);
  if (file !== null && !fs.existsSync(file)) {
    throw new UsageError(`there is no Slipway database at ${file}: check --data-dir (SLIPWAY_DATA_DIR) or --database-url (SLIPWAY_DATABASE_URL), or start one with slipway serve or slipway migrate`);
  }
}

/** Opens the database the configuration names and runs `run` on it (`create`: it may be new). */
export async function withCore<T>(parsed: Parsed, run: (core: Core) => Promise<T>, opts: { create?: boolean; adoptProjectId?: boolean } = {}): Promise<T> {
  const config = parsed.config();
  if (!opts.create) assertDatabaseExists(config);
  // Loaded only when a command gets this far: help and usage errors answer without it.
  const { openCore } = await import('../app.js');
  const core = await openCore(config, {
    logger: createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel, pino.destination(2)),
    adoptProjectId: opts.adoptProjectId === true,
    // `migrate` sets a database up; every other command works on one that is set up already.
    migrate: opts.create ? true : 'require',
  });
  try {
    return await run(core);
  } finally {
    await core.close();
  }
}

async function orgId(core: Core, idOrSlug: string): Promise<string> {
  return (await core.orgs.get(idOrSlug)).id;
}

/** `--external-id`: the external issuer's organization id (its resource owner claim). */
function externalId(value: string): string {
  if (!new RegExp(EXTERNAL_ID_PATTERN).test(value)) throw new UsageError('--external-id must be the external issuer\'s organization id (letters, digits and . _ : @ -, at most 128)');
  return value;
}

function printOrg(org: Organization, json: unknown): void {
  if (json) printJson({ ...org, externalId: org.externalId ?? null });
  else printFields({ id: org.id, slug: org.slug, name: org.name, externalId: org.externalId ?? '' });
}

function printServiceUser(user: ServiceUser, json: unknown): void {
  if (json) {
    printJson(user);
    return;
  }
  printFields({
    id: user.id, name: user.name, role: user.role, description: user.description, instanceAdmin: user.instanceAdmin,
    ...(user.role === 'runner' ? { environments: user.environments === null ? 'all' : user.environments.map((e) => e.name).join(' ') || '(none that still exist)' } : {}),
    disabled: user.disabledAt ?? false, createdAt: user.createdAt, updatedAt: user.updatedAt,
    secrets: user.secrets.map((c) => `${c.id} (${c.hint}…, last used ${c.lastUsedAt ?? 'never'})`).join(', ') || '(none)',
  });
}

function emptyName(): never {
  throw new UsageError('--name must not be empty: the service user\'s new name');
}

function role(value: string): Role {
  if (!isRole(value)) throw new UsageError(`--role must be one of ${ROLES.join(', ')}`);
  return value;
}

async function allPages<T>(fetch: (cursor: string | undefined) => Promise<{ items: T[]; nextCursor: string | null }>): Promise<T[]> {
  const out: T[] = [];
  let cursor: string | undefined;
  do {
    const page = await fetch(cursor);
    out.push(...page.items);
    cursor = page.nextCursor ?? undefined;
  } while (cursor !== undefined);
  return out;
}

/** The service user a command acts on: `--user ID|NAME`, or its alias `--id`. */
function userFlag(values: Parsed['values']): string {
  const user = values.user ?? values.id;
  if (values.user !== undefined && values.id !== undefined && values.user !== values.id) throw new UsageError('give --user or --id, not both');
  if (typeof user !== 'string' || user === '') throw new UsageError('--user ID|NAME is required');
  return user;
}

const USER_FLAGS = { org: { type: 'string' }, user: { type: 'string' }, id: { type: 'string' } } as const;

export async function orgCommand(argv: string[], env: Env): Promise<number> {
  const [sub, ...rest] = argv;
  if (wantsHelp(argv, ORG_USAGE)) return 0;
  // Every flag is checked before the database is opened: a usage mistake touches nothing.
  if (sub === 'create') {
    const p = parse(rest, { slug: { type: 'string' }, name: { type: 'string' }, 'external-id': { type: 'string' } }, env);
    const input = {
      ...checkedInput(CreateOrgBody, { slug: required(p.values, 'slug'), name: required(p.values, 'name') }),
      ...(p.values['external-id'] !== undefined ? { externalId: externalId(required(p.values, 'external-id')) } : {}),
    };
    printOrg(await withCore(p, (core) => core.orgs.create(cliContext(), input)), p.values.json);
    return 0;
  }
  if (sub === 'list') {
    const p = parse(rest, {}, env);
    const orgs = await withCore(p, (core) => allPages((cursor) => core.orgs.list({ orgId: null, all: true }, { limit: 200, ...(cursor ? { cursor } : {}) })));
    // Every organization with the same fields, linked or not, as `org create --json` prints one.
    const rows = orgs.map((o) => ({ ...o, externalId: o.externalId ?? null }));
    if (p.values.json) printJson({ orgs: rows });
    else printTable(rows, ['id', 'slug', 'name', 'externalId', 'createdAt']);
    return 0;
  }
  if (sub === 'link' || sub === 'unlink') {
    // Tokens of the external issuer whose organization is ID act in ORG from then on (on a running server within 5 seconds).
    const p = parse(rest, { org: { type: 'string' }, ...(sub === 'link' ? { 'external-id': { type: 'string' } } : {}) }, env);
    const [org, linked] = [required(p.values, 'org'), sub === 'link' ? externalId(required(p.values, 'external-id')) : null];
    printOrg(await withCore(p, (core) => core.orgs.update(cliContext(), org, { externalId: linked })), p.values.json);
    return 0;
  }
  if (sub === 'delete') {
    const p = parse(rest, { org: { type: 'string' }, confirm: { type: 'string' } }, env);
    const org = required(p.values, 'org');
    // Everything it holds goes for good: its slug is asked for again, as a typed confirmation.
    const confirm = p.values.confirm;
    if (typeof confirm !== 'string' || confirm === '') throw new UsageError('--confirm SLUG is required: the organization\'s slug again, as deleting it deletes everything it holds for good');
    const { organization, deleted } = await withCore(p, async (core) => {
      const found = await core.orgs.get(org);
      if (confirm !== found.slug) throw new UsageError(`--confirm must be the organization's slug, "${found.slug}"; nothing was deleted`);
      return core.orgs.remove(cliContext(), found.id);
    });
    if (p.values.json) printJson({ deleted: organization.id, slug: organization.slug, removed: deleted });
    else {
      process.stdout.write(`${organization.id} (${organization.slug}) deleted: ${Object.entries(deleted).map(([what, n]) => `${n} ${what}`).join(', ')}\n`);
      process.stderr.write(`Its slug stays reserved; its service users' tokens are refused from now on (by a running server within 5 seconds).\n`);
    }
    return 0;
  }
  throw new UsageError(`${sub === undefined ? 'an org command is needed' : `unknown org command "${sub}"`}; usage: ${ORG_USAGE.join(' | ')}`);
}

export async function serviceUserCommand(argv: string[], env: Env): Promise<number> {
  const [sub, ...rest] = argv;
  if (wantsHelp(argv, SERVICE_USER_USAGE)) return 0;
  switch (sub) {
    case 'create': {
      const p = parse(rest, {
        org: { type: 'string' }, name: { type: 'string' }, role: { type: 'string' }, description: { type: 'string' }, 'instance-admin': { type: 'boolean' },
        environment: { type: 'string', multiple: true },
      }, env);
      const org = required(p.values, 'org');
      const input = {
        ...checkedInput(CreateServiceUserBody, {
          name: required(p.values, 'name'),
          role: role(required(p.values, 'role')),
          ...(typeof p.values.description === 'string' ? { description: p.values.description } : {}),
          ...(p.values.environment !== undefined ? { environments: environmentsGiven(repeated(p.values, 'environment')!, '--environment', 'leave it out for a runner of every environment') } : {}),
        }),
        instanceAdmin: p.values['instance-admin'] === true,
      };
      const created = await withCore(p, async (core) => core.serviceUsers.create(cliContext(), await orgId(core, org), input));
      if (p.values.json) printJson(created);
      else {
        printFields({ clientId: created.clientId, clientSecret: created.clientSecret, orgId: created.orgId, role: created.role, tokenUrl: created.tokenUrl, scope: created.scope, baseUrl: created.baseUrl });
        process.stderr.write('The client secret is shown only now; store it safely.\n');
      }
      return 0;
    }
    case 'list': {
      const p = parse(rest, { org: { type: 'string' } }, env);
      const org = required(p.values, 'org');
      const users = await withCore(p, async (core) => {
        const id = await orgId(core, org);
        return allPages((cursor) => core.serviceUsers.list(id, { limit: 200, ...(cursor ? { cursor } : {}) }));
      });
      if (p.values.json) printJson({ serviceUsers: users });
      else printTable(users.map((u) => ({ id: u.id, name: u.name, role: u.role, disabled: u.disabled, secrets: u.secrets.length, createdAt: u.createdAt })), ['id', 'name', 'role', 'disabled', 'secrets', 'createdAt']);
      return 0;
    }
    case 'show': {
      const p = parse(rest, USER_FLAGS, env);
      const [org, target] = [required(p.values, 'org'), userFlag(p.values)];
      printServiceUser(await withCore(p, async (core) => core.serviceUsers.get(await orgId(core, org), target)), p.values.json);
      return 0;
    }
    case 'update': {
      const p = parse(rest, {
        ...USER_FLAGS, name: { type: 'string' }, role: { type: 'string' }, description: { type: 'string' },
        environment: { type: 'string', multiple: true }, 'all-environments': { type: 'boolean' },
      }, env);
      const [org, target] = [required(p.values, 'org'), userFlag(p.values)];
      if (p.values.environment !== undefined && p.values['all-environments'] === true) throw new UsageError('--environment and --all-environments contradict each other: give one');
      const given = {
        // Given empty, it is not missing: the new name is what is wrong.
        ...(p.values.name !== undefined ? { name: p.values.name === '' ? emptyName() : required(p.values, 'name') } : {}),
        ...(p.values.role !== undefined ? { role: role(String(p.values.role)) } : {}),
        ...(typeof p.values.description === 'string' ? { description: p.values.description } : {}),
        ...(p.values.environment !== undefined ? { environments: environmentsGiven(repeated(p.values, 'environment')!, '--environment', 'give --all-environments') } : {}),
        ...(p.values['all-environments'] === true ? { environments: null } : {}),
      };
      if (Object.keys(given).length === 0) throw new UsageError('nothing to change: give --name, --role, --description, --environment or --all-environments (disable and enable are commands of their own)');
      const patch = checkedInput(UpdateServiceUserBody, given);
      printServiceUser(await withCore(p, async (core) => core.serviceUsers.update(cliContext(), await orgId(core, org), target, patch)), p.values.json);
      return 0;
    }
    case 'delete': {
      const p = parse(rest, USER_FLAGS, env);
      const [org, target] = [required(p.values, 'org'), userFlag(p.values)];
      const user = await withCore(p, async (core) => {
        const id = await orgId(core, org);
        const found = await core.serviceUsers.get(id, target);
        await core.serviceUsers.remove(cliContext(), id, found.id);
        return found;
      });
      if (p.values.json) printJson({ deleted: user.id, name: user.name });
      else process.stdout.write(`${user.id} (${user.name}) deleted; its secrets and tokens are refused from now on (by a running server within 5 seconds)\n`);
      return 0;
    }
    case 'rotate-secret': {
      const p = parse(rest, { ...USER_FLAGS, 'keep-old': { type: 'boolean' } }, env);
      const [org, user, keepOld] = [required(p.values, 'org'), userFlag(p.values), p.values['keep-old'] === true];
      const result = await withCore(p, async (core) => {
        const id = await orgId(core, org);
        const rotated = keepOld
          ? await (async () => {
            const added = await core.serviceUsers.addSecret(cliContext(), id, user);
            return { clientId: added.serviceUserId, clientSecret: added.clientSecret, secretId: added.id };
          })()
          : await core.serviceUsers.replaceSecrets(cliContext(), id, user);
        return { clientId: rotated.clientId, clientSecret: rotated.clientSecret, secretId: rotated.secretId, tokenUrl: core.tokenUrl, scope: core.scope, baseUrl: core.config.baseUrl, orgId: id, keptOld: keepOld };
      });
      if (p.values.json) printJson(result);
      else {
        printFields({ clientId: result.clientId, clientSecret: result.clientSecret, secretId: result.secretId });
        process.stderr.write(keepOld ? 'The previous secret stays valid until removed (remove-secret --secret with its id: service-user list --json).\n' : 'Every previous secret of this service user is refused from now on (by a running server within 5 seconds).\n');
      }
      return 0;
    }
    case 'remove-secret': {
      const p = parse(rest, { ...USER_FLAGS, secret: { type: 'string' } }, env);
      const [org, user, secret] = [required(p.values, 'org'), userFlag(p.values), required(p.values, 'secret')];
      await withCore(p, async (core) => core.serviceUsers.removeSecret(cliContext(), await orgId(core, org), user, secret));
      if (p.values.json) printJson({ removed: secret });
      else process.stdout.write(`${secret} removed; it is refused from now on (by a running server within 5 seconds)\n`);
      return 0;
    }
    case 'disable':
    case 'enable': {
      const p = parse(rest, USER_FLAGS, env);
      const [org, target] = [required(p.values, 'org'), userFlag(p.values)];
      const user = await withCore(p, async (core) => core.serviceUsers.update(cliContext(), await orgId(core, org), target, { disabled: sub === 'disable' }));
      if (p.values.json) printJson(user);
      else process.stdout.write(`${user.id} ${user.disabled ? 'disabled' : 'enabled'}\n`);
      return 0;
    }
    default:
      throw new UsageError(`${sub === undefined ? 'a service-user command is needed' : `unknown service-user command "${sub}"`}; see slipway service-user --help`);
  }
}
