// `slipway deploy`: a deployment of a service into an environment, made through the API as a
// service user (developer or above; admin or owner for a protected environment), from a CI pipeline
// or a shell. With --wait it follows the deployment to its end, its log on stderr, and exits 0 only
// when it succeeded. The create is sent under an Idempotency-Key, so a retry after a lost answer
// (a server restarting, a connection cut) never makes a second deployment.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { AppError } from '../platform/errors.js';
import { unknownVariables, unknownVariableWarning } from '../platform/unknown-variables.js';
import { untilAvailable } from '../runner-agent/http-call.js';
import { createTokenSource } from '../runner-agent/token-source.js';
import { API_CLIENT_FLAGS, API_CLIENT_VARIABLES, apiCaller, apiClientFlagHelp, apiClientSettings, commandFlags, within, type ApiClientSettings } from './api-client.js';
import { printWarning, UsageError } from './args.js';
import { ago, flagTable, printJson } from './output.js';

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

/** Waiting, by default and at most. */
const WAIT_DEFAULT_SECONDS = 900;
const WAIT_MAX_SECONDS = 86_400;
/** How long the create is tried again while the server is unavailable. */
const CREATE_RETRY_MS = 60_000;
/** Between two looks at a deployment that is still queued or running. */
const FOLLOW_PAUSE_MS = 1_000;
/** A deployment still queued this long (or half the wait, when shorter) gets a word on why it may be. */
const QUEUED_HINT_MS = 20_000;
/** How long the runners list is asked for, to say why a deployment waits. */
const RUNNERS_HINT_MS = 5_000;
const LOG_PAGE = 1_000;

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
  const text = (flag: 'service' | 'environment' | 'from' | 'revision' | 'description'): string | undefined => {
    const value = flags[flag];
    return typeof value === 'string' && value !== '' ? value : undefined;
  };
  const service = text('service');
  const environment = text('environment');
  if (service === undefined) throw new UsageError('--service is required: the service to deploy, by name or id');
  if (environment === undefined) throw new UsageError('--environment is required: where to deploy it, by name or id');
  if (flags.from === '') throw new UsageError('--from is empty (an unset variable?): give the environment to promote from, or leave the flag out');
  const from = text('from') ?? null;
  if (from !== null && from === environment) throw new UsageError(`--from and --environment are both ${from}: a promotion goes into another environment`);
  const variables: Record<string, string> = {};
  for (const pair of Array.isArray(flags.var) ? flags.var : []) {
    const at = pair.indexOf('=');
    if (at <= 0) throw new UsageError(`--var must be KEY=VALUE, got "${pair}"`);
    const key = pair.slice(0, at);
    if (key in variables) throw new UsageError(`--var ${key} is given twice`);
    variables[key] = pair.slice(at + 1);
  }
  const wait = flags.wait === true;
  let waitSeconds: number | null = null;
  if (typeof flags.timeout === 'string') {
    if (!wait) throw new UsageError('--timeout needs --wait: without it, deploy returns once the deployment is queued');
    if (!/^\d+$/.test(flags.timeout) || Number(flags.timeout) < 1 || Number(flags.timeout) > WAIT_MAX_SECONDS) {
      throw new UsageError(`--timeout must be a whole number of seconds from 1 to ${WAIT_MAX_SECONDS}, got "${flags.timeout}"`);
    }
    waitSeconds = Number(flags.timeout);
  } else if (wait) {
    waitSeconds = WAIT_DEFAULT_SECONDS;
  }
  // An empty --revision is a variable that was not set ("$GIT_SHA" outside the CI that sets it):
  // refused, as a deployment without its label would go unnoticed. No --revision at all is none.
  if (flags.revision === '') throw new UsageError('--revision is empty (an unset variable?): give what is deployed, or leave the flag out');
  const revision = text('revision');
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

interface Deployment {
  id: string;
  state: string;
  attempt: number;
  revision: string | null;
  service: { name: string };
  environment: { id?: string; name: string };
  reason?: string;
  promotedFrom?: string;
}

interface LogPage {
  lines: Array<{ seq: number; attempt: number; stream: string; line: string }>;
  nextAfter: number;
  hasMore: boolean;
  state: string;
}

const FINISHED = new Set(['succeeded', 'failed', 'cancelled', 'superseded']);

