// `slipway org …` and `slipway service-user …`: the same domain services the API uses, on the
// same database, whether or not a server is running on it.
import { pino } from 'pino';
import { openCore, type Core } from '../app.js';
import { cliContext } from '../platform/context.js';
import { createLogger } from '../platform/logging.js';
import { isRole, ROLES, type Role } from '../modules/auth/roles.js';
import { parse, required, UsageError, type Parsed } from './args.js';
import { printFields, printJson, printTable } from './output.js';

type Env = Record<string, string | undefined>;

export async function withCore<T>(parsed: Parsed, run: (core: Core) => Promise<T>): Promise<T> {
  const config = parsed.config();
  const core = await openCore(config, { logger: createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel, pino.destination(2)) });
  try {
    return await run(core);
  } finally {
    await core.close();
  }
}

async function orgId(core: Core, idOrSlug: string): Promise<string> {
  return (await core.orgs.get(idOrSlug)).id;
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

export async function orgCommand(argv: string[], env: Env): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === 'create') {
    const p = parse(rest, { slug: { type: 'string' }, name: { type: 'string' } }, env);
    const org = await withCore(p, (core) => core.orgs.create(cliContext(), { slug: required(p.values, 'slug'), name: required(p.values, 'name') }));
    if (p.values.json) printJson(org);
    else printFields({ id: org.id, slug: org.slug, name: org.name });
    return 0;
  }
  if (sub === 'list') {
    const p = parse(rest, {}, env);
    const orgs = await withCore(p, (core) => allPages((cursor) => core.orgs.list({ orgId: null, all: true }, { limit: 200, ...(cursor ? { cursor } : {}) })));
    if (p.values.json) printJson({ orgs });
    else printTable(orgs, ['id', 'slug', 'name', 'createdAt']);
    return 0;
  }
  throw new UsageError('usage: slipway org create --slug S --name N | slipway org list');
}

export async function serviceUserCommand(argv: string[], env: Env): Promise<number> {
  const [sub, ...rest] = argv;
  switch (sub) {
    case 'create': {
      const p = parse(rest, { org: { type: 'string' }, name: { type: 'string' }, role: { type: 'string' }, description: { type: 'string' }, 'instance-admin': { type: 'boolean' } }, env);
      const created = await withCore(p, async (core) => core.serviceUsers.create(cliContext(), await orgId(core, required(p.values, 'org')), {
        name: required(p.values, 'name'),
        role: role(required(p.values, 'role')),
        description: typeof p.values.description === 'string' ? p.values.description : undefined,
        instanceAdmin: p.values['instance-admin'] === true,
      }));
      if (p.values.json) printJson(created);
      else {
        printFields({ clientId: created.clientId, clientSecret: created.clientSecret, orgId: created.orgId, role: created.role, tokenUrl: created.tokenUrl, scope: created.scope });
        process.stderr.write('The client secret is shown only now; store it safely.\n');
      }
      return 0;
    }
    case 'list': {
      const p = parse(rest, { org: { type: 'string' } }, env);
      const users = await withCore(p, async (core) => {
        const id = await orgId(core, required(p.values, 'org'));
        return allPages((cursor) => core.serviceUsers.list(id, { limit: 200, ...(cursor ? { cursor } : {}) }));
      });
      if (p.values.json) printJson({ serviceUsers: users });
      else printTable(users.map((u) => ({ id: u.id, name: u.name, role: u.role, disabled: u.disabled, secrets: u.secrets.length, createdAt: u.createdAt })), ['id', 'name', 'role', 'disabled', 'secrets', 'createdAt']);
      return 0;
    }
    case 'rotate-secret': {
      const p = parse(rest, { org: { type: 'string' }, user: { type: 'string' }, 'keep-old': { type: 'boolean' } }, env);
      const result = await withCore(p, async (core) => {
        const id = await orgId(core, required(p.values, 'org'));
        const user = required(p.values, 'user');
        if (p.values['keep-old']) {
          const added = await core.serviceUsers.addSecret(cliContext(), id, user);
          return { clientId: (await core.serviceUsers.get(id, user)).clientId, clientSecret: added.clientSecret, tokenUrl: core.tokenUrl, scope: core.scope, orgId: id, keptOld: true };
        }
        const replaced = await core.serviceUsers.replaceSecrets(cliContext(), id, user);
        return { ...replaced, tokenUrl: core.tokenUrl, scope: core.scope, orgId: id, keptOld: false };
      });
      if (p.values.json) printJson(result);
      else {
        printFields({ clientId: result.clientId, clientSecret: result.clientSecret });
        process.stderr.write(result.keptOld ? 'The previous secret stays valid until removed.\n' : 'Every previous secret of this service user has stopped working.\n');
      }
      return 0;
    }
    case 'disable':
    case 'enable': {
      const p = parse(rest, { org: { type: 'string' }, user: { type: 'string' } }, env);
      const user = await withCore(p, async (core) =>
        core.serviceUsers.update(cliContext(), await orgId(core, required(p.values, 'org')), required(p.values, 'user'), { disabled: sub === 'disable' }));
      if (p.values.json) printJson(user);
      else process.stdout.write(`${user.id} ${user.disabled ? 'disabled' : 'enabled'}\n`);
      return 0;
    }
    default:
      throw new UsageError('usage: slipway service-user create|list|rotate-secret|disable|enable --org ORG …');
  }
}
