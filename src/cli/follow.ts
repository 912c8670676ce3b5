// Making a deployment through the API and following it, as `slipway deploy` and `slipway deployment
// rollback` do: the create goes under an Idempotency-Key, tried again while the server is
// unavailable, and a signal stops the waiting, not the deployment. Following reads the log page
// after page until the deployment ended (`slipway deployment logs --follow` too), with a word on why
// it may wait when it stays queued, and then answers its final state as an exit status.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { LogLineT } from '../modules/deployments/deployments.schemas.js';
import { AppError } from '../platform/errors.js';
import { untilAvailable } from '../runner-agent/http-call.js';
import { createTokenSource } from '../runner-agent/token-source.js';
import { apiCaller, within, type ApiClientSettings } from './api-client.js';
import { UsageError, wholeNumberFlag } from './args.js';
import { ago, failed, printable, printJson } from './output.js';

/** One call to the API as the service user (apiCaller's). */
export type ApiCall = <T>(method: string, path: string, signal: AbortSignal, body?: unknown, headers?: Record<string, string>) => Promise<T>;

export interface FollowedDeployment {
  id: string;
  state: string;
  revision: string | null;
  service: { name: string };
  environment: { id?: string; name: string };
  reason?: string;
  rollbackOf?: string;
  promotedFrom?: string;
}

interface LogPage {
  lines: LogLineT[];
  nextAfter: number;
  hasMore: boolean;
  state: string;
}

/** What a follower needs of the command that follows. */
export interface Follower {
  call: ApiCall;
  /** The organization, as it goes into a path. */
  org: string;
  /** Aborted by a signal: the following stops, not the deployment. */
  stop: AbortSignal;
  /** A line for the person watching (stderr, printable), unless the command prints JSON. */
  say: (line: string) => void;
}

/** Waiting, by default and at most. */
export const WAIT_DEFAULT_SECONDS = 900;
const WAIT_MAX_SECONDS = 86_400;

/** Seconds to wait for the deployment's end (`--wait`, `--timeout S`), or null: do not wait. `command` returns once it is queued without them. */
export function waitSecondsOf(flags: { wait?: unknown; timeout?: unknown }, command: string): number | null {
  const wait = flags.wait === true;
  if (typeof flags.timeout !== 'string') return wait ? WAIT_DEFAULT_SECONDS : null;
  if (!wait) throw new UsageError(`--timeout needs --wait: without it, ${command} returns once the deployment is queued`);
  return wholeNumberFlag(flags.timeout, 'timeout', { min: 1, max: WAIT_MAX_SECONDS, fallback: WAIT_DEFAULT_SECONDS }, ' of seconds');
}

/**
 * What a command refuses to do by its own rules, with a code for --json (`nothing_to_roll_back`),
 * before it asked the server for anything.
 */
export class Refused extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
  }
}

export const FINISHED_STATES = new Set(['succeeded', 'failed', 'cancelled', 'superseded']);

/** How long a create, or a read, is tried again while the server is unavailable. */
const RETRY_MS = 60_000;
/** Between two looks at a deployment that is still queued or running. */
const FOLLOW_PAUSE_MS = 1_000;
/** A deployment still queued this long (or half the wait, when shorter) gets a word on why it may be. */
const QUEUED_HINT_MS = 20_000;
/** How long the runners list is asked for, to say why a deployment waits. */
const RUNNERS_HINT_MS = 5_000;
const LOG_PAGE = 1_000;

export const deploymentPath = (org: string, id: string) => `/v1/orgs/${org}/deployments/${encodeURIComponent(id)}`;

/** "deployment dep_…: hello into staging at v1, a rollback to dep_…, queued". */
export function deploymentLine(d: FollowedDeployment): string {
  return `deployment ${d.id}: ${d.service.name} into ${d.environment.name}${d.revision !== null ? ` at ${d.revision}` : ''}`
    + `${d.rollbackOf !== undefined ? `, a rollback to ${d.rollbackOf}` : ''}${d.promotedFrom !== undefined ? `, promoted from ${d.promotedFrom}` : ''}, ${d.state}`;
}

