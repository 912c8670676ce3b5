// One claimed deployment, carried out: start the service's command as a local process with its
// variables, secrets and PORT, send its output to the deployment's log, keep the lease alive, and
// once the new process is healthy report success and then put it in place of the previous one of
// that service and environment, where the supervisor keeps it running. A launch that fails leaves
// the previous process serving and reports the reason. When the server says the deployment is no longer ours (lease lost,
// cancelled, or a success it refuses), stop what was started for it and report nothing: the
// previous process keeps serving. So too a little before the lease may run out unheard (no renewal
// got through in time to keep it), so that another runner handed the deployment then runs it alone.
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../platform/logging.js';
import type { AdoptResponseT, ClaimResponseT, OutcomeT, RunSpecT } from '../modules/runner/runner.protocol.js';
import { Refused } from './http-call.js';
import { launch, LaunchError, type LaunchSpec, type OutputSink, type PortPool, type ProcessTable, type RunningProcess } from './local-process.js';
import { LogShipper, secretMasker } from './log-shipper.js';
import type { Claimed, ProtocolClient } from './protocol-client.js';
import { cutAt } from '../platform/text.js';
import { supervise } from './supervisor.js';

/** How many times a start goes again on another port when another process took its port first. */
const PORT_CLASH_RETRIES = 3;

/**
 * Starts `specOn(port)` on a port of the pool. A port is free when the pool picks it, and may be
 * taken before the process binds it (by another runner on the host, or anything else that binds
 * ports): when the process exits before it is healthy and its port is then held by someone else,
 * it is started again on another port (`onClash` says so), up to PORT_CLASH_RETRIES times.
 */
export async function launchOnFreePort(
  ports: PortPool, specOn: (port: number) => LaunchSpec, sink: OutputSink, signal: AbortSignal, onClash: (taken: number, next: number) => void,
): Promise<{ proc: RunningProcess; port: number; spec: LaunchSpec }> {
  let port = await ports.reserve();
  for (let clashes = 0; ; clashes++) {
    const spec = specOn(port);
    try {
      return { proc: await launch(spec, sink, signal), port, spec };
    } catch (error) {
      ports.release(port);
      const exitedEarly = error instanceof LaunchError && error.exit !== undefined;
      if (signal.aborted || !exitedEarly || clashes >= PORT_CLASH_RETRIES || !(await heldElsewhere(port))) throw error;
      const next = await ports.reserve();
      onClash(port, next);
      port = next;
    }
  }
}

/** Whether something else listens on the port now (127.0.0.1, where the runner's services answer). */
async function heldElsewhere(port: number): Promise<boolean> {
  const probe = createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      probe.once('error', reject);
      probe.listen(port, '127.0.0.1', () => resolve());
    });
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EADDRINUSE';
  } finally {
    probe.close();
  }
}

export interface RunContext {
  client: ProtocolClient;
  processes: ProcessTable;
  ports: PortPool;
  logger: Logger;
  /** Aborts when the runner stops. */
  stopping: AbortSignal;
}

/** `abandoned`: the deployment stopped being ours (or the runner stopped) before it could be completed. */
export type RunResult = OutcomeT | 'abandoned';

const REASON_MAX_CHARS = 2000;
/** How long a stopping runner tries to give back a deployment it did not finish (protocol step 3). */
const GIVE_BACK_BUDGET_MS = 5_000;

/** The ProcessTable key: one serving process per service and environment. */
export function processKey(claim: Pick<ClaimResponseT, 'deployment'>): string {
  return `${claim.deployment.service.id}/${claim.deployment.environment.id}`;
}