export async function deployCommand(argv: string[], env: Env): Promise<number> {
  const flags = commandFlags(argv, FLAGS, DEPLOY_HELP) as Flags | null;
  if (flags === null) return 0;
  for (const variable of unknownVariables(env)) printWarning(flags.json === true, unknownVariableWarning(variable));
  const settings = deploySettings(flags, env);
  // A signal stops the waiting (and a token request under way), not the deployment.
  const stop = new AbortController();
  // Whether the create (or the promotion) was sent: a promotion's look-up of its source before it creates nothing.
  let sent = false;
  let lookingUp = false;
  const call = apiCaller(settings, createTokenSource(settings.credentials, { who: `${settings.credentials.clientId}'s`, signal: stop.signal }), () => { if (!lookingUp) sent = true; });
  const org = encodeURIComponent(settings.orgId);
  const say = (line: string) => { if (!settings.json) process.stderr.write(`${line}\n`); };

  let signalled: NodeJS.Signals | null = null;
  const onSignal = (signal: NodeJS.Signals) => { signalled ??= signal; stop.abort(new Error(`interrupted (${signal})`)); };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const created = within(stop.signal, CREATE_RETRY_MS);
    const key = randomUUID();
    let deployment: Deployment;
    let lastTrouble = '';
    // A promotion looks up what serves in the environment it promotes from once, then asks under the key as a create does.
    let source: Deployment | undefined;
    const { service, environment, revision, ...promoted } = settings.body;
    const ask = settings.from === null
      ? () => call<Deployment>('POST', `/v1/orgs/${org}/deployments`, created.signal, settings.body, { 'idempotency-key': key })
      : async () => {
        if (source === undefined) {
          lookingUp = true;
          try {
            source = await servingIn(settings.from!, service, revision, (path) => call<{ deployments: Deployment[] }>('GET', `/v1/orgs/${org}${path}`, created.signal));
          } finally {
            lookingUp = false;
          }
        }
        return call<Deployment>('POST', `/v1/orgs/${org}/deployments/${encodeURIComponent(source.id)}/promote`, created.signal, { environment, ...promoted }, { 'idempotency-key': key });
      };
    try {
      deployment = await untilAvailable(ask, {
        signal: created.signal,
        onRetry: (error, n) => {
          lastTrouble = error.message;
          if (n === 1) say(`slipway: the server is unavailable, trying again for up to ${CREATE_RETRY_MS / 1000} s: ${error.message}`);
        },
      });
    } catch (error) {
      if (signalled !== null) return interrupted(settings.json, signalled, sent ? 'before the server answered; the deployment may have been created' : 'before the deployment was asked for; nothing was created');
      if (created.timedOut()) {
        throw new Error(lastTrouble.includes(' 409')
          ? `the server was still creating the deployment after ${CREATE_RETRY_MS / 1000} s (its first try holds the Idempotency-Key); GET /v1/orgs/{orgId}/deployments lists it once made`
          : `the server did not take the deployment within ${CREATE_RETRY_MS / 1000} s (${lastTrouble}); it was not created, or, if its answer was lost, GET /v1/orgs/{orgId}/deployments lists it`);
      }
      // Made, but its answer lost for good (the server went down between the two): what it made is named.
      const made = error instanceof AppError && error.code === 'idempotency_response_lost'
        ? (error.extras as { changed?: Array<{ type: string; id: string }> }).changed?.find((c) => c.type === 'deployment') : undefined;
      if (made === undefined) throw error;
      const reading = within(stop.signal, CREATE_RETRY_MS);
      try {
        deployment = await untilAvailable(() => call<Deployment>('GET', `/v1/orgs/${org}/deployments/${encodeURIComponent(made.id)}`, reading.signal), { signal: reading.signal });
      } finally {
        reading.clear();
      }
    } finally {
      created.clear();
    }
    say(`deployment ${deployment.id}: ${deployment.service.name} into ${deployment.environment.name}${deployment.revision !== null ? ` at ${deployment.revision}` : ''}${deployment.promotedFrom !== undefined ? `, promoted from ${deployment.promotedFrom}` : ''}, ${deployment.state}`);
    // Its id goes out at once: a wait that times out or is interrupted leaves it on stdout too,
    // for a script to follow or cancel. With --json, stdout holds the deployment as it ended.
    if (!settings.json) process.stdout.write(`${deployment.id}\n`);
    if (settings.waitSeconds === null) {
      if (settings.json) printJson(deployment);
      return 0;
    }

    const waiting = within(stop.signal, settings.waitSeconds * 1000);
    const path = `/v1/orgs/${org}/deployments/${encodeURIComponent(deployment.id)}`;
    let after = 0;
    let state = deployment.state;
    // Nothing says whether a runner serves that environment: a deployment no runner takes waits
    // silently, so a wait that sees it queued for a while says what to check, once.
    const waitStarted = Date.now();
    const hintAfterMs = Math.min(QUEUED_HINT_MS, (settings.waitSeconds * 1000) / 2);
    const queuedHint = (runners = `is a runner for ${deployment.environment.name} running?`) =>
      `no runner has claimed it yet: ${runners} (a deployment also waits while another of ${deployment.service.name} there is in progress)`;
    /** What the runners list says of those that take this environment's deployments; the plain question if it cannot be read. */
    const runnersHint = async (): Promise<string | undefined> => {
      const asking = within(stop.signal, RUNNERS_HINT_MS);
      try {
        const { runners } = await call<{ runners: Array<{ state: string; lastSeenAt: string; inProgress: string[] }> }>('GET',
          `/v1/orgs/${org}/runners?environment=${encodeURIComponent(deployment.environment.id ?? deployment.environment.name)}&limit=200`, asking.signal);
        const online = runners.filter((r) => r.state === 'online');
        const env = deployment.environment.name;
        if (online.length > 0) {
          const busy = online.reduce((n, r) => n + r.inProgress.length, 0);
          return `${online.length} runner${online.length === 1 ? '' : 's'} for ${env} ${online.length === 1 ? 'is' : 'are'} online, carrying out ${busy} deployment${busy === 1 ? '' : 's'} now (slipway runners --environment ${env})`;
        }
        const last = runners.map((r) => r.lastSeenAt).sort().at(-1);
        return `no runner for ${env} is online (${last === undefined ? 'none was ever seen' : `the last was seen ${ago(last)}`}): start one with slipway runner --environment ${env}`;
      } catch {
        return undefined;
      } finally {
        asking.clear();
      }
    };
    let hinted = false;
    try {
      for (;;) {
        // The state is read before the lines: a page that shows the end has every line before it.
        const page = await untilAvailable(() => call<LogPage>('GET', `${path}/logs?after=${after}&limit=${LOG_PAGE}`, waiting.signal), {
          signal: waiting.signal,
          onRetry: (error, n) => { if (n === 1) say(`slipway: the server is unavailable, still waiting: ${error.message}`); },
        });
        for (const line of page.lines) process.stderr.write(`${line.line}\n`);
        after = page.nextAfter;
        if (page.state !== state) say(`deployment ${deployment.id}: ${state = page.state}`);
        if (page.hasMore) continue;
        if (FINISHED.has(page.state)) break;
        if (page.state === 'queued' && !hinted && Date.now() - waitStarted >= hintAfterMs) {
          hinted = true;
          say(`deployment ${deployment.id} is still queued: ${queuedHint(await runnersHint())}`);
        }
        await sleep(FOLLOW_PAUSE_MS, undefined, { signal: waiting.signal });
      }
    } catch (error) {
      if (signalled !== null) return interrupted(settings.json, signalled, `while deployment ${deployment.id} is ${state}; it goes on`, deployment.id);
      if (!waiting.timedOut()) throw error;
      return failed(settings.json, 'wait_timeout', `gave up waiting after ${settings.waitSeconds} s: deployment ${deployment.id} is still ${state}, and goes on${state === 'queued' ? `; ${queuedHint(await runnersHint())}` : ''}`, deployment.id);
    } finally {
      waiting.clear();
    }
    const reading = within(stop.signal, CREATE_RETRY_MS);
    let final: Deployment;
    try {
      final = await untilAvailable(() => call<Deployment>('GET', path, reading.signal), { signal: reading.signal });
    } catch (error) {
      if (signalled !== null) return interrupted(settings.json, signalled, `after deployment ${deployment.id} ended ${state}`, deployment.id);
      throw error;
    } finally {
      reading.clear();
    }
    if (settings.json) printJson(final);
    if (final.state === 'succeeded' || final.state === 'superseded') return 0;
    return failed(settings.json, `deployment_${final.state}`, `deployment ${final.id} ${final.state}${final.reason ? `: ${final.reason}` : ''}`, final.id);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/**
 * What serves `service` in `environment` (its last deployment there that succeeded), to promote;
 * at `revision` when one is asked for, so that a pipeline promotes exactly what it tried.
 */
async function servingIn(environment: string, service: string, revision: string | undefined, get: (path: string) => Promise<{ deployments: Deployment[] }>): Promise<Deployment> {
  const { deployments } = await get(`/environments/${encodeURIComponent(environment)}/active?service=${encodeURIComponent(service)}&limit=1`);
  const serving = deployments[0];
  if (serving === undefined) throw new Error(`nothing serves ${service} in ${environment}: no deployment of it succeeded there to promote (deploy it there first)`);
  if (revision !== undefined && serving.revision !== revision) {
    throw new Error(`${environment} serves ${service} at ${serving.revision ?? 'no revision'} (deployment ${serving.id}), not at ${revision}: nothing was promoted`);
  }
  return serving;
}

/** A deployment that did not succeed, said as main.ts says failures. */
function failed(json: boolean, code: string, message: string, deployment?: string): number {
  process.stderr.write(json ? `${JSON.stringify({ error: { code, message, ...(deployment !== undefined ? { deployment } : {}) } })}\n` : `slipway: ${message}\n`);
  return 1;
}

function interrupted(json: boolean, signal: NodeJS.Signals, what: string, deployment?: string): number {
  failed(json, 'interrupted', `interrupted (${signal}) ${what}`, deployment);
  return signal === 'SIGINT' ? 130 : 143;
}
