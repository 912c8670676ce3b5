// The `slipway` command.
// Each command's module is loaded when it runs: help and usage errors answer in a fraction of the
// time that loading the server, the database drivers and the runner would take.
import { ConfigError } from '../platform/config.js';
import { AppError } from '../platform/errors.js';
import { errorMessage, isDatabaseBusy } from '../platform/db/facts.js';
import { parse, printWarning, Refusal, UsageError } from './args.js';
import { unknownVariableWarning } from '../platform/unknown-variables.js';
import { printable, printJson } from './output.js';
import { VERSION } from '../platform/version.js';
import { catchStopSignals } from './stop-signals.js';
import { BACKUP_USAGE, RESTORE_USAGE, DEPLOY_USAGE, DEPLOYMENT_USAGE, ENVIRONMENT_USAGE, EVENTS_USAGE, ORG_USAGE, RUNNER_USAGE, RUNNERS_USAGE, SECRET_USAGE, SERVICE_USAGE, SERVICE_USER_USAGE } from './usage.js';

const HELP = `slipway — deployment management

usage:
  slipway serve [--port N] [--host H] [--data-dir DIR] [--database-url URL] [--workers N] …
  slipway migrate [--json]
${[...ORG_USAGE, ...SERVICE_USER_USAGE, ...RUNNER_USAGE, ...RUNNERS_USAGE, ...DEPLOY_USAGE, ...DEPLOYMENT_USAGE, ...ENVIRONMENT_USAGE, ...SERVICE_USAGE, ...SECRET_USAGE, ...EVENTS_USAGE, ...BACKUP_USAGE, ...RESTORE_USAGE].map((line) => `  ${line}\n`).join('')}  slipway keys status|rotate-master|rotate-signing|revoke-signing [--json]   (slipway keys --help)
  slipway version [--json]

Every command reads the same configuration as serve: SLIPWAY_* environment variables, or the
matching flags (SLIPWAY_DATA_DIR = --data-dir); but the API clients, runner, runners, deploy,
deployment, environment, service, secret and events, which sign in as a service user and read their own settings (see their
--help). See the README for the full list. --master-key and --master-key-previous show the key to anyone who can list processes
(ps): prefer the variables or the key file.
`;

const FIELD_LINES = 20;

/** The fields a refusal points at, a line each: the API's detail names the first only. */
function fieldLines(error: AppError): string[] {
  const fields = (error.extras as { errors?: Array<{ pointer?: string; message?: string }> }).errors;
  if (!Array.isArray(fields) || fields.length < 2) return [];
  const lines = fields.slice(0, FIELD_LINES).map((f) => `${f.pointer || '(the body)'}: ${f.message ?? ''}`);
  return fields.length > FIELD_LINES ? [...lines, `… and ${fields.length - FIELD_LINES} more (--json lists them)`] : lines;
}

/** What the API's own advice (a request to send) is from a shell, for the refusals a CLI user meets. */
function shellHint(command: string | undefined, rest: string[], error: AppError): string {
  if (error.code === 'environment_locked') {
    const environment = /The environment "([^"]+)"/.exec(error.detail)?.[1];
    return environment === undefined ? '' : ` From a shell, as an admin or owner: slipway environment unlock --environment ${environment}`;
  }
  const serving = (error.extras as { conflicts?: Array<{ state?: string }> }).conflicts?.some((c) => c.state === 'succeeded') === true;
  if ((error.code === 'service_in_use' || error.code === 'environment_in_use') && serving && rest[0] === 'delete' && (command === 'service' || command === 'environment') && !rest.includes('--force')) {
    return ' From a shell: run it again with --force.';
  }
  return '';
}

function help(): number {
  process.stdout.write(HELP);
  return 0;
}

/** `--help` anywhere after the command wins, even after a flag the command does not know. */
const wantsHelp = (argv: string[]): boolean => argv.includes('--help') || argv.includes('-h');