/**
 * Follows the deployment's log from line `after` (0: the start), each line to `out` (`format`: its
 * text, printable by default), until it ended and every line was read, `waitMs` ran out, or `stop`
 * aborted. A deployment still queued after a while gets a line on why it may be (is a runner for
 * its environment up?).
 */
export async function followLog(f: Follower, deployment: FollowedDeployment, options: { waitMs: number; out: NodeJS.WritableStream; after?: number; format?: (line: LogLineT) => string }): Promise<{ state: string; end: 'finished' | 'timed-out' | 'interrupted'; hint?: string }> {
  const format = options.format ?? ((line: LogLineT) => printable(line.line));
  const waiting = within(f.stop, options.waitMs);
  const path = deploymentPath(f.org, deployment.id);
  let after = options.after ?? 0;
  let state = deployment.state;
  // Nothing says whether a runner serves that environment: a deployment no runner takes waits
  // silently, so a wait that sees it queued for a while says what to check, once.
  const waitStarted = Date.now();
  const hintAfterMs = Math.min(QUEUED_HINT_MS, options.waitMs / 2);
  let hinted = false;
  try {
    for (;;) {
      // The state is read before the lines: a page that shows the end has every line before it.
      const page = await untilAvailable(() => f.call<LogPage>('GET', `${path}/logs?after=${after}&limit=${LOG_PAGE}`, waiting.signal), {
        signal: waiting.signal,
        onRetry: (error, n) => { if (n === 1) f.say(`slipway: the server is unavailable, still waiting: ${error.message}`); },
      });
      for (const line of page.lines) options.out.write(`${format(line)}\n`);
      after = page.nextAfter;
      // A new state is said once the lines before it are out, not in the middle of them.
      if (page.hasMore) continue;
      if (page.state !== state) f.say(`deployment ${deployment.id}: ${state = page.state}`);
      if (FINISHED_STATES.has(page.state)) return { state, end: 'finished' };
      if (page.state === 'queued' && !hinted && Date.now() - waitStarted >= hintAfterMs) {
        hinted = true;
        f.say(`deployment ${deployment.id} is still queued: ${await queuedHint(f, deployment)}`);
      }
      await sleep(FOLLOW_PAUSE_MS, undefined, { signal: waiting.signal });
    }
  } catch (error) {
    if (f.stop.aborted) return { state, end: 'interrupted' };
    if (!waiting.timedOut()) throw error;
    return { state, end: 'timed-out', ...(state === 'queued' ? { hint: await queuedHint(f, deployment) } : {}) };
  } finally {
    waiting.clear();
  }
}

/**
 * Follows a deployment to its end, its log on stderr, for up to `waitSeconds`; then reads it once
 * more and answers the exit status: 0 when it succeeded (or was superseded since), 1 otherwise,
 * 130 or 143 when a signal stopped the waiting (the deployment goes on). With `json`, the
 * deployment as it ended goes to stdout.
 */
/** A read of a deployment that the server did not answer within RETRY_MS (its message as before: "timed out"). */
export class ReadTimedOut extends Error {}

/**
 * Deployment `id` as it is now, asked again while the server is unavailable, for up to RETRY_MS or
 * until `f.stop`; `onRetry` hears of each retry.
 */
export async function readDeployment(f: Pick<Follower, 'call' | 'org' | 'stop'>, id: string, onRetry?: (error: Error, n: number) => void): Promise<FollowedDeployment> {
  const reading = within(f.stop, RETRY_MS);
  try {
    return await untilAvailable(() => f.call<FollowedDeployment>('GET', deploymentPath(f.org, id), reading.signal), { signal: reading.signal, ...(onRetry !== undefined ? { onRetry } : {}) });
  } catch (error) {
    if (reading.timedOut()) throw new ReadTimedOut((error as Error).message, { cause: error });
    throw error;
  } finally {
    reading.clear();
  }
}

