// The reference runner's loop: claim a deployment of the given environments (a long poll), start
// carrying it out, claim again; up to `concurrency` deployments at once. The processes it starts are the
// deployed services: they keep running between deployments and stop when the runner stops, or
// when the server says their deployment no longer serves (superseded, perhaps through another
// runner, or deleted with its service or environment). Under an id of its own (`host`), it reports
// what it runs, lets it go when it stops, and adopts what a runner that went away ran.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../platform/logging.js';
import { VERSION } from '../platform/version.js';
import { ADOPT_MAX, CLAIM_WAIT_DEFAULT_SECONDS, SERVING_MAX_IDS, type ServingRequestT } from '../modules/runner/runner.protocol.js';
import { carryOut, resume } from './deployment-run.js';
import { Refused } from './http-call.js';
import { PortPool, ProcessTable } from './local-process.js';
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
  /** After a claim the server refused (once it had answered one), the pause before the next (tests shorten it). */
  refusedRetryMs?: number;
}

export interface Runner {
  readonly processes: ProcessTable;
  /** The id this runner process goes by (protocol step 5): random, new at each start. */
  readonly host: string;
  /**
   * Claims and carries out deployments until stop() is called, then stops every process it started
   * and resolves. Rejects (after stopping them too) when the server refuses its first claim, since
   * no retry fixes wrong credentials, a role that is not `runner` or a misspelt environment. A
   * refusal later does not take down what runs: an environment renamed or deleted (asked again
   * every ENVIRONMENT_GONE_RETRY_MS), or the runner's own credentials refused (a client secret
   * rotated, the service user disabled or its role changed: asked again every REFUSED_RETRY_MS).
   * Its services keep running, as when the server cannot be reached.
   */
  run(): Promise<void>;
  stop(): void;
}

const ENVIRONMENT_GONE_RETRY_MS = 15_000;
const REFUSED_RETRY_MS = 30_000;
/** This machine's name as the server takes it in a process's address; null (not reported) when it is not one. */
const HOSTNAME = ((name) => (/^[A-Za-z0-9._-]{1,253}$/.test(name) ? name : null))(hostname());
export const RECONCILE_DEFAULT_SECONDS = 15;
/** How long a stopping runner tries to tell the server that it let its deployments go. */
const RELEASE_BUDGET_MS = 5_000;

/**
 * A 400 to a request carrying something the adopt answer said the server takes: during a rolling
 * upgrade, a node older than that one refused the field. The request then goes again with less.
 */
function refusedByOlderNode(error: unknown): error is Refused {
  return error instanceof Refused && error.status === 400;
}

