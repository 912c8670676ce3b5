// `slipway runners`: which runners an organization has and whether they are up, through the API,
// as a service user of viewer's role or above: what to look at when a deployment stays queued.
import { unknownVariables, unknownVariableWarning } from '../platform/unknown-variables.js';
import type { Runner } from '../modules/runner/runners.schemas.js';
import { API_CLIENT_FLAGS, API_CLIENT_VARIABLES, apiClientFlagHelp, apiClientSettings, commandFlags, everyItem, patientCaller } from './api-client.js';
import { printWarning, UsageError } from './args.js';
import { ago, flagTable, printJson, printTable } from './output.js';
import { RUNNERS_USAGE } from './usage.js';

const RETRY_MS = 60_000;

const FLAGS = {
  ...API_CLIENT_FLAGS,
  environment: { type: 'string' },
  state: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

export const RUNNERS_HELP = `usage:
${RUNNERS_USAGE.map((line) => `  ${line}\n`).join('')}
The organization's runners, as a service user of viewer's role or above: each runner process (a
runner started again is another), whether it is online (heard from within the last
SLIPWAY_RUNNER_HOST_TIMEOUT_SECONDS, and never less than 40 s), the environments it takes ("all"),
the deployments it carries out now and how many it serves. --environment lists those that take that
environment's deployments; --state online|offline those in that state. Runners not heard from for 7
days are forgotten.

Exit status: 0 listed; 1 refused by the server or unreachable (tried again for ${RETRY_MS / 1000} s); 2 a usage
error. Credentials come from flags, SLIPWAY_* variables or a credentials file, in that order:

${flagTable(apiClientFlagHelp('calling').map(([flag, arg, text]) => [`--${flag} ${arg}`, flag in API_CLIENT_VARIABLES ? API_CLIENT_VARIABLES[flag as keyof typeof API_CLIENT_VARIABLES] : '', text]))}`;

export async function runnersCommand(argv: string[], env: Record<string, string | undefined>): Promise<number> {
  if (argv[0] === 'help') {
    process.stdout.write(RUNNERS_HELP);
    return 0;
  }
  const flags = commandFlags(argv, FLAGS, RUNNERS_HELP);
  if (flags === null) return 0;
  const json = flags.json === true;
  for (const variable of unknownVariables(env)) printWarning(json, unknownVariableWarning(variable));
  const query = new URLSearchParams();
  if (flags.environment !== undefined) {
    if (flags.environment === '') throw new UsageError('--environment must name an environment; leave it out for every runner');
    query.set('environment', String(flags.environment));
  }
  if (flags.state !== undefined) {
    if (flags.state !== 'online' && flags.state !== 'offline') throw new UsageError(`--state must be online or offline, got "${String(flags.state)}"`);
    query.set('state', flags.state);
  }
  const settings = apiClientSettings(flags, env);
  const call = patientCaller(settings, { json, retryMs: RETRY_MS, unanswered: '' });
  const runners = await everyItem<Runner>(call, `/v1/orgs/${encodeURIComponent(settings.orgId)}/runners`, query, 'runners');
  if (json) {
    printJson({ runners });
    return 0;
  }
  if (runners.length === 0) {
    process.stderr.write(`slipway: no runner${flags.environment !== undefined ? ` takes ${flags.environment}'s deployments` : ''}${flags.state !== undefined ? ` that is ${flags.state}` : ''}; start one with slipway runner (see slipway runner --help)\n`);
    return 0;
  }
  printTable(runners.map((r) => ({
    host: r.host,
    // A server older than stop notices says nothing of them (no `stoppedAt`).
    state: typeof r.stoppedAt === 'string' ? 'offline (stopped)' : r.state,
    service_user: r.serviceUser.name,
    hostname: r.hostname ?? '',
    // Kept to environments that were all deleted since: it takes nothing.
    environments: r.environments === null ? 'all' : r.environments.length === 0 ? 'none (deleted)' : r.environments.map((e) => e.name).join(' '),
    last_seen: ago(r.lastSeenAt),
    in_progress: r.inProgress.length,
    serving: r.serving,
  })), ['host', 'state', 'service_user', 'hostname', 'environments', 'last_seen', 'in_progress', 'serving']);
  return 0;
}