export async function main(argv: string[], env: Record<string, string | undefined> = process.env): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'serve': {
        if (wantsHelp(rest)) return help();
        const p = parse(rest, {}, env, { logsUnknownVariables: true });
        let config;
        try {
          config = p.config();
        } catch (error) {
          // Refused before there is a log to warn in: a setting refused may be one of these, misspelt.
          for (const variable of p.unknownVariables) printWarning(rest.includes('--json'), unknownVariableWarning(variable));
          throw error;
        }
        // Before the server's code loads: a signal meanwhile stops it cleanly, not with the default death.
        const signals = catchStopSignals();
        return await (await import('./serve.js')).serve(config, signals, p.unknownVariables);
      }
      case 'migrate': {
        if (wantsHelp(rest)) return help();
        const p = parse(rest, {}, env);
        const { withCore } = await import('./commands.js');
        const result = await withCore(p, async (core) => ({ database: core.database.dialect, projectId: core.identity.projectId, applied: core.migrationsApplied }), { create: true, adoptProjectId: true });
        if (p.values.json) printJson({ ok: true, ...result });
        else if (result.applied.length === 0) process.stdout.write(`database is up to date (${result.database}); no migration was needed\n`);
        else process.stdout.write(`database brought up to date (${result.database}): applied ${result.applied.length} migration(s), ${result.applied[0]} to ${result.applied.at(-1)}\n`);
        return 0;
      }
      case 'org':
        return await (await import('./commands.js')).orgCommand(rest, env);
      case 'service-user':
        return await (await import('./commands.js')).serviceUserCommand(rest, env);
      case 'keys':
        return await (await import('./keys.js')).keysCommand(rest, env);
      case 'runner':
        return await (await import('./runner.js')).runnerCommand(rest, env);
      case 'runners':
        return await (await import('./runners.js')).runnersCommand(rest, env);
      case 'deploy':
        return await (await import('./deploy.js')).deployCommand(rest, env);
      case 'deployment':
        return await (await import('./deployment.js')).deploymentCommand(rest, env);
      case 'secret':
        return await (await import('./secret.js')).secretCommand(rest, env);
      case 'events':
        return await (await import('./events.js')).eventsCommand(rest, env);
      case 'environment':
        return await (await import('./environment.js')).environmentCommand(rest, env);
      case 'service':
        return await (await import('./service.js')).serviceCommand(rest, env);
      case 'backup':
        return await (await import('./backup.js')).backupCommand(rest, env);
      case 'restore':
        return await (await import('./restore.js')).restoreCommand(rest, env);
      case undefined:
        throw new UsageError('a command is needed: serve, migrate, org, service-user, keys, runner, runners, deploy, deployment, environment, service, secret, events, backup, restore or version; see slipway --help');
      case 'help':
      case '--help':
      case '-h':
        return help();
      case 'version':
      case '--version':
      case '-v': {
        if (wantsHelp(rest) || rest[0] === 'help') {
          process.stdout.write('usage:\n  slipway version [--json]\n');
          return 0;
        }
        if (rest.includes('--json')) printJson({ version: VERSION, node: process.versions.node });
        else process.stdout.write(`slipway ${VERSION} (Node.js ${process.versions.node})\n`);
        return 0;
      }
      default:
        throw new UsageError(`unknown command "${command}"; see slipway --help`);
    }
  } catch (error) {
    // With --json, every failure is JSON too (on stderr, as always): a script can read its code. The
    // runner takes no --json: refused, it says so in a line like its other usage errors.
    // `lines`: what a person reads under the message (the fields a problem points at); JSON has them in `extras`.
    const refuse = (exitCode: number, code: string, message: string, extras: Record<string, unknown> = {}, lines: string[] = []): number => {
      process.stderr.write(rest.includes('--json') && command !== 'runner' ? `${JSON.stringify({ error: { code, ...extras, message } })}\n`
        : `slipway: ${printable(message)}\n${lines.map((line) => `  ${printable(line)}\n`).join('')}`);
      return exitCode;
    };
    if (error instanceof UsageError || error instanceof ConfigError) return refuse(2, 'usage', error.message);
    if (error instanceof Refusal) return refuse(1, error.code, error.message);
    if (error instanceof AppError) return refuse(1, error.code, `${error.detail}${shellHint(command, rest, error)}`, { status: error.status, ...error.extras }, fieldLines(error));
    // The token endpoint's or the runner protocol's definite no (runner-agent/http-call.ts's
    // Refused, known by its name: importing it would load the runner for every command).
    if (error instanceof Error && error.name === 'Refused' && typeof (error as { code?: unknown }).code === 'string') {
      const { code, status } = error as Error & { code: string; status?: unknown };
      return refuse(1, code, error.message, typeof status === 'number' ? { status } : {});
    }
    if (isDatabaseBusy(error)) {
      return refuse(1, 'database_busy', 'the database is locked by another process (a server writing a large batch, or another slipway command); try again in a moment');
    }
    // Anything else the command could not do (a master key that cannot unwrap, a database out of
    // reach): exit 1, and with --json as JSON too.
    return refuse(1, 'failed', errorMessage(error));
  }
}