export async function carryOut(claim: Claimed, ctx: RunContext): Promise<RunResult> {
  const { deployment, lease, run } = claim;
  const id = deployment.id;
  const key = processKey(claim);
  const log = ctx.logger.child({ deployment: id, attempt: lease.attempt, serviceName: deployment.service.name, environmentName: deployment.environment.name });
  // Aborted with the reason once the deployment is no longer ours, or the runner stops.
  const work = new AbortController();
  const onStopping = () => work.abort(ctx.stopping.reason);
  if (ctx.stopping.aborted) onStopping();
  else ctx.stopping.addEventListener('abort', onStopping, { once: true });

  const mask = secretMasker(Object.values(run.secrets));
  const shipper = new LogShipper({
    send: async (lines) => {
      try {
        await ctx.client.appendLogs(id, { leaseToken: lease.token, lines }, work.signal);
      } catch (error) {
        // What the server will never take is lost; the rest goes on.
        if (!(error instanceof Refused) || error.mustStop) throw error;
        // A retry of a batch that the server stored, whose answer was lost: nothing was dropped.
        if (error.code === 'idempotency_response_lost') return;
        // Refused for what it holds (a line the server cannot store) or its size (over the server's
        // body limit): the shipper sends it again in parts, and only a line refused alone is lost.
        if ((error.status === 400 || error.status === 413) && lines.length > 1) return 'refused';
        log.warn({ status: error.status, code: error.code, lines: lines.length }, `log lines dropped: ${error.detail}`);
      }
    },
    onError: (error) => work.abort(error),
    mask,
  });
  const say = (line: string) => shipper.push('runner', line);
  // The process's output goes to the deployment's log until the deployment is complete, then to
  // the runner's own log (masked the same way), for as long as the process runs.
  let output: OutputSink = (stream, line) => shipper.push(stream, line);
  const sink: OutputSink = (stream, line) => output(stream, line);
  const held = keepLeaseAlive(ctx.client, claim, work);
  let started: { proc: RunningProcess; port: number; supervised: boolean } | undefined;
  /**
   * Why the deployment is given back once what was started for it has stopped: the runner stopped
   * before it could be completed, or its lease may have run out.
   */
  let givingBack: { line: string; reason: string } | undefined;

  /** Reports the outcome; answers the deployment's state as the server now has it. */
  const complete = async (outcome: OutcomeT, reason?: string): Promise<string> => {
    // The last log lines go while the lease is still renewed and watched: one that runs out
    // meanwhile stops the deployment here.
    output = serviceOutputLog(log, mask);
    await shipper.close();
    // The heartbeat stops before the completion goes, so that no refusal of it can cross the
    // completion. Once sent, the completion's answer decides, however late it comes: the server may
    // have taken it with its answer lost, and a process stopped then would leave a deployment
    // succeeded with nothing serving it (and what served before stopped as superseded). A refusal
    // stops it as ever.
    await held.finish();
    work.signal.throwIfAborted();
    const body = { leaseToken: lease.token, outcome, ...(reason !== undefined ? { reason: cutAt(mask(reason), REASON_MAX_CHARS) } : {}) };
    const done = await ctx.client.complete(id, body, work.signal);
    log.info({ outcome, state: done.state, ...(reason !== undefined ? { reason: body.reason } : {}) }, `deployment ${outcome}`);
    return done.state;
  };

  try {
    say(`claimed attempt ${lease.attempt}: ${deployment.service.name} into ${deployment.environment.name}${deployment.revision !== null ? ` at ${deployment.revision}` : ''}`);
    if (run.command === undefined) {
      await complete('failed', `This runner starts commands, and the spec has none${run.image !== undefined ? ` (only the image ${run.image})` : ''}: give the service a command.`);
      return 'failed';
    }
    const command = run.command;
    let spec: LaunchSpec;
    try {
      const launched = await launchOnFreePort(ctx.ports, (port) => {
        say(`starting ${command[0]} with PORT=${port}${run.healthCheck ? `; health check GET ${run.healthCheck.path} within ${run.healthCheck.timeoutSeconds} s` : ''}${run.minReadySeconds !== undefined ? `; then it must keep running ${run.minReadySeconds} s` : ''}`);
        return launchSpec(run, command, port);
      }, sink, work.signal, (taken) => say(`port ${taken} was taken by another process before the service could bind it; starting it again on another port`));
      started = { proc: launched.proc, port: launched.port, supervised: false };
      spec = launched.spec;
    } catch (error) {
      if (work.signal.aborted) throw error;
      // Anything else that went wrong starting it fails the deployment too, with its logs, rather
      // than leave it in progress until the lease runs out. Only the error's name or code is
      // said: a message can quote what the process was given.
      const reason = error instanceof LaunchError ? error.reason : unexpectedStartFailure(error, log);
      say(`failed: ${reason}; the previous process, if any, keeps serving`);
      await complete('failed', `The new process did not come up: ${reason}. What served before, if anything, keeps serving.`);
      return 'failed';
    }
    const { proc, port } = started;
    // The server hears of the success before anything happens to the process that serves now: if
    // it refuses (the deployment was cancelled, the lease lost), the new process is stopped and
    // the previous one keeps serving.
    const previous = ctx.processes.current(key);
    say(`healthy: pid ${proc.pid} on port ${port}${previous !== undefined ? `; the previous process (pid ${previous.pid}) stops once the server has taken the result` : ''}`);
    const state = await complete('succeeded');
    // A retried completion whose first answer was lost can come back after a later deployment of
    // this service and environment succeeded (this one superseded meanwhile, or already replaced
    // here by a newer one: ids are in creation order). Then the newer one stays, and this one goes.
    const newer = ctx.processes.entries().find((e) => e.key === key && e.tag > id);
    if (state !== 'succeeded' || newer !== undefined) {
      log.warn({ state, ...(newer !== undefined ? { newer: newer.tag } : {}) }, 'the deployment no longer serves: a later one took its place; its process is stopped');
      return 'succeeded';
    }
    const replaced = await putInPlace({ key, spec, sink, mask, first: proc, tag: id }, claim, ctx);
    started.supervised = true;
    if (replaced !== undefined) log.info({ processPid: replaced.pid }, 'stopped the previous process');
    return 'succeeded';
  } catch (error) {
    const why = work.signal.aborted ? work.signal.reason : error;
    if (why instanceof Refused) {
      const level = why.mustStop ? 'warn' : 'error';
      log[level]({ status: why.status, code: why.code }, `stopped working on the deployment: ${why.detail}`);
    } else if (why instanceof LeaseLapsed) {
      log.warn({ leaseSeconds: why.leaseSeconds }, `stopped working on the deployment: ${why.message}`);
      givingBack = {
        line: `the runner stops attempt ${lease.attempt}: no renewal of its lease (${why.leaseSeconds} s) got through in time to keep it, and the deployment may soon be another runner's; what it started is stopped, and the deployment is given back`,
        reason: 'no renewal of its lease got through in time to keep it',
      };
    } else if (ctx.stopping.aborted) {
      givingBack = {
        line: `the runner is stopping: attempt ${lease.attempt} ends here, and the deployment is given back (queued again for its next attempt, unless this was its last)`,
        reason: 'the runner stopped before the deployment finished',
      };
    } else {
      log.error({ err: error }, 'could not carry out the deployment');
    }
    return 'abandoned';
  } finally {
    ctx.stopping.removeEventListener('abort', onStopping);
    await held.stop();
    work.abort();
    // What was started for a deployment that did not go through must not keep running.
    if (started !== undefined && !started.supervised) {
      await started.proc.stop();
      ctx.ports.release(started.port);
    }
    if (givingBack !== undefined) await giveBack(claim, ctx.client, log, givingBack);
  }
}