export async function waitForEnd(f: Follower, deployment: FollowedDeployment, waitSeconds: number, json: boolean, signalled: () => NodeJS.Signals | null): Promise<number> {
  const followed = await followLog(f, deployment, { waitMs: waitSeconds * 1000, out: process.stderr });
  if (followed.end === 'interrupted') return interrupted(json, signalled() ?? 'SIGTERM', `while deployment ${deployment.id} is ${followed.state}; it goes on`, deployment.id);
  if (followed.end === 'timed-out') {
    return failed(json, 'wait_timeout', `gave up waiting after ${waitSeconds} s: deployment ${deployment.id} is still ${followed.state}, and goes on${followed.hint !== undefined ? `; ${followed.hint}` : ''}`, deployment.id);
  }
  let final: FollowedDeployment;
  try {
    final = await readDeployment(f, deployment.id);
  } catch (error) {
    if (f.stop.aborted) return interrupted(json, signalled() ?? 'SIGTERM', `after deployment ${deployment.id} ended ${followed.state}`, deployment.id);
    throw error;
  }
  if (json) printJson(final);
  if (final.state === 'succeeded' || final.state === 'superseded') {
    // Said, as a failure is: the log's last line is the runner's, which need not say how it ended.
    if (!json) process.stderr.write(`slipway: deployment ${final.id} succeeded${final.state === 'superseded' ? ', and a later one has replaced it since' : ''}\n`);
    return 0;
  }
  return failed(json, `deployment_${final.state}`, `deployment ${final.id} ${final.state}${final.reason ? `: ${final.reason}` : ''}`, final.id);
}

/** Why a deployment may still be queued, from what the runners list says of its environment's runners. */
async function queuedHint(f: Follower, deployment: FollowedDeployment): Promise<string> {
  const env = deployment.environment.name;
  const because = (runners: string) => `no runner has claimed it yet: ${runners} (a deployment also waits while another of ${deployment.service.name} there is in progress)`;
  const asking = within(f.stop, RUNNERS_HINT_MS);
  try {
    const { runners } = await f.call<{ runners: Array<{ state: string; lastSeenAt: string; inProgress: string[] }> }>('GET',
      `/v1/orgs/${f.org}/runners?environment=${encodeURIComponent(deployment.environment.id ?? env)}&limit=200`, asking.signal);
    const online = runners.filter((r) => r.state === 'online');
    if (online.length > 0) {
      const busy = online.reduce((n, r) => n + r.inProgress.length, 0);
      return because(`${online.length} runner${online.length === 1 ? '' : 's'} for ${env} ${online.length === 1 ? 'is' : 'are'} online, carrying out ${busy} deployment${busy === 1 ? '' : 's'} now (slipway runners --environment ${env})`);
    }
    const last = runners.map((r) => r.lastSeenAt).sort().at(-1);
    return because(`no runner for ${env} is online (${last === undefined ? 'none was ever seen' : `the last was seen ${ago(last)}`}): start one with slipway runner --environment ${env}`);
  } catch {
    return because(`is a runner for ${env} running?`);
  } finally {
    asking.clear();
  }
}

/** A signal stopped the command (`what`: when, and what goes on); 130 or 143. */
export function interrupted(json: boolean, signal: NodeJS.Signals, what: string, deployment?: string): number {
  failed(json, 'interrupted', `interrupted (${signal}) ${what}`, deployment);
  return signal === 'SIGINT' ? 130 : 143;
}

/**
 * A command that makes a deployment and may follow it: its calls as the service user, and signals
 * (SIGINT, SIGTERM) that stop its waiting, not the deployment. `close` puts the signals back.
 */
