// `slipway deployment`: an organization's deployments through the API, as a service user, for an
// on-call shell or a pipeline: list them, show one, read or follow its log, see what it changes,
// cancel it, and roll a service back in an environment in one command (to what served there before,
// or to a deployment named), following the rollback to its end with --wait as `slipway deploy` does.
import { unknownVariables, unknownVariableWarning } from '../platform/unknown-variables.js';
import type { Deployment, DeploymentProcessT, LogLineT } from '../modules/deployments/deployments.schemas.js';
import type { DeploymentChangesT } from '../modules/deployments/deployment-changes.js';
import { API_CLIENT_FLAGS, API_CLIENT_VARIABLES, apiClientFlagHelp, apiClientSettings, everyItem, patientCaller, subcommandFlags } from './api-client.js';
import { flagText, printWarning, requiredFlagText, UsageError, wholeNumberFlag } from './args.js';
import { deploymentPath, deploymentSession, FINISHED_STATES, followLog, interrupted, readDeployment, ReadTimedOut, Refused, waitSecondsOf, type FollowedDeployment } from './follow.js';
import { ago, failed, flagTable, printable, printFields, printJson, printTable } from './output.js';
import { DEPLOYMENT_USAGE } from './usage.js';

/** How long a call is tried again while the server is unavailable. */
const RETRY_MS = 60_000;
const LIST_DEFAULT = 20;
const LIST_MAX = 200;
const LOG_PAGE = 1_000;
/** `logs --tail N`: as many as the API reads in one page (LOG_PAGE_MAX). */
const LOG_TAIL_MAX = 1_000;
/** `logs --follow` without --timeout: a day, as long as `deploy --wait --timeout` may. */
const FOLLOW_SECONDS = 86_400;
const STATES = ['queued', 'in_progress', 'succeeded', 'failed', 'cancelled', 'superseded'];

type Env = Record<string, string | undefined>;
type Flags = Partial<Record<string, string | string[] | boolean>>;

const COMMON = { ...API_CLIENT_FLAGS, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } } as const;
const ID = { id: { type: 'string' } } as const;
const WAIT = { wait: { type: 'boolean' }, timeout: { type: 'string' } } as const;

const SUBCOMMANDS = {
  list: { ...COMMON, service: { type: 'string' }, environment: { type: 'string' }, state: { type: 'string', multiple: true }, limit: { type: 'string' }, cursor: { type: 'string' } },
  show: { ...COMMON, ...ID },
  active: { ...COMMON, environment: { type: 'string' } },
  logs: { ...COMMON, ...ID, follow: { type: 'boolean' }, timeout: { type: 'string' }, tail: { type: 'string' } },
  changes: { ...COMMON, ...ID, against: { type: 'string' } },
  cancel: { ...COMMON, ...ID, reason: { type: 'string' } },
  wait: { ...COMMON, ...ID, timeout: { type: 'string' } },
  rollback: { ...COMMON, ...WAIT, to: { type: 'string' }, service: { type: 'string' }, environment: { type: 'string' }, description: { type: 'string' } },
} as const;

export const DEPLOYMENT_HELP = `usage:
${DEPLOYMENT_USAGE.map((line) => `  ${line}\n`).join('')}
An organization's deployments through the API, as a service user: viewer and above to list, show,
read logs and changes; developer and above to cancel and roll back (admin or owner in a protected
environment).

  list      newest first, ${LIST_DEFAULT} by default (--limit up to ${LIST_MAX}); --service, --environment and
            --state (repeatable: ${STATES.join(', ')}) narrow it. When more
            follow, it says which --cursor gets them (--json: nextCursor)
  show      one deployment: what it runs, its state and why, who made it, its process
  active    what serves in an environment: each service's succeeded deployment there (the one a
            rollback would leave), its revision, since when, and how its process is doing
  logs      its log from the start, or its last N lines (--tail N, up to ${LOG_TAIL_MAX}), on stdout
            (--json: one JSON object a line, with seq, attempt, stream and at); --follow keeps
            reading until the deployment ended, for --timeout seconds at most (a day by default)
  changes   what it changes against what it replaced (--against DEP: another deployment)
  cancel    a queued or in-progress deployment (--reason says why)
  wait      follows one already made (by a deploy without --wait, or one interrupted) to its end,
            its log on stderr, as deploy --wait does: exit 0 only when it succeeded, 1 when it
            failed or was cancelled, or was still going after --timeout seconds (900 by default)
  rollback  a new deployment of an earlier one's exact snapshot. With --service and --environment,
            to what served there before what serves now (the newest superseded deployment: a
            second rollback undoes the first), refused while one of them there is queued or in
            progress; --to DEP names the deployment instead. --wait follows it to its end as
            slipway deploy --wait does (exit 0 only when it succeeded)

Exit status: 0 done (rollback --wait, wait: succeeded); 1 refused by the server, unreachable (tried
again for ${RETRY_MS / 1000} s), nothing to roll back to or a deployment in flight, a deployment waited for that failed, was
cancelled or was still running when --timeout ran out, or a log still followed then; 2 a usage
error; 130 or 143 interrupted (a rollback, a deployment followed, goes on).
Credentials come from flags, SLIPWAY_* variables or a credentials file, in that order:

${flagTable(apiClientFlagHelp('calling').map(([flag, arg, text]) => [`--${flag} ${arg}`, flag in API_CLIENT_VARIABLES ? API_CLIENT_VARIABLES[flag as keyof typeof API_CLIENT_VARIABLES] : '', text]))}`;

