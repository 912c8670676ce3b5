// `slipway deploy`: a deployment of a service into an environment, made through the API as a
// service user (developer or above; admin or owner for a protected environment), from a CI pipeline
// or a shell. With --wait it follows the deployment to its end, its log on stderr, and exits 0 only
// when it succeeded. The create is sent under an Idempotency-Key, so a retry after a lost answer
// (a server restarting, a connection cut) never makes a second deployment.
import { unknownVariables, unknownVariableWarning } from '../platform/unknown-variables.js';
import { API_CLIENT_FLAGS, API_CLIENT_VARIABLES, apiClientFlagHelp, apiClientSettings, commandFlags, type ApiClientSettings } from './api-client.js';
import { flagText, printWarning, UsageError } from './args.js';
import { deploymentPath, deploymentSession, Refused, WAIT_DEFAULT_SECONDS, waitSecondsOf, type FollowedDeployment } from './follow.js';
import { flagTable } from './output.js';

const FLAGS = {
  ...API_CLIENT_FLAGS,
  service: { type: 'string' },
  environment: { type: 'string' },
  from: { type: 'string' },
  revision: { type: 'string' },
  description: { type: 'string' },
  var: { type: 'string', multiple: true },
  wait: { type: 'boolean' },
  timeout: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

const DESCRIBED: Array<[string, string, string]> = [
  ['service', 'S', 'the service, by name or id (required)'],
  ['environment', 'ENV', 'the environment, by name or id (required)'],
  ['from', 'ENV', 'promote what serves in ENV (its last deployment of the service that succeeded there) into --environment: the same spec, revision, secret versions and variables, with --environment\'s configuration instead of ENV\'s'],
  ['revision', 'R', 'what is deployed: a commit, a tag, a build number; with --from, what ENV must serve (refused otherwise)'],
  ['description', 'D', 'a description of the deployment'],
  ['var', 'K=V', 'a plain variable for this deployment only, over the service\'s; repeat for more'],
  ['wait', '', 'follow it to its end, its log on stderr; exit 0 only when it succeeded'],
  ['timeout', 'S', `with --wait: give up waiting after S seconds (default ${WAIT_DEFAULT_SECONDS}); the deployment goes on`],
  ['json', '', 'print the deployment as JSON on stdout (and failures as JSON on stderr)'],
  ...apiClientFlagHelp('developer').map(([flag, arg, text]): [string, string, string] => [flag, arg, `${text}${flag in API_CLIENT_VARIABLES ? ` (${API_CLIENT_VARIABLES[flag as keyof typeof API_CLIENT_VARIABLES]})` : ''}`]),
];

export const DEPLOY_HELP = `usage: slipway deploy --service S --environment ENV [--from ENV] [--revision R] [--var K=V]… [--wait [--timeout S]] [--json]

Queues a deployment of a service into an environment, as a service user of the API (developer,
admin or owner; admin or owner for a protected environment), and prints its id on stdout once it is
created (with --json, the deployment, at the end). With --wait, follows it until it succeeded,
failed or was cancelled, with its log on stderr. With --from, it promotes what serves in another
environment instead of deploying the service as it is now.

Exit status: 0 created (with --wait: succeeded); 1 refused by the server, unreachable, failed,
cancelled, or still running when --timeout ran out; 2 a usage error; 130 or 143 interrupted (the
deployment goes on). The credentials come from flags, SLIPWAY_* variables or a credentials file,
in that order, as the runner's do.

${flagTable(DESCRIBED.map(([flag, arg, text]) => [`--${flag}${arg ? ` ${arg}` : ''}`, '', text]))}`;

interface DeploySettings extends ApiClientSettings {
  body: { service: string; environment: string; revision?: string; description?: string; variables?: Record<string, string> };
  /** Promote what serves in this environment (by name or id), at `body.revision` when given, instead of deploying the service. */
  from: string | null;
  /** Seconds to wait for the end, or null: do not wait. */
  waitSeconds: number | null;
  json: boolean;
}

type Flags = Partial<Record<keyof typeof FLAGS, string | string[] | boolean>>;
type Env = Record<string, string | undefined>;

export function deploySettings(flags: Flags, env: Env, read?: (file: string) => string): DeploySettings {
  const text = (flag: 'service' | 'environment' | 'description'): string | undefined => {
    const value = flags[flag];
    return typeof value === 'string' && value !== '' ? value : undefined;
  };
  const service = text('service');
  const environment = text('environment');
  if (service === undefined) throw new UsageError('--service is required: the service to deploy, by name or id');
  if (environment === undefined) throw new UsageError('--environment is required: where to deploy it, by name or id');
  const from = flagText(flags, 'from', 'the environment to promote from') ?? null;
  if (from !== null && from === environment) throw new UsageError(`--from and --environment are both ${from}: a promotion goes into another environment`);
  const variables: Record<string, string> = {};
  for (const pair of Array.isArray(flags.var) ? flags.var : []) {
    const at = pair.indexOf('=');
    if (at <= 0) throw new UsageError(`--var must be KEY=VALUE, got "${pair}"`);
    const key = pair.slice(0, at);
    if (key in variables) throw new UsageError(`--var ${key} is given twice`);
    variables[key] = pair.slice(at + 1);
  }
  const waitSeconds = waitSecondsOf(flags, 'deploy');
  // An empty --revision is a variable that was not set ("$GIT_SHA" outside the CI that sets it):
  // refused, as a deployment without its label would go unnoticed. No --revision at all is none.
  const revision = flagText(flags, 'revision', 'what is deployed');
  const description = text('description');
  return {
    ...apiClientSettings(flags, env, read),
    body: {
      service, environment,
      ...(revision !== undefined ? { revision } : {}),
      ...(description !== undefined ? { description } : {}),
      ...(Object.keys(variables).length > 0 ? { variables } : {}),
    },
    from,
    waitSeconds,
    json: flags.json === true,
  };
}

export async function deployCommand(argv: string[], env: Env): Promise<number> {
  const flags = commandFlags(argv, FLAGS, DEPLOY_HELP) as Flags | null;
  if (flags === null) return 0;
  for (const variable of unknownVariables(env)) printWarning(flags.json === true, unknownVariableWarning(variable));
  const settings = deploySettings(flags, env);
  const session = deploymentSession(settings, settings.json);
  try {
    // A promotion looks up what serves in the environment it promotes from once, then asks under the key as a create does.
    let source: FollowedDeployment | undefined;
    const { service, environment, revision, ...promoted } = settings.body;
    const made = await session.make(async (signal, key) => {
      if (settings.from === null) return session.call<FollowedDeployment>('POST', `/v1/orgs/${session.org}/deployments`, signal, settings.body, { 'idempotency-key': key });
      source ??= await session.lookUp(() => servingIn(settings.from!, service, revision, (path) => session.call<{ deployments: FollowedDeployment[] }>('GET', `/v1/orgs/${session.org}${path}`, signal)));
      return session.call<FollowedDeployment>('POST', `${deploymentPath(session.org, source.id)}/promote`, signal, { environment, ...promoted }, { 'idempotency-key': key });
    });
    if (typeof made === 'number') return made;
    return await session.finish(made, settings.waitSeconds);
  } finally {
    session.close();
  }
}

/**
 * What serves `service` in `environment` (its last deployment there that succeeded), to promote;
 * at `revision` when one is asked for, so that a pipeline promotes exactly what it tried.
 */
async function servingIn(environment: string, service: string, revision: string | undefined, get: (path: string) => Promise<{ deployments: FollowedDeployment[] }>): Promise<FollowedDeployment> {
  const { deployments } = await get(`/environments/${encodeURIComponent(environment)}/active?service=${encodeURIComponent(service)}&limit=1`);
  const serving = deployments[0];
  if (serving === undefined) throw new Refused('nothing_to_promote', `nothing serves ${service} in ${environment}: no deployment of it succeeded there to promote (deploy it there first)`);
  if (revision !== undefined && serving.revision !== revision) {
    throw new Refused('revision_not_serving', `${environment} serves ${service} at ${serving.revision ?? 'no revision'} (deployment ${serving.id}), not at ${revision}: nothing was promoted`);
  }
  return serving;
}
