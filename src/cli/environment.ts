// `slipway environment`: lock an environment (a deploy freeze) and unlock it through the API, as a
// service user of admin's role or above, from an incident channel's bot or a release pipeline; and
// show one, with its lock, as a viewer.
import { unknownVariables, unknownVariableWarning } from '../platform/unknown-variables.js';
import type { Environment } from '../modules/environments/environments.schemas.js';
import { API_CLIENT_FLAGS, API_CLIENT_VARIABLES, apiClientFlagHelp, apiClientSettings, patientCaller, subcommandFlags } from './api-client.js';
import { printWarning, UsageError } from './args.js';
import { flagTable, printable, printFields, printJson } from './output.js';
import { ENVIRONMENT_USAGE } from './usage.js';

const RETRY_MS = 60_000;

const COMMON = { ...API_CLIENT_FLAGS, environment: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } } as const;
const SUBCOMMANDS = {
  show: COMMON,
  lock: { ...COMMON, reason: { type: 'string' } },
  unlock: COMMON,
} as const;

export const ENVIRONMENT_HELP = `usage:
${ENVIRONMENT_USAGE.map((line) => `  ${line}\n`).join('')}
An environment through the API, as a service user.

  show     its protection, its lock and its configuration's names (viewer and above)
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
  const name = flags.environment;
  if (typeof name !== 'string' || name === '') throw new UsageError('--environment is required: the environment, by name or id');
  const reason = flags.reason;
  if (sub === 'lock' && (typeof reason !== 'string' || reason.trim() === '')) throw new UsageError('--reason is required: why the environment is locked, shown to everyone refused a deployment into it');

  const settings = apiClientSettings(flags, env);
  const call = patientCaller(settings, { json, retryMs: RETRY_MS, unanswered: 'check with slipway environment show whether it was made' });
  const path = `/v1/orgs/${encodeURIComponent(settings.orgId)}/environments/${encodeURIComponent(name)}`;
  const answer = sub === 'show' ? await call<Environment>('GET', path)
    : sub === 'lock' ? await call<Environment>('PUT', `${path}/lock`, { reason })
      : await call<Environment>('DELETE', `${path}/lock`);
  if (json) printJson(answer);
  else if (sub === 'show') {
    printFields({
      name: answer.name, id: answer.id, protected: answer.protected,
      lock: answer.lock === null ? 'none' : `since ${answer.lock.lockedAt} by ${answer.lock.lockedBy ?? '—'}: ${answer.lock.reason}`,
      variables: Object.keys(answer.variables).join(' '), secrets: answer.secrets.map((r) => r.secret).join(' '),
    });
  } else process.stdout.write(`${printable(lockLine(answer))}\n`);
  return 0;
}
