// `slipway serve`: the API and the authorization server in one process, or in N worker processes
// (node:cluster) sharing one port. The primary migrates and bootstraps once before forking.
import cluster from 'node:cluster';
import net from 'node:net';
import { createSlipway, MetricsListenError, openCore } from '../app.js';
import { listenForMetrics, type MetricsListener } from '../http/metrics-listener.js';
import { clusterMetrics } from '../platform/metrics.js';
import { ConfigError, redactUrl, type Config } from '../platform/config.js';
import { createLogger, type Logger } from '../platform/logging.js';
import { unknownVariableWarning, type UnknownVariable } from '../platform/unknown-variables.js';
import { bootstrapIfEmpty } from '../modules/instance/bootstrap.js';
import type { StopSignals } from './stop-signals.js';

/** A worker's exit status when the configuration keeps it from starting (the address cannot be listened on). */
const WORKER_CANNOT_LISTEN = 2;
/**
 * Once everything is closed, how long the process may still be held up by a connection whose
 * other end never answers its close (a hung database server: the socket waits for its FIN).
 */
const CLOSED_LINGER_MS = 1_000;
/** With workers, how long past the grace period the primary waits for them before it ends them. */
const WORKERS_MARGIN_MS = 5_000;

async function runServer(config: Config, primary: boolean, signals: StopSignals, logger: Logger): Promise<void> {
  // A worker's metrics are served by the primary, beside the other workers', each labelled with its worker.
  const slipway = await createSlipway(config, { logger, bootstrap: primary, migrate: primary, metricsListener: !cluster.isWorker });
  const log = slipway.core.logger;
  if (signals.received !== null) {
    // Stopped while starting: it has served nothing, so nothing is left to finish.
    log.info({ signal: signals.received }, 'shutting down before serving');
    await slipway.close();
    log.info('stopped cleanly');
    if (cluster.isWorker) cluster.worker?.disconnect();
    return;
  }
  let address: string;
  try {
    address = await slipway.listen();
  } catch (error) {
    await slipway.close();
    throw listenError(error, config);
  }
  log.info({
    address, baseUrl: config.baseUrl, authUrl: config.authUrl,
    database: config.databaseUrl ? redactUrl(config.databaseUrl) : `sqlite:${config.dataDir}/slipway.db`,
  }, 'slipway listening');

  let stopping = false;
  const stop = (signal: string) => {
    // A second signal while shutting down (the whole process group gets SIGTERM, and the cluster's
    // primary forwards one more) must not end the process with requests still in flight.
    if (stopping) {
      log.info({ signal }, 'already shutting down');
      return;
    }
    stopping = true;
    log.info({ signal }, 'shutting down: finishing in-flight requests');
    const force = setTimeout(() => {
      log.error({ graceSeconds: config.shutdownGraceSeconds }, 'in-flight requests did not finish within SLIPWAY_SHUTDOWN_GRACE_SECONDS; exiting');
      process.exit(1);
    }, config.shutdownGraceSeconds * 1000);
    force.unref();
    slipway.close().then(() => {
      log.info('stopped cleanly');
      process.exitCode = 0;
      clearTimeout(force);
      // A worker's channel to the primary would keep it alive; letting go of it lets the process end.
      if (cluster.isWorker) cluster.worker?.disconnect();
      // Nothing is left to do; a database connection whose server hangs would still hold the process.
      setTimeout(() => {
        log.warn('a database connection has not closed (the database does not answer); exiting');
        process.exit(0);
      }, CLOSED_LINGER_MS).unref();
    }, (err: unknown) => {
      // Whatever did not close (a connection waiting for an answer that never comes) would keep the
      // process alive: it ends now.
      log.error({ err }, 'shutdown failed; exiting');
      process.exit(1);
    });
  };
  signals.handle(stop);
}

/** Why a listener could not listen, naming the settings to change. */
function listenError(error: unknown, config: Config): Error {
  const metrics = error instanceof MetricsListenError;
  const cause = metrics ? error.cause : error;
  const { host, port } = metrics ? config.metricsAddress! : config;
  const names = metrics
    ? { port: 'SLIPWAY_METRICS_ADDRESS (--metrics-address)', host: 'SLIPWAY_METRICS_ADDRESS (--metrics-address)' }
    : { port: 'SLIPWAY_PORT (--port)', host: 'SLIPWAY_HOST (--host)' };
  const code = (cause as { code?: unknown }).code;
  const where = `${host}:${port}`;
  switch (code) {
    case 'EADDRINUSE':
      return new ConfigError(`${names.port}: ${where} is in use by another process; stop it or choose another port`);
    case 'EADDRNOTAVAIL':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return new ConfigError(`${names.host}: cannot listen on "${host}" (${code}): give an address of this machine, such as 127.0.0.1 or 0.0.0.0`);
    case 'EACCES':
      return new ConfigError(`${names.port}: not allowed to listen on ${where} (ports below 1024 need privileges); choose another port`);
    default:
      return cause as Error;
  }
}