/**
 * A deployment this runner did not finish (it is stopping, or its lease may have run out) goes back
 * to the queue now, for another runner (or this one), rather than once its lease runs out: its log
 * says why (`line`), and so does its `reason`. Tried for a few seconds; failing that, the lease's
 * expiry does it. A lease that did run out is refused: the log keeps nothing of it then.
 */
async function giveBack(claim: ClaimResponseT, client: ProtocolClient, log: Logger, why: { line: string; reason: string }): Promise<void> {
  const { deployment: { id }, lease } = claim;
  const budget = AbortSignal.timeout(GIVE_BACK_BUDGET_MS);
  try {
    await client.appendLogs(id, { leaseToken: lease.token, lines: [{ stream: 'runner', line: why.line }] }, budget);
    const back = await client.abandon(id, { leaseToken: lease.token, reason: why.reason }, budget);
    log.info({ state: back.state }, back.state === 'queued' ? 'gave the deployment back: it is queued for another runner' : `gave the deployment back: it is ${back.state} now`);
  } catch (error) {
    if (error instanceof Refused && error.mustStop) {
      log.info({ status: error.status, code: error.code }, 'the deployment was no longer this runner\'s to give back');
      return;
    }
    const why = error instanceof Refused ? { status: error.status, code: error.code } : { name: (error as Error).name };
    log.warn({ err: why }, 'left the deployment without giving it back: it goes back to the queue when its lease runs out');
  }
}