/** Seconds to follow a log for (`--follow`, `--timeout S`), or null: print what there is and end. */
function followSecondsOf(flags: Flags): number | null {
  if (flags.follow !== true) {
    if (flags.timeout !== undefined) throw new UsageError('--timeout needs --follow: without it, logs prints the log as it is and ends');
    return null;
  }
  return flags.timeout === undefined ? FOLLOW_SECONDS : waitSecondsOf({ wait: true, timeout: flags.timeout }, 'logs');
}

/** Where to roll back to: a deployment named, or what served before in a service's environment. */
function rollbackTarget(flags: Flags): { to: string } | { service: string; environment: string } {
  const to = flagText(flags, 'to', 'the deployment to roll back to (dep_…)');
  const service = flagText(flags, 'service', 'the service, by name or id');
  const environment = flagText(flags, 'environment', 'the environment, by name or id');
  if (to !== undefined) {
    if (service !== undefined || environment !== undefined) throw new UsageError('--to names the deployment to roll back to: leave --service and --environment out, or give them instead of --to');
    return { to };
  }
  if (service === undefined || environment === undefined) throw new UsageError('rollback needs --service and --environment (to what served there before), or --to DEP');
  return { service, environment };
}

function oneLine(d: Deployment): Record<string, string> {
  return {
    id: d.id, service: d.service.name, environment: d.environment.name, revision: d.revision ?? '', state: d.state,
    created: ago(d.createdAt), by: d.createdBy ?? '',
  };
}

function printDeployment(d: Deployment): void {
  printFields({
    id: d.id,
    service: `${d.service.name} (version ${d.service.version})`,
    environment: d.environment.name,
    revision: d.revision ?? '—',
    state: `${d.state}${d.attempt > 1 ? ` (attempt ${d.attempt})` : ''}${d.reason !== undefined ? `: ${d.reason}` : ''}`,
    ...(d.description !== '' ? { description: d.description } : {}),
    ...(d.rollbackOf !== undefined ? { 'rollback to': d.rollbackOf } : {}),
    ...(d.promotedFrom !== undefined ? { 'promoted from': d.promotedFrom } : {}),
    created: `${d.createdAt} by ${d.createdBy ?? '—'}`,
    ...(d.startedAt !== undefined ? { started: d.startedAt } : {}),
    ...(d.finishedAt !== undefined ? { finished: d.finishedAt } : {}),
    ...(d.lease !== undefined ? { runner: `${d.lease.runner} (lease until ${d.lease.expiresAt})` } : {}),
    ...(d.process !== undefined ? { process: processLine(d.process) } : {}),
    command: d.spec.command !== undefined ? d.spec.command.join(' ') : '—',
    ...(d.spec.image !== undefined ? { image: d.spec.image } : {}),
  });
}

