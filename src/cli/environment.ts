// `slipway environment`: an organization's environments through the API, as a service user: list
// and show them as a viewer; as an admin or owner, apply one from a JSON file kept in a repository,
// delete one, and lock one (a deploy freeze) and unlock it, from an incident channel's bot or a
// release pipeline.
import { etagOf } from '../platform/etags.js';
import { unknownVariables, unknownVariableWarning } from '../platform/unknown-variables.js';
import type { Environment } from '../modules/environments/environments.schemas.js';
import { API_CLIENT_FLAGS, API_CLIENT_VARIABLES, apiClientFlagHelp, apiClientSettings, deleteResource, everyItem, patientCaller, subcommandFlags } from './api-client.js';
import { appliedJson, appliedLine, applyResource, readJsonObject } from './apply.js';
import { printWarning, requiredFlagText, UsageError } from './args.js';
import { flagTable, printable, printFields, printJson, printTable } from './output.js';
import { ENVIRONMENT_USAGE } from './usage.js';

const RETRY_MS = 60_000;

const BASE = { ...API_CLIENT_FLAGS, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } } as const;
const COMMON = { ...BASE, environment: { type: 'string' } } as const;
const SUBCOMMANDS = {
  list: BASE,
  show: COMMON,
  apply: { ...BASE, file: { type: 'string' }, 'dry-run': { type: 'boolean' } },
  delete: { ...COMMON, force: { type: 'boolean' }, 'ignore-not-found': { type: 'boolean' } },
  lock: { ...COMMON, reason: { type: 'string' } },
  unlock: COMMON,
} as const;

export const ENVIRONMENT_HELP = `usage:
${ENVIRONMENT_USAGE.map((line) => `  ${line}\n`).join('')}
Environments through the API, as a service user.

  list     every environment, oldest first, protected or not, locked or not (viewer and above)
  show     its protection, its lock and its configuration's names (viewer and above)
  apply    makes the environment the file describes exist as it says (admin, owner): created when
           none has its name, changed to match when it differs, left alone when it does not
           ("unchanged"); says what changed. The file is one JSON object, the body of
           POST /v1/orgs/{orgId}/environments: {"name", "description", "protected", "variables",
           "secrets"}. It is the whole environment: what it leaves out takes a new one's value
           (no description, not protected, no variables, no secrets). A lock is not part of it:
           what show --json prints applies as it is (its id, lock, version and times are left
           out). A change made by someone else meanwhile is read and applied over (If-Match),
           and the apply names what it replaced.
           --file - reads standard input. --dry-run: the server checks it all and says what
           would be created or changed; nothing is changed
  delete   deletes it and its finished deployments (admin, owner); refused while a deployment
           into it is queued or running, and while a service serves in it unless --force (the
           runners then stop what runs there). --ignore-not-found: none by that name is no refusal
           (exit 0, "nothing to delete")
  lock     a deploy freeze: from now on no one creates a deployment into it, rolls back to one of
           its deployments or promotes into it, until it is unlocked; what is queued or running
           there goes on (admin, owner). --reason says why, to everyone refused
  unlock   it takes deployments again (admin, owner)

Exit status: 0 done; 1 refused by the server or unreachable (tried again for ${RETRY_MS / 1000} s); 2 a usage
error. Credentials come from flags, SLIPWAY_* variables or a credentials file, in that order:

${flagTable(apiClientFlagHelp('calling').map(([flag, arg, text]) => [`--${flag} ${arg}`, flag in API_CLIENT_VARIABLES ? API_CLIENT_VARIABLES[flag as keyof typeof API_CLIENT_VARIABLES] : '', text]))}`;

/** One line on what the environment's lock is now. */
function lockLine(env: Environment): string {
  return env.lock === null ? `environment ${env.name}: not locked` : `environment ${env.name}: locked since ${env.lock.lockedAt} by ${env.lock.lockedBy ?? '—'}: ${env.lock.reason}`;
}

