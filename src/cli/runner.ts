// `slipway runner`: the reference runner. It signs in as a `runner` service user, claims the
// deployments of its environments and runs each as a local process (src/runner-agent/). Its
// settings come from flags, SLIPWAY_* variables or a credentials file, in that order.
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { createLogger } from '../platform/logging.js';
import { Refused } from '../runner-agent/http-call.js';
import { createProtocolClient } from '../runner-agent/protocol-client.js';
import { createRunner, RECONCILE_DEFAULT_SECONDS } from '../runner-agent/runner.js';
import { createTokenSource, type ClientCredentials } from '../runner-agent/token-source.js';
import { UsageError } from './args.js';
import { RUNNER_USAGE } from './usage.js';


const FLAGS = {
  org: { type: 'string' },
  environment: { type: 'string', multiple: true },
  credentials: { type: 'string' },
  'client-id': { type: 'string' },
  'client-secret': { type: 'string' },
  'token-url': { type: 'string' },
  scope: { type: 'string' },
  url: { type: 'string' },
  concurrency: { type: 'string' },
  'reconcile-seconds': { type: 'string' },
  'log-level': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** The variable behind each flag. */
const VARIABLES = {
  org: 'SLIPWAY_ORG',
  environment: 'SLIPWAY_ENVIRONMENTS',
  'client-id': 'SLIPWAY_CLIENT_ID',
  'client-secret': 'SLIPWAY_CLIENT_SECRET',
  'token-url': 'SLIPWAY_TOKEN_URL',
  scope: 'SLIPWAY_SCOPE',
  url: 'SLIPWAY_URL',
  concurrency: 'SLIPWAY_RUNNER_CONCURRENCY',
  'reconcile-seconds': 'SLIPWAY_RUNNER_RECONCILE_SECONDS',
  'log-level': 'SLIPWAY_LOG_LEVEL',
} as const;

const TOKEN_PATH = '/oauth/v2/token';

const DESCRIBED: Array<[keyof typeof FLAGS, string, string]> = [
  ['credentials', 'FILE', 'JSON with clientId, clientSecret, tokenUrl, scope, orgId and baseUrl (service-user create --json)'],
  ['client-id', 'ID', 'the runner service user\'s client id'],
  ['client-secret', 'S', 'its client secret (a flag shows in ps: prefer the variable or the file)'],
  ['scope', 'S', 'the scope string to ask for'],
  ['url', 'URL', 'the API\'s base URL (default: the token URL\'s)'],
  ['token-url', 'URL', `the token endpoint (default: URL${TOKEN_PATH})`],
  ['org', 'ORG', 'organization id or slug'],
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
${DESCRIBED.map(([flag, arg, text]) => `  ${`--${flag} ${arg}`.padEnd(20)} ${((VARIABLES as Record<string, string>)[flag] ?? '').padEnd(27)} ${text}\n`).join('')}`;

export interface RunnerSettings {
  baseUrl: string;
  orgId: string;
  environments?: string[];
  credentials: ClientCredentials;
  concurrency: number;
  reconcileSeconds: number;
  logLevel: string;
}

type Flags = Partial<Record<keyof typeof FLAGS, string | string[] | boolean>>;
type Env = Record<string, string | undefined>;

/** What `--credentials FILE` may provide; the shape bootstrap.json and `service-user create --json` share. */
interface CredentialsFile {
  clientId?: string;
  clientSecret?: string;
  tokenUrl?: string;
  scope?: string;
  orgId?: string;
  baseUrl?: string;
}

function readCredentialsFile(file: string, read: (file: string) => string): CredentialsFile {
  let parsed: unknown;
  try {
    parsed = JSON.parse(read(file));
  } catch (error) {
    // Never JSON.parse's own message: it quotes the file, and the file holds the client secret.
    const code = (error as NodeJS.ErrnoException).code;
    throw new UsageError(`--credentials ${file}: ${code ? `cannot read it (${code})` : 'is not valid JSON'}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new UsageError(`--credentials ${file} must hold a JSON object with clientId, clientSecret, tokenUrl, scope and orgId`);
  const out: CredentialsFile = {};
  for (const key of ['clientId', 'clientSecret', 'tokenUrl', 'scope', 'orgId', 'baseUrl'] as const) {
    const value = (parsed as Record<string, unknown>)[key];
    if (typeof value === 'string' && value !== '') out[key] = value;
  }
  return out;
}

function httpUrl(value: string, what: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`${what} must be an absolute http(s) URL, got "${value}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError(`${what} must be an http(s) URL, got "${value}"`);
  return value.replace(/\/+$/, '');
}

/** Flags over variables over the credentials file; every problem is a UsageError naming what to set. */
export function runnerSettings(flags: Flags, env: Env, read: (file: string) => string = (file) => fs.readFileSync(file, 'utf8')): RunnerSettings {
  const file = typeof flags.credentials === 'string' ? readCredentialsFile(flags.credentials, read) : {};
  const setting = (flag: keyof typeof VARIABLES, fromFile?: string): string | undefined => {
    const given = flags[flag];
    const value = typeof given === 'string' ? given : env[VARIABLES[flag]];
    return value !== undefined && value !== '' ? value : fromFile;
  };
  const required = (flag: keyof typeof VARIABLES, fromFile?: string): string => {
    const value = setting(flag, fromFile);
    if (value === undefined) throw new UsageError(`--${flag} (${VARIABLES[flag]}) is required, or --credentials FILE that has it`);
    return value;
  };

  const givenUrl = setting('url', file.baseUrl);
  const givenTokenUrl = setting('token-url', file.tokenUrl);
  if (givenUrl === undefined && givenTokenUrl === undefined) throw new UsageError('--url (SLIPWAY_URL) is required: the base URL of the Slipway API');
  const url = givenUrl !== undefined ? httpUrl(givenUrl, '--url (SLIPWAY_URL)') : undefined;
  const tokenUrl = httpUrl(givenTokenUrl ?? `${url}${TOKEN_PATH}`, '--token-url (SLIPWAY_TOKEN_URL)');
  // By default the API and the authorization server are one server: the token URL names its base.
  const baseUrl = url ?? (tokenUrl.endsWith(TOKEN_PATH) ? tokenUrl.slice(0, -TOKEN_PATH.length) : tokenUrl);

  const environmentFlags = Array.isArray(flags.environment) ? flags.environment : [];
  const environments = (environmentFlags.length > 0 ? environmentFlags : [env[VARIABLES.environment] ?? ''])
    .flatMap((e) => e.split(',')).map((e) => e.trim()).filter((e) => e !== '');

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
    baseUrl,
    orgId: required('org', file.orgId),
    ...(environments.length > 0 ? { environments: [...new Set(environments)] } : {}),
    credentials: {
      tokenUrl,
      clientId: required('client-id', file.clientId),
      clientSecret: required('client-secret', file.clientSecret),
      scope: required('scope', file.scope),
    },
    concurrency,
    reconcileSeconds,
    logLevel,
  };
}

export async function runnerCommand(argv: string[], env: Env): Promise<number> {
  // `--help` wins, even after a flag the runner does not know.
  if (argv.includes('--help') || argv.includes('-h') || argv[0] === 'help') {
    process.stdout.write(HELP);
    return 0;
  }
  let flags: Flags;
  try {
    flags = parseArgs({ args: argv, options: FLAGS, allowPositionals: false, strict: true }).values;
  } catch (error) {
    // node:util's messages run on with advice about `--`; the first sentence is the clear part.
    throw new UsageError((error as Error).message.split(/(?<=\.) /)[0]!);
  }
  if (flags.help === true) {
    process.stdout.write(HELP);
    return 0;
  }
  const settings = runnerSettings(flags, env);
  // Synchronous: the last lines before an exit must not be lost in a buffer.
  const logger = createLogger(settings.logLevel, pino.destination({ dest: 2, sync: true })).child({ component: 'runner' });
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
    logger.error({ status: error.status, code: error.code }, `the server refused the runner, which cannot go on: ${error.detail}`);
    return 1;
  } finally {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  }
}