/** Listens on `where` and lets go, or throws what listening there would. */
async function probe(where: { host: string; port: number }): Promise<void> {
  if (where.port === 0) return;
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: where.host, port: where.port, exclusive: true }, () => resolve());
  });
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

/**
 * Fails now, as listen would later, when an address cannot be listened on: before the database
 * is opened, a first start's data directory, master key and bootstrap file are made for a server
 * that would then not run. (Whatever takes the port in the moment between is still caught at listen.)
 */
async function assertCanListen(config: Config): Promise<void> {
  await probe(config).catch((error: unknown) => { throw listenError(error, config); });
  if (config.metricsAddress !== null) {
    await probe(config.metricsAddress).catch((error: unknown) => { throw listenError(new MetricsListenError(error), config); });
  }
}

/**
 * `signals`: caught by the caller before this module (and the server with it) was loaded.
 * `unknownVariables`: SLIPWAY_* variables no setting reads, logged by the primary (the workers
 * parse the same environment).
 */
export async function serve(config: Config, signals: StopSignals, unknownVariables: UnknownVariable[] = []): Promise<number> {
  const logger = createLogger(config.logLevel);
  if (cluster.isPrimary) {
    for (const variable of unknownVariables) logger.warn({ variable: variable.name, closest: variable.closest }, unknownVariableWarning(variable));
    await assertCanListen(config);
  }
  if (config.workers <= 1) {
    await runServer(config, true, signals, logger);
    return 0;
  }
  if (cluster.isPrimary) {
    const core = await openCore(config, { adoptProjectId: true, logger });
    await bootstrapIfEmpty({ db: core.db, dataDir: config.dataDir, orgs: core.orgs, serviceUsers: core.serviceUsers, logger: core.logger });
    await core.close();
    if (signals.received !== null) {
      core.logger.info({ signal: signals.received }, 'shutting down before starting the workers');
      return 0;
    }
    let stopping = false;
    let startFailed = false;
    const listened = new Set<number>();
    // The workers' metrics, each labelled with its worker, on the primary's own listener.
    let metrics: MetricsListener | null = null;
    if (config.metricsAddress !== null) {
      try {
        metrics = await listenForMetrics(config.metricsAddress, clusterMetrics(), core.logger);
      } catch (error) {
        throw listenError(new MetricsListenError(error), config);
      }
      core.logger.info({ address: metrics.address }, 'metrics listening: GET /metrics (every worker\'s)');
    }
    for (let i = 0; i < config.workers; i++) cluster.fork();
    cluster.on('listening', (worker) => listened.add(worker.id));
    cluster.on('exit', (worker, code, signal) => {
      if (stopping && !listened.has(worker.id) && signal === 'SIGTERM') {
        // Stopped while it was starting, before it could catch the signal: it served nothing.
        return;
      }
      if (!stopping && !listened.has(worker.id)) {
        // A worker that ended before it listened met something every worker would (the address
        // in use, the database out of reach): starting another would only fail again. It said
        // why; stop the others and end with its status.
        startFailed = true;
        process.exitCode = code === WORKER_CANNOT_LISTEN ? WORKER_CANNOT_LISTEN : 1;
        stop();
        return;
      }
      if (!stopping) {
        core.logger.error({ workerPid: worker.process.pid, code, signal }, 'worker exited; starting another');
        cluster.fork();
      } else if (code !== 0 && !startFailed) {
        // The primary's exit status says whether every worker stopped cleanly.
        core.logger.error({ workerPid: worker.process.pid, code, signal }, 'worker did not stop cleanly');
        process.exitCode = 1;
      }
    });
    const stop = () => {
      // Once: a second signal (or a worker failing to start while stopping) sends no more.
      if (stopping) return;
      stopping = true;
      void metrics?.close();
      for (const worker of Object.values(cluster.workers ?? {})) worker?.process.kill('SIGTERM');
      core.logger.info('shutting down: stopping the workers');
      // Each worker exits within the grace period; one that has not by then (and a margin) is ended.
      setTimeout(() => {
        const left = Object.values(cluster.workers ?? {}).filter((w) => w !== undefined && w.process.exitCode === null);
        if (left.length === 0) return;
        core.logger.error({ workerPids: left.map((w) => w!.process.pid), graceSeconds: config.shutdownGraceSeconds }, 'workers did not stop within SLIPWAY_SHUTDOWN_GRACE_SECONDS; ending them');
        for (const worker of left) worker!.process.kill('SIGKILL');
        process.exitCode = 1;
      }, config.shutdownGraceSeconds * 1000 + WORKERS_MARGIN_MS).unref();
    };
    signals.handle(stop);
    return 0;
  }
  try {
    await runServer(config, false, signals, logger);
  } catch (error) {
    // A worker's channel to the primary would keep it alive after returning: say why, exit, and
    // let the primary see the kind of failure by the status.
    process.stderr.write(`slipway: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(error instanceof ConfigError ? WORKER_CANNOT_LISTEN : 1);
  }
  return 0;
}