export async function environmentCommand(argv: string[], env: Record<string, string | undefined>): Promise<number> {
  const asked = subcommandFlags(argv, SUBCOMMANDS, ENVIRONMENT_HELP, 'environment', 'an');
  if (asked === null) return 0;
  const { sub } = asked;
  const flags = asked.flags as Partial<Record<string, string | boolean>>;
  const json = flags.json === true;
  for (const variable of unknownVariables(env)) printWarning(json, unknownVariableWarning(variable));
  // Everything the command line can get wrong is refused before a token is asked for.
  const name = sub === 'list' || sub === 'apply' ? '' : requiredFlagText(flags, 'environment', 'the environment, by name or id');
  const reason = flags.reason;
  if (sub === 'lock' && (typeof reason !== 'string' || reason.trim() === '')) throw new UsageError('--reason is required: why the environment is locked, shown to everyone refused a deployment into it');
  const file = sub === 'apply' ? readJsonObject(requiredFlagText(flags, 'file', 'the JSON file describing the environment (- for standard input)'), ['id', 'lock', 'version', 'createdAt', 'updatedAt']) : undefined;

  const settings = apiClientSettings(flags, env);
  const call = patientCaller(settings, { json, retryMs: RETRY_MS, unanswered: 'check with slipway environment show whether it was made' });
  const environments = `/v1/orgs/${encodeURIComponent(settings.orgId)}/environments`;
  const path = `${environments}/${encodeURIComponent(name)}`;
  switch (sub) {
    case 'list': {
      const all = await everyItem<Environment>(call, environments, new URLSearchParams(), 'environments');
      if (json) printJson({ environments: all });
      else printTable(all.map((e) => ({ name: e.name, protected: e.protected ? 'yes' : 'no', locked: e.lock === null ? 'no' : `since ${e.lock.lockedAt}`, updated: e.updatedAt })), ['name', 'protected', 'locked', 'updated']);
      return 0;
    }
    case 'apply': {
      const applied = await applyResource<Environment>(call, {
        kind: 'environment',
        collection: environments,
        name: file!.name as string,
        create: file!,
        // The whole environment: what the file leaves out is what a new one has.
        // With its ETag, when the server gives environments one (an older one does not, and refuses any If-Match).
        update: (current) => ({
          body: { description: '', protected: false, variables: {}, secrets: [], ...file! },
          ...(typeof current.version === 'number' ? { headers: { 'if-match': etagOf(current.version, current.createdAt) } } : {}),
        }),
        fields: (e) => ({ description: e.description, protected: e.protected, variables: e.variables, secrets: e.secrets }),
        dryRun: flags['dry-run'] === true,
      });
      if (json) printJson(appliedJson('environment', applied));
      else process.stdout.write(`${printable(appliedLine('environment', applied.resource.name, applied))}\n`);
      return 0;
    }
    case 'delete': {
      const deleted = await deleteResource(call, `${path}${flags.force === true ? '?force=true' : ''}`, { ignoreNotFound: flags['ignore-not-found'] === true, gone: ['environment_not_found'] });
      if (json) printJson({ environment: name, deleted });
      else process.stdout.write(`${printable(deleted ? `environment ${name}: deleted, with its finished deployments` : `environment ${name}: not found; nothing to delete`)}\n`);
      return 0;
    }
    default: {
      // Whether an unlock undid a lock, or found none: read first, as the answer is the same.
      const wasLocked = sub === 'unlock' ? (await call<Environment>('GET', path)).lock : null;
      const answer = sub === 'show' ? await call<Environment>('GET', path)
        : sub === 'lock' ? await call<Environment>('PUT', `${path}/lock`, { reason })
          : await call<Environment>('DELETE', `${path}/lock`);
      if (json) printJson(answer);
      else if (sub === 'unlock') {
        process.stdout.write(`${printable(wasLocked !== null ? `environment ${answer.name}: unlocked (locked since ${wasLocked.lockedAt}: ${wasLocked.reason})` : `environment ${answer.name}: not locked; nothing to unlock`)}\n`);
      }
      else if (sub === 'show') {
        printFields({
          name: answer.name, id: answer.id, version: answer.version, protected: answer.protected,
          lock: answer.lock === null ? 'none' : `since ${answer.lock.lockedAt} by ${answer.lock.lockedBy ?? '—'}: ${answer.lock.reason}`,
          variables: Object.keys(answer.variables).join(' '), secrets: answer.secrets.map((r) => r.secret).join(' '),
        });
      } else process.stdout.write(`${printable(lockLine(answer))}\n`);
      return 0;
    }
  }
}