export function deploymentSession(settings: ApiClientSettings, json: boolean) {
  const stop = new AbortController();
  let signalled: NodeJS.Signals | null = null;
  // Whether the change was sent: a look-up before it creates nothing.
  let sent = false;
  let lookingUp = false;
  const call: ApiCall = apiCaller(settings, createTokenSource(settings.credentials, { who: `${settings.credentials.clientId}'s`, signal: stop.signal }), () => { if (!lookingUp) sent = true; });
  const org = encodeURIComponent(settings.orgId);
  // What the server holds (a revision, a reason) shown, not sent to the terminal.
  const say = (line: string) => { if (!json) process.stderr.write(`${printable(line)}\n`); };
  const onSignal = (signal: NodeJS.Signals) => { signalled ??= signal; stop.abort(new Error(`interrupted (${signal})`)); };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const follower: Follower = { call, org, stop: stop.signal, say };

  return {
    ...follower,

    /** Reads made before the change is asked for: a signal meanwhile says that nothing was created. */
    async lookUp<T>(read: () => Promise<T>): Promise<T> {
      lookingUp = true;
      try {
        return await read();
      } finally {
        lookingUp = false;
      }
    },

    /**
     * Asks for the deployment under one Idempotency-Key (`ask` sends it), again while the server is
     * unavailable, for up to a minute: a retry after a lost answer never makes a second one. One made
     * whose answer was lost for good is read by the id the server names. A number is the exit status
     * of a command interrupted meanwhile.
     */
    async make(ask: (signal: AbortSignal, key: string) => Promise<FollowedDeployment>): Promise<FollowedDeployment | number> {
      const created = within(stop.signal, RETRY_MS);
      const key = randomUUID();
      let lastTrouble = '';
      try {
        return await untilAvailable(() => ask(created.signal, key), {
          signal: created.signal,
          onRetry: (error, n) => {
            lastTrouble = error.message;
            if (n === 1) say(`slipway: the server is unavailable, trying again for up to ${RETRY_MS / 1000} s: ${error.message}`);
          },
        });
      } catch (error) {
        if (signalled !== null) return interrupted(json, signalled, sent ? 'before the server answered; the deployment may have been created' : 'before the deployment was asked for; nothing was created');
        if (error instanceof Refused) return failed(json, error.code, error.message);
        if (created.timedOut() && !sent) throw new Error(`the server did not answer within ${RETRY_MS / 1000} s (${lastTrouble || 'no answer in time'}); the deployment was not asked for: nothing was created`);
        if (created.timedOut()) {
          throw new Error(lastTrouble.includes(' 409')
            ? `the server was still creating the deployment after ${RETRY_MS / 1000} s (its first try holds the Idempotency-Key); GET /v1/orgs/{orgId}/deployments lists it once made`
            : `the server did not take the deployment within ${RETRY_MS / 1000} s (${lastTrouble}); it was not created, or, if its answer was lost, GET /v1/orgs/{orgId}/deployments lists it`);
        }
        // Made, but its answer lost for good (the server went down between the two): what it made is named.
        const made = error instanceof AppError && error.code === 'idempotency_response_lost'
          ? (error.extras as { changed?: Array<{ type: string; id: string }> }).changed?.find((c) => c.type === 'deployment') : undefined;
        if (made === undefined) throw error;
        return await readDeployment(follower, made.id);
      } finally {
        created.clear();
      }
    },

    /**
     * Says what was made and prints its id on stdout at once (a wait that times out or is
     * interrupted leaves it there too, for a script to follow or cancel); then, with `waitSeconds`,
     * follows it to its end (waitForEnd). With `json`, stdout holds the deployment as it ended
     * instead.
     */
    async finish(deployment: FollowedDeployment, waitSeconds: number | null): Promise<number> {
      say(deploymentLine(deployment));
      if (!json) process.stdout.write(`${deployment.id}\n`);
      if (waitSeconds === null) {
        if (json) printJson(deployment);
        return 0;
      }
      return waitForEnd(follower, deployment, waitSeconds, json, () => signalled);
    },

    /** Follows a deployment made before to its end (waitForEnd): `slipway deployment wait`. */
    wait: (deployment: FollowedDeployment, waitSeconds: number): Promise<number> => waitForEnd(follower, deployment, waitSeconds, json, () => signalled),

    /** The signal that stopped it, if one did. */
    signalled: () => signalled,

    close(): void {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}
