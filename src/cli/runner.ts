// `slipway runner`: the reference runner. It signs in as a `runner` service user, claims the
// deployments of its environments and runs each as a local process (src/runner-agent/). Its
// settings come from flags, SLIPWAY_* variables or a credentials file, in that order.
import fs from 'node:fs';
import { pino } from 'pino';
import { createLogger } from '../platform/logging.js';
import { RUNNER_VARIABLES as VARIABLES, unknownVariables, unknownVariableWarning } from '../platform/unknown-variables.js';
import { Refused } from '../runner-agent/http-call.js';
import { createProtocolClient } from '../runner-agent/protocol-client.js';
import { createRunner, RECONCILE_DEFAULT_SECONDS } from '../runner-agent/runner.js';
import { createTokenSource } from '../runner-agent/token-source.js';
import { flagTable } from './output.js';
import { API_CLIENT_FLAGS, apiClientFlagHelp, apiClientSettings, commandFlags, settingReader, type ApiClientSettings } from './api-client.js';
import { environmentsGiven, printWarning, UsageError } from './args.js';
import { RUNNER_USAGE } from './usage.js';

const FLAGS = {
  ...API_CLIENT_FLAGS,
  environment: { type: 'string', multiple: true },
  concurrency: { type: 'string' },
  'reconcile-seconds': { type: 'string' },
  'log-level': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;


const DESCRIBED: Array<[keyof typeof FLAGS, string, string]> = [
  ...apiClientFlagHelp('runner'),
  ['environment', 'ENV', 'an environment to serve; repeat, or separate with commas (default: all)'],
  ['concurrency', 'N', 'deployments carried out at once, 1-64 (default 4)'],
  ['reconcile-seconds', 'S', 'how often to report what it runs and adopt orphans, 1-3600 (default 15)'],
  ['log-level', 'L', 'the runner\'s own log, on stderr (default info)'],
];

const HELP = `usage: slipway runner [flags]

Claims the deployments of an organization's environments and runs each as a local process: the
service's command with its variables, secrets and PORT (a free port the runner picks), checked
over HTTP, then put in place of the previous process of that service and environment. Stops the
processes it started when it stops (SIGTERM, SIGINT) and lets their deployments go: the next runner
of the environment (this one, started again) starts them again. A deployment it had not finished
goes back to the queue at once, as its next attempt (or fails, when that was its last). It also starts what a runner that
went away ran, once the server has not heard from that runner for SLIPWAY_RUNNER_HOST_TIMEOUT_SECONDS.

Flags win over variables, variables over the credentials file:
${flagTable(DESCRIBED.map(([flag, arg, text]) => [`--${flag} ${arg}`, (VARIABLES as Record<string, string>)[flag] ?? '', text]))}`;

export interface RunnerSettings extends ApiClientSettings {
  environments?: string[];
  concurrency: number;
  reconcileSeconds: number;
  logLevel: string;
}

type Flags = Partial<Record<keyof typeof FLAGS, string | string[] | boolean>>;
type Env = Record<string, string | undefined>;

/** Flags over variables over the credentials file; every problem is a UsageError naming what to set. */
export function runnerSettings(flags: Flags, env: Env, read: (file: string) => string = (file) => fs.readFileSync(file, 'utf8')): RunnerSettings {
  const client = apiClientSettings(flags, env, read);
  const setting = settingReader(flags, env, VARIABLES);

  // Every environment only when none is given: one given empty (`--environment "$ENV"` with ENV
  // unset) is a mistake, and serving every environment would take production's deployments too.
  const environmentFlags = Array.isArray(flags.environment) ? flags.environment : [];
  const variable = env[VARIABLES.environment];
  const given = environmentFlags.length > 0 ? { values: environmentFlags, name: '--environment' } : variable !== undefined ? { values: [variable], name: VARIABLES.environment } : null;
  const environments = given === null ? [] : environmentsGiven(given.values, given.name, `leave it out (flag and ${VARIABLES.environment}) to serve every environment of the organization`);

  const concurrencyText = setting('concurrency') ?? '4';
  const concurrency = Number(concurrencyText);
  if (!/^\d+$/.test(concurrencyText) || concurrency < 1 || concurrency > 64) throw new UsageError(`--concurrency (${VARIABLES.concurrency}) must be a whole number from 1 to 64, got "${concurrencyText}"`);
  const reconcileText = setting('reconcile-seconds') ?? String(RECONCILE_DEFAULT_SECONDS);
  const reconcileSeconds = Number(reconcileText);
  if (!/^\d+$/.test(reconcileText) || reconcileSeconds < 1 || reconcileSeconds > 3600) {
    throw new UsageError(`--reconcile-seconds (${VARIABLES['reconcile-seconds']}) must be a whole number from 1 to 3600, got "${reconcileText}"`);
  }

  const logLevel = setting('log-level') ?? 'info';
  if (!(logLevel in pino.levels.values) && logLevel !== 'silent') throw new UsageError(`--log-level (${VARIABLES['log-level']}) must be one of ${[...Object.keys(pino.levels.values), 'silent'].join(', ')}, got "${logLevel}"`);

  return {
    ...client,
    ...(environments.length > 0 ? { environments: [...new Set(environments)] } : {}),
    concurrency,
    reconcileSeconds,
    logLevel,
  };
}

export async function runnerCommand(argv: string[], env: Env): Promise<number> {
  const flags = commandFlags(argv, FLAGS, HELP) as Flags | null;
  if (flags === null) return 0;
  const unknown = unknownVariables(env);
  let settings: RunnerSettings;
  try {
    settings = runnerSettings(flags, env);
  } catch (error) {
    // Before the refusal: a setting said to be missing may be one of these, misspelt.
    for (const variable of unknown) printWarning(false, unknownVariableWarning(variable));
    throw error;
  }
  // Synchronous: the last lines before an exit must not be lost in a buffer.
  const logger = createLogger(settings.logLevel, pino.destination({ dest: 2, sync: true })).child({ component: 'runner' });
  for (const variable of unknown) logger.warn({ variable: variable.name, closest: variable.closest }, unknownVariableWarning(variable));
  const client = createProtocolClient({
    baseUrl: settings.baseUrl,
    orgId: settings.orgId,
    tokens: createTokenSource(settings.credentials),
    // The first failure of a streak is news; the next ones, until every tenth, are not.
    onRetry: (call, error, attempt, delayMs) => logger[attempt === 1 || attempt % 10 === 0 ? 'warn' : 'debug']({ call, attempt, delayMs }, `the server is unavailable, retrying: ${error.message}`),
  });
  const runner = createRunner({ client, concurrency: settings.concurrency, reconcileSeconds: settings.reconcileSeconds, logger, ...(settings.environments ? { environments: settings.environments } : {}) });

  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    if (++signals > 1) {
      // Asked twice: leave now. The exit hook of local-process.ts still kills the processes it started.
      logger.warn({ signal }, 'stopping at once');
      process.exit(1);
    }
    logger.info({ signal }, 'stopping: no more claims; stopping the processes this runner started');
    runner.stop();
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  logger.info({ url: settings.baseUrl, org: settings.orgId, environments: settings.environments ?? 'all', concurrency: settings.concurrency, clientId: settings.credentials.clientId, host: runner.host }, 'runner started');
  try {
    await runner.run();
    logger.info('runner stopped');
    return 0;
  } catch (error) {
    if (!(error instanceof Refused)) throw error;
    // A base URL with the API's own path in it (`…/v1`) doubles that path in every call.
    const hint = error.code === 'route_not_found' ? ' (--url is the API\'s base URL, without /v1: check it)' : '';
    logger.error({ status: error.status, code: error.code }, `the server refused the runner, which cannot go on: ${error.detail}${hint}`);
    return 1;
  } finally {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  }
}