function launchSpec(run: RunSpecT, command: string[], port: number): LaunchSpec {
  return {
    command, env: { ...run.variables, ...run.secrets }, port,
    ...(run.healthCheck !== undefined ? { healthCheck: run.healthCheck } : {}),
    ...(run.minReadySeconds !== undefined ? { minReadySeconds: run.minReadySeconds } : {}),
  };
}

/** Puts a healthy process in place for its service and environment, under the supervisor; answers the process it replaced. */
async function putInPlace(s: Parameters<typeof supervise>[0], of: Pick<ClaimResponseT, 'deployment'>, ctx: RunContext): Promise<RunningProcess | undefined> {
  const serviceLog = ctx.logger.child({ serviceName: of.deployment.service.name, environmentName: of.deployment.environment.name });
  const replaced = await ctx.processes.replace(s.key, s.first, s.tag);
  supervise(s, { processes: ctx.processes, ports: ctx.ports, log: serviceLog, stopping: ctx.stopping })
    .catch((err: unknown) => serviceLog.error({ code: (err as { code?: unknown }).code, name: (err as Error).name }, 'supervising the service failed; it is no longer restarted'));
  return replaced;
}

/**
 * Starts again a serving deployment adopted from a runner that went away (protocol step 5): as
 * after its claim, but with no lease, no deployment log and no state to report. Its output goes to
 * the runner's own log. Nothing is started when this runner already runs it or a later deployment
 * of its service and environment. True when it runs here now.
 */
export async function resume(adopted: AdoptResponseT['adopted'][number], ctx: RunContext): Promise<boolean> {
  const { deployment, run } = adopted;
  const id = deployment.id;
  const key = processKey(adopted);
  const log = ctx.logger.child({ deployment: id, serviceName: deployment.service.name, environmentName: deployment.environment.name });
  const here = () => ctx.processes.entries().some((e) => e.key === key && e.tag >= id);
  if (here()) return false;
  if (run.command === undefined) {
    log.error('cannot start an adopted deployment without a command');
    return false;
  }
  const mask = secretMasker(Object.values(run.secrets));
  const sink = serviceOutputLog(log, mask);
  const command = run.command;
  let proc: RunningProcess;
  let port: number;
  let spec: LaunchSpec;
  try {
    ({ proc, port, spec } = await launchOnFreePort(ctx.ports, (p) => launchSpec(run, command, p), sink, ctx.stopping,
      (taken) => log.warn({ port: taken }, 'the port was taken by another process before the service could bind it; starting it again on another port')));
  } catch (error) {
    if (!ctx.stopping.aborted) {
      const reason = error instanceof LaunchError ? error.reason : unexpectedStartFailure(error, log);
      log.error(mask(`the adopted deployment did not come up: ${reason}; another runner, or this one, tries again once it is an orphan again`));
    }
    return false;
  }
  // A deployment of this service and environment may have been put in place while it started.
  if (here() || ctx.stopping.aborted) {
    await proc.stop();
    ctx.ports.release(port);
    return false;
  }
  await putInPlace({ key, spec, sink, mask, first: proc, tag: id }, adopted, ctx);
  log.info({ processPid: proc.pid, port }, 'adopted: the deployment\'s process runs here now');
  return true;
}

/** Lines of a service's output the runner logs in one second at most, once its deployment is complete. */
export const OUTPUT_LINES_PER_SECOND = 100;

/**
 * Where a serving process's output goes once its deployment is complete: the runner's own log,
 * masked, at most OUTPUT_LINES_PER_SECOND lines a second. A chatty service must not drown the
 * runner's log: what is over the limit is counted, and the count logged when the next second opens
 * (by the next line, or a second after the first line left out, should the output stop there).
 */