export function createRunner(options: RunnerOptions): Runner {
  const { client, logger } = options;
  const processes = new ProcessTable();
  const ports = new PortPool();
  const stopping = new AbortController();
  const host = `rh_${randomBytes(12).toString('base64url')}`;
  const environments = options.environments !== undefined ? { environments: options.environments } : {};
  const claim = { ...environments, waitSeconds: options.waitSeconds ?? CLAIM_WAIT_DEFAULT_SECONDS };
  const context = { client, processes, ports, logger, stopping: stopping.signal };
  /** Whether the server knows hosts (protocol step 5); an older one refuses `host`, so it is not sent. */
  let hosting = true;
  /** The server takes `stopping` in a release (its adopt answer said so): it then lists this runner offline at once. */
  let stopNotice = false;
  /** Whether the server takes `processes` in serving reports (its adopt answer says so). */
  let reportingProcesses = false;
  /** Whether it takes where each process answers in them, too. */
  let reportingAddresses = false;
  /** What this runner says of itself in claims and adoptions, to a server that takes it (the runners list shows it). */
  let details: { hostname?: string; version?: string } = {};
  let asking = true;
  const configuredEveryMs = (options.reconcileSeconds ?? RECONCILE_DEFAULT_SECONDS) * 1000;
  let reportEveryMs = configuredEveryMs;
  /** Adopted deployments being started, by id: reported as this runner's while they start. */
  const resuming = new Map<string, Promise<void>>();

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
        claimed = await client.claim(hosting ? { ...claim, host, ...details } : claim, stopping.signal);
      } catch (error) {
        if (stopping.signal.aborted) return;
        if (olderNodeRefusedDetails(error)) continue;
        if (!(answered && error instanceof Refused)) throw error;
        const pauseMs = error.code === 'environment_not_found' ? ENVIRONMENT_GONE_RETRY_MS : (options.refusedRetryMs ?? REFUSED_RETRY_MS);
        logger.error({ status: error.status, code: error.code }, `cannot claim: ${error.detail} The services already running keep running; asking again in ${pauseMs / 1000} s.`);
        await sleep(pauseMs, undefined, { signal: stopping.signal }).catch(() => undefined);
        continue;
      }
      answered = true;
      if (claimed === null) continue;
      const { deployment, lease } = claimed;
      logger.info({ deployment: deployment.id, attempt: lease.attempt, serviceName: deployment.service.name, environmentName: deployment.environment.name }, 'claimed a deployment');
      const job = carryOut(claimed, context)
        .catch((err: unknown) => logger.error({ err, deployment: deployment.id }, 'carrying out the deployment failed unexpectedly'))
        .finally(() => active.delete(job));
      active.add(job);
    }
  }

  /**
   * What a question of the reconcile round that failed means: nothing while the runner stops;
   * `never` from a server too old to know the question (said once: it is not asked again); else
   * a failure said in the log, and the question asked again next round.
   */
  function unanswered(error: unknown, olderServer: string, failed: string): 'never' | 'later' {
    if (stopping.signal.aborted) return 'later';
    if (error instanceof Refused && error.code === 'route_not_found') {
      logger.warn(olderServer);
      return 'never';
    }
    logger.warn({ err: error instanceof Refused ? { status: error.status, code: error.code } : error }, failed);
    return 'later';
  }

  /**
   * During a rolling upgrade the node that answers may be older than the one whose adopt answer
   * this runner went by, and refuse what the runner says of itself (400): it is said no more, until
   * an adopt answer says again that the server takes it.
   */
  function olderNodeRefusedDetails(error: unknown): boolean {
    if (Object.keys(details).length === 0 || !refusedByOlderNode(error)) return false;
    details = {};
    logger.warn({ err: { status: error.status, code: error.code } }, 'the server refused this runner\'s host name and version (a node older than this runner, during an upgrade?): asking again without them');
    return true;
  }

  /**
   * Adopts what a runner that went away ran (a runner that stopped, this one before it started
   * again) and starts it here, in the background: a start that takes long holds up no report. An
   * old server, which knows no hosts, is asked no more, and no `host` is sent to it.
   */
  async function adoptOrphans(): Promise<void> {
    if (!hosting) return;
    let answer;
    try {
      // As many as the server hands out at once (not its default of 10): what a runner that
      // stopped ran is started again at once, and more than that over the next rounds.
      answer = await client.adopt({ host, limit: ADOPT_MAX, ...environments, ...details }, stopping.signal).catch((error: unknown) => {
        if (!olderNodeRefusedDetails(error)) throw error;
        return client.adopt({ host, limit: ADOPT_MAX, ...environments }, stopping.signal);
      });
    } catch (error) {
      const older = 'the server does not hand out the deployments of runners that went away (it is older than this runner): they are not started again here';
      if (unanswered(error, older, 'could not ask for the deployments of runners that went away') === 'never') hosting = false;
      return;
    }
    reportingProcesses = answer.acceptsProcessReports === true;
    reportingAddresses = reportingProcesses && answer.acceptsProcessAddresses === true;
    stopNotice = answer.acceptsStopNotice === true;
    details = answer.acceptsRunnerDetails === true ? { ...(HOSTNAME !== null ? { hostname: HOSTNAME } : {}), version: `slipway-runner/${VERSION}` } : {};
    // Reports must come well within the server's host timeout, whatever this runner was told.
    reportEveryMs = Math.max(1000, Math.min(configuredEveryMs, (answer.hostTimeoutSeconds * 1000) / 3));
    for (const one of answer.adopted) {
      const id = one.deployment.id;
      if (resuming.has(id)) continue;
      const job = resume(one, context)
        .then(() => undefined, (err: unknown) => logger.error({ deployment: id, code: (err as { code?: unknown }).code, name: (err as Error).name }, 'starting an adopted deployment failed unexpectedly'))
        .finally(() => resuming.delete(id));
      resuming.set(id, job);
    }
  }

  /**
   * Every round (`reconcileSeconds`, at most a third of the server's host timeout): asks which of
   * the deployments its processes run for still serve and are still its own, stops the others, and
   * adopts orphans (the first adoption is run() at start). A process replaced meanwhile, here, is
   * left to whoever replaced it; an unreachable server changes nothing (the question waits, like
   * every call, until it answers).
   */
  async function reconcileLoop(): Promise<void> {
    while (!stopping.signal.aborted) {
      try {
        await sleep(reportEveryMs, undefined, { signal: stopping.signal });
      } catch {
        return;
      }
      await stopWhatNoLongerServes();
      await adoptOrphans();
    }
  }

  /** The deployments this runner runs or is starting: their processes in place, and adoptions starting. */
  const deploymentsHere = (starting: Iterable<string> = resuming.keys()) =>
    [...new Set([...processes.entries().map((e) => e.tag).filter((tag) => tag !== ''), ...starting])];

  /** The report on `ids`: with `host` once hosting, and how their processes are doing to a server that takes it. */
  function servingReport(ids: string[], running: ReturnType<ProcessTable['entries']>): ServingRequestT {
    if (!hosting) return { deployments: ids };
    if (!reportingProcesses) return { deployments: ids, host };
    const asked = new Set(ids);
    const processes = running.filter((e) => asked.has(e.tag)).map(({ tag, health, proc }) => ({
      deployment: tag, state: health.state, exits: health.exits, ...(health.lastExit !== null ? { lastExit: health.lastExit } : {}),
      ...(reportingAddresses && HOSTNAME !== null ? { address: { hostname: HOSTNAME, port: proc.port } } : {}),
    }));
    return { deployments: ids, host, processes };
  }

  /**
   * Sends the report on `ids`. During a rolling upgrade the node that answers may be older than the
   * one whose adopt answer this runner went by, and refuse a field (400): the report then goes
   * again with less, first without the processes' addresses, then without the processes, as the
   * report of what still runs here must not be lost (without it, the server takes this runner for
   * gone and hands its deployments to another one).
   */
  async function askServing(ids: string[], running: ReturnType<ProcessTable['entries']>): Promise<string[]> {
    let report = servingReport(ids, running);
    for (;;) {
      try {
        return await client.serving(report, stopping.signal);
      } catch (error) {
        if (report.processes === undefined || !refusedByOlderNode(error)) throw error;
        const addressed = report.processes.some((p) => p.address !== undefined);
        logger.warn({ err: { status: error.status, code: error.code } }, addressed
          ? 'the server refused where the processes answer (a node older than this runner, during an upgrade?): reporting them without it'
          : 'the server refused how the processes are doing (a node older than this runner, during an upgrade?): reported what runs here without it');
        report = addressed
          ? { ...report, processes: report.processes.map(({ address: _address, ...rest }) => rest) }
          : { deployments: ids, host };
      }
    }
  }

  async function stopWhatNoLongerServes(): Promise<void> {
    const running = processes.entries().filter((e) => e.tag !== '');
    const asked = deploymentsHere();
    if (!asking || asked.length === 0) return;
    const serving = new Set<string>();
    try {
      for (let i = 0; i < asked.length; i += SERVING_MAX_IDS) {
        const chunk = asked.slice(i, i + SERVING_MAX_IDS);
        for (const id of await askServing(chunk, running)) serving.add(id);
      }
    } catch (error) {
      const older = 'the server does not answer which deployments still serve (it is older than this runner): processes are no longer stopped when their deployment is superseded elsewhere';
      if (unanswered(error, older, 'could not ask which deployments still serve') === 'never') asking = false;
      return;
    }
    for (const { key, proc, tag } of running) {
      if (serving.has(tag)) continue;
      if (await processes.retire(key, proc)) {
        logger.info({ deployment: tag, processPid: proc.pid }, `stopped the process of deployment ${tag}: it no longer serves here (superseded, deleted with its service or environment, or adopted by another runner)`);
      }
    }
  }

  /**
   * After its processes stopped: says that it let their deployments go, so that another runner
   * (or this one, started again) adopts them at once rather than after the host timeout, and (to
   * a server that takes it) that it stops, so that it is listed offline at once. Tried for a few
   * seconds; failing that, the timeout does both.
   */
  async function release(ids: string[]): Promise<void> {
    if (ids.length === 0 && !stopNotice) return;
    const budget = AbortSignal.timeout(RELEASE_BUDGET_MS);
    try {
      // The last batch says it stops (the only one, with nothing to let go).
      for (let i = 0; i === 0 || i < ids.length; i += SERVING_MAX_IDS) {
        const batch = ids.slice(i, i + SERVING_MAX_IDS);
        const stopping = stopNotice && i + SERVING_MAX_IDS >= ids.length;
        try {
          await client.release({ host, deployments: batch, ...(stopping ? { stopping: true } : {}) }, budget);
        } catch (error) {
          // A node older than the one that said it takes the notice (during an upgrade) refuses the
          // field: the deployments are let go all the same, and the notice goes unsaid.
          if (!stopping || !refusedByOlderNode(error)) throw error;
          logger.warn({ err: { status: error.status, code: error.code } }, 'the server refused the notice that this runner stops (a node older than this runner, during an upgrade?): it is listed offline once the host timeout has passed');
          if (batch.length > 0) await client.release({ host, deployments: batch }, budget);
        }
      }
      if (ids.length > 0) logger.info({ deployments: ids.length }, 'let go of the deployments whose processes it stopped: another runner may take them over');
    } catch (error) {
      logger.warn({ err: error instanceof Refused ? { status: error.status, code: error.code } : { name: (error as Error).name } }, ids.length > 0 ? 'could not tell the server that it let its deployments go; another runner takes them over after the host timeout' : 'could not tell the server that it stops; it is listed offline once the host timeout has passed');
    }
  }

  return {
    processes,
    host,
    async run() {
      const active = new Set<Promise<unknown>>();
      // First, what runners that went away left (this one, before it started again): and whether
      // the server knows hosts at all, which the claims need to know.
      await adoptOrphans();
      const reconciling = reconcileLoop();
      try {
        await claimLoop(active);
      } catch (error) {
        // Refused: the deployments under way are left to their leases, like on a stop.
        stopping.abort(error);
        throw error;
      } finally {
        // Adoptions cut short by the stop are not in place, and this runner's all the same.
        const adopted = [...resuming.keys()];
        await Promise.allSettled([...active, reconciling, ...resuming.values()]);
        const ran = deploymentsHere(adopted);
        await processes.stopAll();
        if (hosting) await release(ran);
      }
    },
    stop() {
      stopping.abort(new Error('the runner is stopping'));
    },
  };
}
