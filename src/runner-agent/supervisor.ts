// Keeps a deployed service running once its deployment has succeeded, as a process manager would:
// a process that exits on its own is started again with the same command, variables, secrets and
// port (what callers and the health check know it by), after a pause that doubles with each exit
// in a row, from one second up to a minute, and starts over once a process has stayed up for a
// minute. It ends when the process is no longer the one serving its service and environment (a
// later deployment replaced it, or the runner stopped): then its port is free again.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../platform/logging.js';
import { launch, LaunchError, type LaunchSpec, type OutputSink, type PortPool, type ProcessTable, type RunningProcess } from './local-process.js';

export interface RestartPolicy {
  firstDelayMs: number;
  maxDelayMs: number;
  /** A process that stayed up this long before it exited is restarted after the first delay again. */
  stableAfterMs: number;
}

export const RESTART_POLICY: RestartPolicy = { firstDelayMs: 1_000, maxDelayMs: 60_000, stableAfterMs: 60_000 };

export interface Supervised {
  /** The ProcessTable key of its service and environment. */
  key: string;
  spec: LaunchSpec;
  /** Where the output of the processes started here goes. */
  sink: OutputSink;
  /** Hides secret values in what is logged of a failed restart. */
  mask: (text: string) => string;
  /** The process the deployment put in place. */
  first: RunningProcess;
  /** Its ProcessTable tag (the deployment), which the processes started again keep. */
  tag: string;
}

export interface SupervisorContext {
  processes: ProcessTable;
  ports: PortPool;
  /** The service's logger: its lines name the service and environment. */
  log: Logger;
  /** Aborts when the runner stops. */
  stopping: AbortSignal;
  policy?: RestartPolicy;
}

/** Delay before restart number `n` (0 for the first) of a process that keeps exiting. */
export function restartDelayMs(n: number, policy: RestartPolicy = RESTART_POLICY): number {
  return Math.min(policy.maxDelayMs, policy.firstDelayMs * 2 ** Math.min(n, 16));
}

/** Watches `s.first` and its successors until they stop serving; resolves then. Never rejects. */
export async function supervise(s: Supervised, ctx: SupervisorContext): Promise<void> {
  const policy = ctx.policy ?? RESTART_POLICY;
  const serving = (proc: RunningProcess) => !ctx.stopping.aborted && ctx.processes.current(s.key) === proc;
  let proc = s.first;
  let upSince = Date.now();
  let exitsInARow = 0;
  try {
    for (;;) {
      const status = await proc.exited;
      if (!serving(proc)) return;
      ctx.processes.exitedOnItsOwn(s.key, proc, status);
      // The leader is gone; what it started may not be (a worker holding the port): stop the group
      // first, so that the new process finds the port free and is the one that answers it.
      await proc.stop();
      if (Date.now() - upSince >= policy.stableAfterMs) exitsInARow = 0;
      let delay = restartDelayMs(exitsInARow++, policy);
      const how = status.signal !== null ? `was killed by ${status.signal}` : `exited with code ${status.code}`;
      ctx.log.warn({ processPid: proc.pid, ...status, restartInMs: delay }, `the service ${how}, not by this runner; starting it again on port ${s.spec.port} in ${delay / 1000} s`);
      let next: RunningProcess | undefined;
      while (next === undefined) {
        try {
          await sleep(delay, undefined, { signal: ctx.stopping });
        } catch {
          return;
        }
        if (!serving(proc)) return;
        try {
          next = await launch(s.spec, s.sink, ctx.stopping);
        } catch (error) {
          if (ctx.stopping.aborted) return;
          // A crash loop whose processes die before their health check still counts up.
          if (error instanceof LaunchError && error.exit !== undefined) ctx.processes.exitedOnItsOwn(s.key, proc, error.exit);
          delay = restartDelayMs(exitsInARow++, policy);
          // Only the error's name or code: a message can quote what the process was given.
          const reason = error instanceof LaunchError ? error.reason : `could not start it (${(error as { code?: string }).code ?? (error as Error).name})`;
          ctx.log.error({ restartInMs: delay }, s.mask(`the service did not come back: ${reason}; trying again in ${delay / 1000} s`));
        }
      }
      if (!serving(proc)) {
        // A deployment took its place meanwhile, or the runner is stopping: this one is not needed.
        await next.stop();
        return;
      }
      await ctx.processes.replace(s.key, next, s.tag);
      ctx.log.info({ processPid: next.pid, port: s.spec.port }, 'the service is running again');
      proc = next;
      upSince = Date.now();
    }
  } finally {
    ctx.ports.release(s.spec.port);
  }
}