export function serviceOutputLog(log: Logger, mask: (line: string) => string, now: () => number = Date.now): OutputSink {
  let second = -1;
  let logged = 0;
  let dropped = 0;
  const flush = () => {
    if (dropped > 0) log.warn({ dropped }, `${dropped} line${dropped === 1 ? '' : 's'} of output not logged: more than ${OUTPUT_LINES_PER_SECOND} a second`);
    dropped = 0;
  };
  return (stream, line) => {
    const current = Math.floor(now() / 1000);
    if (current !== second) {
      flush();
      second = current;
      logged = 0;
    }
    if (logged >= OUTPUT_LINES_PER_SECOND) {
      if (dropped++ === 0) setTimeout(flush, 1000).unref();
      return;
    }
    logged++;
    log.info({ stream }, mask(line));
  };
}

/** What to say of an error starting a process that launch() did not foresee: its code or name only. */
function unexpectedStartFailure(error: unknown, log: Logger): string {
  const code = (error as { code?: unknown }).code;
  const name = (error as Error | undefined)?.name ?? typeof error;
  log.error({ code, name }, 'starting the process failed unexpectedly');
  return `the runner could not start it (${typeof code === 'string' ? code : name})`;
}

/** Why `work` aborts when the lease may have run out without this runner hearing of it. */
class LeaseLapsed extends Error {
  override readonly name = 'LeaseLapsed';

  constructor(readonly leaseSeconds: number) {
    super(`no renewal of its lease got through in time to keep it (a lease of ${leaseSeconds} s): the server may give the deployment to another runner in a moment, so what was started for it is stopped, and the previous process, if any, keeps serving`);
  }
}

/**
 * How long before the moment its lease may run out the runner stops working on a deployment: what
 * it started takes a few seconds to stop, and the nodes' clocks agree only to within a little.
 */
export function fenceMarginMs(leaseMs: number): number {
  return Math.min(Math.max(1_000, leaseMs / 10), leaseMs / 4);
}

/**
 * Renews the lease every `heartbeatSeconds`, and watches it by this runner's own clock: a little
 * before the moment the server's answers vouch for has passed (`heldUntil`, see runner.protocol.ts),
 * after which the server may hand the deployment to another runner, `work` aborts with LeaseLapsed.
 * A refusal aborts `work` with it. `finish` ends both before a completion is sent, and aborts `work`
 * too should the lease have lapsed unnoticed (a process frozen, its timers late); `stop` only ends them.
 */
function keepLeaseAlive(client: ProtocolClient, claim: Claimed, work: AbortController): { finish(): Promise<void>; stop(): Promise<void> } {
  const { deployment: { id }, lease } = claim;
  const stopped = new AbortController();
  const signal = AbortSignal.any([work.signal, stopped.signal]);
  let heldUntil = claim.heldUntil;
  let durationMs = lease.durationSeconds * 1000;
  let every = lease.heartbeatSeconds * 1000;
  const fenceAt = () => heldUntil - fenceMarginMs(durationMs);
  const renew = (async () => {
    while (!signal.aborted) {
      try {
        // Due a heartbeat interval after the renewal (or the claim) that the lease counts from.
        await sleep(Math.max(0, heldUntil - durationMs + every - performance.now()), undefined, { signal });
        const renewed = await client.heartbeat(id, lease.token, signal, every);
        heldUntil = Math.max(heldUntil, renewed.heldUntil);
        durationMs = renewed.lease.durationSeconds * 1000;
        every = renewed.lease.heartbeatSeconds * 1000;
      } catch (error) {
        if (!signal.aborted) work.abort(error);
        return;
      }
    }
  })();
  const watcher = (async () => {
    for (let left = fenceAt() - performance.now(); left > 0; left = fenceAt() - performance.now()) {
      try {
        await sleep(left, undefined, { signal });
      } catch {
        return;
      }
    }
    if (!signal.aborted) work.abort(new LeaseLapsed(durationMs / 1000));
  })();
  const stop = async () => {
    stopped.abort();
    await Promise.all([renew, watcher]);
  };
  return {
    async finish() {
      await stop();
      if (!work.signal.aborted && performance.now() >= fenceAt()) work.abort(new LeaseLapsed(durationMs / 1000));
    },
    stop,
  };
}