/** Changes as rows: what, before, after. */
function printChanges(c: DeploymentChangesT): void {
  const show = (value: unknown) => value === undefined ? '' : typeof value === 'string' ? value : JSON.stringify(value);
  process.stdout.write(`${printable(c.against === null
    ? `${c.deployment}: the first of its service in its environment; everything is added`
    : `${c.deployment} against ${c.against.id} (${c.against.state}${c.against.revision !== null ? ` at ${c.against.revision}` : ''} in ${c.against.environment.name})`)}\n`);
  const rows: Array<Record<string, string>> = [];
  if (c.revision !== null) rows.push({ what: 'revision', change: c.revision.from === null ? 'added' : c.revision.to === null ? 'removed' : 'changed', from: c.revision.from ?? '—', to: c.revision.to ?? '—' });
  for (const s of c.spec) rows.push({ what: s.field, change: s.change, from: show(s.from), to: show(s.to) });
  for (const v of c.variables) rows.push({ what: `variable ${v.name}`, change: v.change, from: show(v.from), to: show(v.to) });
  for (const s of c.secrets) {
    const ref = `secret ${s.secret}${s.key !== undefined ? `.${s.key}` : ''}${s.as !== undefined ? ` as ${s.as}` : ''}`;
    rows.push({ what: ref, change: s.change, from: s.from !== undefined ? `version ${s.from}` : '', to: s.to !== undefined ? `version ${s.to}` : '' });
  }
  if (rows.length === 0) process.stdout.write('no changes\n');
  else printTable(rows, ['what', 'change', 'from', 'to']);
}

/** How its process is doing, a crash loop included: `restarting at h:p, exited 4 times (last: code 7, 3 s ago), reported 5 s ago`. */
function processLine(p: DeploymentProcessT): string {
  const exit = p.lastExit === null ? '' : ` (last: ${p.lastExit.signal !== null ? `signal ${p.lastExit.signal}` : `code ${p.lastExit.code}`}, ${ago(p.lastExit.at)})`;
  const exits = p.exits === 0 ? '' : `, exited ${p.exits === 1 ? 'once' : `${p.exits} times`}${exit}`;
  return `${p.state}${p.address !== undefined ? ` at ${p.address.hostname}:${p.address.port}` : ''}${exits}, reported ${ago(p.reportedAt)}`;
}

export async function deploymentCommand(argv: string[], env: Env): Promise<number> {
  const asked = subcommandFlags(argv, SUBCOMMANDS, DEPLOYMENT_HELP, 'deployment');
  if (asked === null) return 0;
  const { sub } = asked;
  const flags = asked.flags as Flags;
  const json = flags.json === true;
  for (const variable of unknownVariables(env)) printWarning(json, unknownVariableWarning(variable));

  if (sub === 'rollback') return rollback(flags, env, json);
  if (sub === 'wait') return waitFor(requiredFlagText(flags, 'id', 'the deployment (dep_…)'), flags, env, json);
  // Every flag is checked before the first call.
  const id = sub === 'list' || sub === 'active' ? '' : requiredFlagText(flags, 'id', 'the deployment (dep_…)');
  const environment = sub === 'active' ? requiredFlagText(flags, 'environment', 'the environment, by name or id') : '';
  const limit = sub === 'list' ? wholeNumberFlag(flags.limit, 'limit', { min: 1, max: LIST_MAX, fallback: LIST_DEFAULT }) : 0;
  const states = sub === 'list' && Array.isArray(flags.state) ? flags.state : [];
  for (const state of states) if (!STATES.includes(state)) throw new UsageError(`--state must be one of ${STATES.join(', ')}, got "${state}"`);
  const followSeconds = sub === 'logs' ? followSecondsOf(flags) : null;

  const settings = apiClientSettings(flags, env);
  const call = patientCaller(settings, { json, retryMs: RETRY_MS, unanswered: 'check with slipway deployment show whether it was made' });
  const org = encodeURIComponent(settings.orgId);
  const one = deploymentPath(org, id);
  switch (sub) {
    case 'list': {
      const query = new URLSearchParams({ limit: String(limit) });
      for (const flag of ['service', 'environment'] as const) {
        const value = flagText(flags, flag, `the ${flag}, by name or id`);
        if (value !== undefined) query.set(flag, value);
      }
      for (const state of states) query.append('state', state);
      const cursor = flagText(flags, 'cursor', 'the cursor a list before said');
      if (cursor !== undefined) query.set('cursor', cursor);
      const { deployments, nextCursor } = await call<{ deployments: Deployment[]; nextCursor: string | null }>('GET', `/v1/orgs/${org}/deployments?${query}`);
      if (json) printJson({ deployments, nextCursor });
      else {
        printTable(deployments.map(oneLine), ['id', 'service', 'environment', 'revision', 'state', 'created', 'by']);
        if (nextCursor !== null) process.stderr.write(`slipway: more follow: the same command with --cursor ${nextCursor}\n`);
      }
      return 0;
    }
    case 'show': {
      const deployment = await call<Deployment>('GET', one);
      if (json) printJson(deployment);
      else printDeployment(deployment);
      return 0;
    }
    case 'active': {
      const serving = await everyItem<Deployment>(call, `/v1/orgs/${org}/environments/${encodeURIComponent(environment)}/active`, new URLSearchParams(), 'deployments');
      if (json) printJson({ environment, deployments: serving });
      else if (serving.length === 0) process.stdout.write(`${printable(`environment ${environment}: no service has succeeded there yet`)}\n`);
      else {
        printTable(serving.map((d) => ({
          service: d.service.name, revision: d.revision ?? '', deployment: d.id, since: d.finishedAt !== undefined ? ago(d.finishedAt) : '',
          process: d.process !== undefined ? processLine(d.process) : 'no runner reports it (none yet, or its runner let it go)',
        })), ['service', 'revision', 'deployment', 'since', 'process']);
      }
      return 0;
    }
    case 'changes': {
      const against = flagText(flags, 'against', 'the deployment to compare with (dep_…)');
      const changes = await call<DeploymentChangesT>('GET', `${one}/changes${against !== undefined ? `?against=${encodeURIComponent(against)}` : ''}`);
      if (json) printJson(changes);
      else printChanges(changes);
      return 0;
    }
    case 'cancel': {
      const reason = flagText(flags, 'reason', 'why it is cancelled');
      const cancelled = await call<Deployment>('POST', `${one}/cancel`, reason !== undefined ? { reason } : {});
      if (json) printJson(cancelled);
      else process.stdout.write(`deployment ${cancelled.id}: ${cancelled.state}${cancelled.reason !== undefined ? ` (${printable(cancelled.reason)})` : ''}\n`);
      return 0;
    }
    case 'logs':
      return logs(settings, one, id, { followSeconds, tail: flags.tail === undefined ? null : wholeNumberFlag(flags.tail, 'tail', { min: 1, max: LOG_TAIL_MAX, fallback: LOG_TAIL_MAX }, ' of lines') }, json, call);
  }
}

