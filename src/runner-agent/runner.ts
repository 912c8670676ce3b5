// The reference runner's loop: claim a deployment of the given environments (a long poll), start
// carrying it out, claim again; up to `concurrency` deployments at once. The processes it starts are the
// deployed services: they keep running between deployments and stop when the runner stops, or
// when the server says their deployment no longer serves (superseded, perhaps through another
// runner, or deleted with its service or environment).
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../platform/logging.js';
import { CLAIM_WAIT_DEFAULT_SECONDS, SERVING_MAX_IDS } from '../modules/runner/runner.protocol.js';
import { carryOut, PortPool } from './deployment-run.js';
import { Refused } from './http-call.js';
import { ProcessTable } from './local-process.js';
import type { ProtocolClient } from './protocol-client.js';

export interface RunnerOptions {
  client: ProtocolClient;
  /** Environment names or ids; all of the organization's when absent. */
  environments?: string[];
  /** Deployments carried out at once (of different services or environments: the server never hands out two of one pair). */
  concurrency: number;
  logger: Logger;
  waitSeconds?: number;
  /** How often to ask the server which of its processes' deployments still serve. */
  reconcileSeconds?: number;
}

export interface Runner {
  readonly processes: ProcessTable;
  /**
   * Claims and carries out deployments until stop() is called, then stops every process it started
   * and resolves. Rejects (after stopping them too) when the server refuses its first claim, since
   * no retry fixes wrong credentials, a role that is not `runner` or a misspelt environment. An
   * environment that disappears later (renamed or deleted) does not take down what runs: the
   * runner keeps its services and asks again every ENVIRONMENT_GONE_RETRY_MS.
   */
  run(): Promise<void>;
  stop(): void;
}

const ENVIRONMENT_GONE_RETRY_MS = 15_000;
export const RECONCILE_DEFAULT_SECONDS = 15;

export function createRunner(options: RunnerOptions): Runner {
  const { client, logger } = options;
  const processes = new ProcessTable();
  const ports = new PortPool();
  const stopping = new AbortController();
  const claim = {
    ...(options.environments !== undefined ? { environments: options.environments } : {}),
    waitSeconds: options.waitSeconds ?? CLAIM_WAIT_DEFAULT_SECONDS,
  };

  /** One long poll at a time: a claim goes out only when a slot is free to carry out what it brings. */
  async function claimLoop(active: Set<Promise<unknown>>): Promise<void> {
    let answered = false;
    while (!stopping.signal.aborted) {
      if (active.size >= options.concurrency) {
        await Promise.race(active);
        continue;
      }
      let claimed;
      try {
        claimed = await client.claim(claim, stopping.signal);
      } catch (error) {
        if (stopping.signal.aborted) return;
        if (!(answered && error instanceof Refused && error.code === 'environment_not_found')) throw error;
        logger.error({ status: error.status, code: error.code }, `cannot claim: ${error.detail} The services already running keep running; asking again in ${ENVIRONMENT_GONE_RETRY_MS / 1000} s.`);
        await sleep(ENVIRONMENT_GONE_RETRY_MS, undefined, { signal: stopping.signal }).catch(() => undefined);
        continue;
      }
      answered = true;
      if (claimed === null) continue;
      const { deployment, lease } = claimed;
      logger.info({ deployment: deployment.id, attempt: lease.attempt, serviceName: deployment.service.name, environmentName: deployment.environment.name }, 'claimed a deployment');
      const job = carryOut(claimed, { client, processes, ports, logger, stopping: stopping.signal })
        .catch((err: unknown) => logger.error({ err, deployment: deployment.id }, 'carrying out the deployment failed unexpectedly'))
        .finally(() => active.delete(job));
      active.add(job);
    }
  }

  /**
   * Every `reconcileSeconds`: asks which of the deployments its processes run for still serve, and
   * stops the others. A process replaced meanwhile, here, is left to whoever replaced it; an
   * unreachable server changes nothing (the question waits, like every call, until it answers).
   */
  async function reconcileLoop(): Promise<void> {
    const every = (options.reconcileSeconds ?? RECONCILE_DEFAULT_SECONDS) * 1000;
    while (!stopping.signal.aborted) {
      try {
        await sleep(every, undefined, { signal: stopping.signal });
      } catch {
        return;
      }
      const running = processes.entries().filter((e) => e.tag !== '');
      if (running.length === 0) continue;
      const serving = new Set<string>();
      try {
        const asked = [...new Set(running.map((e) => e.tag))];
        for (let i = 0; i < asked.length; i += SERVING_MAX_IDS) {
          for (const id of await client.serving(asked.slice(i, i + SERVING_MAX_IDS), stopping.signal)) serving.add(id);
        }
      } catch (error) {
        if (stopping.signal.aborted) return;
        if (error instanceof Refused && error.code === 'route_not_found') {
          logger.warn('the server does not answer which deployments still serve (it is older than this runner): processes are no longer stopped when their deployment is superseded elsewhere');
          return;
        }
        logger.warn({ err: error instanceof Refused ? { status: error.status, code: error.code } : error }, 'could not ask which deployments still serve');
        continue;
      }
      for (const { key, proc, tag } of running) {
        if (serving.has(tag)) continue;
        if (await processes.retire(key, proc)) {
          logger.info({ deployment: tag, processPid: proc.pid }, `stopped the process of deployment ${tag}: it no longer serves (superseded, or deleted with its service or environment)`);
        }
      }
    }
  }

  return {
    processes,
    async run() {
      const active = new Set<Promise<unknown>>();
      const reconciling = reconcileLoop();
      try {
        await claimLoop(active);
      } catch (error) {
        // Refused: the deployments under way are left to their leases, like on a stop.
        stopping.abort(error);
        throw error;
      } finally {
        await Promise.allSettled([...active, reconciling]);
        await processes.stopAll();
      }
    },
    stop() {
      stopping.abort(new Error('the runner is stopping'));
    },
  };
}