/**
 * The whole log from the start (or its last `tail` lines), then (with `followSeconds`) on until the
 * deployment ended. With --json, one JSON line per log line (seq, attempt, stream, line, at), which
 * a script reads as it comes.
 */
async function logs(settings: Parameters<typeof deploymentSession>[0], path: string, id: string, { followSeconds, tail }: { followSeconds: number | null; tail: number | null }, json: boolean,
  call: ReturnType<typeof patientCaller>): Promise<number> {
  let after = 0;
  let state = '';
  const print = (line: LogLineT) => process.stdout.write(json ? `${JSON.stringify(line)}\n` : `${printable(line.line)}\n`);
  for (let first = true; ; first = false) {
    const query = first && tail !== null ? `tail=${tail}` : `after=${after}&limit=${LOG_PAGE}`;
    const page = await call<{ lines: LogLineT[]; nextAfter: number; hasMore: boolean; state: string; removedAt?: string }>('GET', `${path}/logs?${query}`);
    for (const line of page.lines) print(line);
    after = page.nextAfter;
    state = page.state;
    if (page.removedAt !== undefined && !json) process.stderr.write(`slipway: the log of deployment ${id} was removed at ${page.removedAt}, its retention over (SLIPWAY_DEPLOYMENT_LOG_RETENTION_DAYS)\n`);
    if (!page.hasMore) break;
  }
  if (followSeconds === null || FINISHED_STATES.has(state)) return 0;
  const session = deploymentSession(settings, json);
  try {
    const format = json ? (line: LogLineT) => JSON.stringify(line) : undefined;
    let followed: Awaited<ReturnType<typeof followLog>>;
    try {
      const deployment = await readDeployment(session, id, (error, n) => { if (n === 1) session.say(`slipway: the server is unavailable, trying again for up to ${RETRY_MS / 1000} s: ${error.message}`); });
      // Followed from the state the log's pages showed: one reached since (the deployment may have
      // ended while it was read) is said, as every later one is.
      followed = await followLog(session, { ...deployment, state }, { waitMs: followSeconds * 1000, out: process.stdout, after, ...(format !== undefined ? { format } : {}) });
    } catch (error) {
      if (error instanceof ReadTimedOut) throw new Error(`the server did not answer within ${RETRY_MS / 1000} s: stopped following deployment ${id}, which goes on`);
      if (session.signalled() === null) throw error;
      followed = { state, end: 'interrupted' };
    }
    if (followed.end === 'interrupted') return interrupted(json, session.signalled() ?? 'SIGTERM', `while following deployment ${id} (${followed.state}); it goes on`, id);
    if (followed.end === 'timed-out') return failed(json, 'wait_timeout', `stopped following after ${followSeconds} s: deployment ${id} is still ${followed.state}, and goes on`, id);
    return 0;
  } finally {
    session.close();
  }
}

/** A rollback: to the deployment named, or to what served in the service's environment before what serves now. */
async function rollback(flags: Flags, env: Env, json: boolean): Promise<number> {
  const target = rollbackTarget(flags);
  const waitSeconds = waitSecondsOf(flags, 'rollback');
  const description = flagText(flags, 'description', 'a description of the rollback');
  const settings = apiClientSettings(flags, env);
  const session = deploymentSession(settings, json);
  try {
    let plan: RollbackPlan | undefined;
    const made = await session.make(async (signal, key) => {
      plan ??= 'to' in target ? { to: target.to, said: null } : await session.lookUp(() => servedBefore(session, signal, target.service, target.environment));
      return session.call<FollowedDeployment>('POST', `${deploymentPath(session.org, plan.to)}/rollback`, signal, description !== undefined ? { description } : {}, { 'idempotency-key': key });
    });
    if (typeof made === 'number') return made;
    if (plan?.said) session.say(plan.said);
    return await session.finish(made, waitSeconds);
  } finally {
    session.close();
  }
}

/** A deployment already made, followed to its end as deploy --wait follows the one it makes. */
async function waitFor(id: string, flags: Flags, env: Env, json: boolean): Promise<number> {
  const waitSeconds = waitSecondsOf({ wait: true, timeout: flags.timeout }, 'wait');
  const settings = apiClientSettings(flags, env);
  const session = deploymentSession(settings, json);
  try {
    let deployment: FollowedDeployment;
    try {
      deployment = await readDeployment(session, id);
    } catch (error) {
      if (session.signalled() !== null) return interrupted(json, session.signalled()!, `before deployment ${id} was read; it goes on`, id);
      throw error;
    }
    return await session.wait(deployment, waitSeconds!);
  } finally {
    session.close();
  }
}

/** The deployment to roll back to, and what to say of it once the rollback is made. */
interface RollbackPlan {
  to: string;
  said: string | null;
}

/**
 * What served `service` in `environment` before what serves it now: its newest superseded
 * deployment there. Refused while one of the pair is queued or in progress: what serves is about to
 * change, and a rollback worked out now would skip what comes (or roll a good one back for a
 * deployment that fails).
 */
async function servedBefore(session: ReturnType<typeof deploymentSession>, signal: AbortSignal, service: string, environment: string): Promise<RollbackPlan> {
  const list = async (...states: string[]) => (await session.call<{ deployments: FollowedDeployment[] }>('GET',
    `/v1/orgs/${session.org}/deployments?${new URLSearchParams([['service', service], ['environment', environment], ...states.map((s): [string, string] => ['state', s]), ['limit', '1']])}`, signal)).deployments[0];
  const label = (d: FollowedDeployment) => `${d.id}${d.revision !== null ? ` (${d.revision})` : ''}`;
  const coming = await list('queued', 'in_progress');
  if (coming !== undefined) {
    throw new Refused('deployment_in_flight', `${label(coming)} is ${coming.state === 'queued' ? 'queued' : 'in progress'} for ${service} in ${environment}, so what serves there is about to change: `
      + `wait for it (slipway deployment wait --id ${coming.id}) or cancel it, then roll back, or name the deployment to roll back to with --to; nothing was created`);
  }
  const current = await list('succeeded');
  const before = await list('superseded');
  if (before === undefined) {
    throw new Refused('nothing_to_roll_back', `nothing to roll back to: no deployment of ${service} in ${environment} served before ${current !== undefined ? `${label(current)}, which serves now` : 'now (none serves)'}; nothing was created`);
  }
  return { to: before.id, said: `rolling ${service} in ${environment} back${current !== undefined ? ` from ${label(current)}` : ''} to ${label(before)}` };
}
