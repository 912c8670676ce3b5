// `slipway serve`: the API and the authorization server in one process, or in N worker processes
// (node:cluster) sharing one port. The primary migrates and bootstraps once before forking.
import cluster from 'node:cluster';
import { createSlipway, openCore } from '../app.js';
import { redactUrl, type Config } from '../platform/config.js';
import { bootstrapIfEmpty } from '../modules/instance/bootstrap.js';

const SHUTDOWN_GRACE_MS = 30_000;

async function runServer(config: Config, primary: boolean): Promise<void> {
  const slipway = await createSlipway(config, { bootstrap: primary, migrate: primary });
  const log = slipway.core.logger;
  const address = await slipway.listen();
  log.info({
    address, baseUrl: config.baseUrl, authUrl: config.authUrl,
    database: config.databaseUrl ? redactUrl(config.databaseUrl) : `sqlite:${config.dataDir}/slipway.db`,
  }, 'slipway listening');

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down: finishing in-flight requests');
    const force = setTimeout(() => {
      log.error('in-flight requests did not finish in time; exiting');
      process.exit(1);
    }, SHUTDOWN_GRACE_MS);
    force.unref();
    slipway.close().then(() => {
      log.info('stopped cleanly');
      process.exitCode = 0;
    }, (err: unknown) => {
      log.error({ err }, 'shutdown failed');
      process.exitCode = 1;
    }).finally(() => {
      clearTimeout(force);
      // A worker's channel to the primary would keep it alive; letting go of it lets the process end.
      if (cluster.isWorker) cluster.worker?.disconnect();
    });
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
}

export async function serve(config: Config): Promise<number> {
  if (config.workers <= 1) {
    await runServer(config, true);
    return 0;
  }
  if (cluster.isPrimary) {
    const core = await openCore(config);
    await bootstrapIfEmpty({ db: core.db, dataDir: config.dataDir, orgs: core.orgs, serviceUsers: core.serviceUsers, logger: core.logger });
    await core.close();
    let stopping = false;
    for (let i = 0; i < config.workers; i++) cluster.fork();
    cluster.on('exit', (worker, code, signal) => {
      if (!stopping) {
        core.logger.error({ pid: worker.process.pid, code, signal }, 'worker exited; starting another');
        cluster.fork();
      } else if (code !== 0) {
        // The primary's exit status says whether every worker stopped cleanly.
        core.logger.error({ pid: worker.process.pid, code, signal }, 'worker did not stop cleanly');
        process.exitCode = 1;
      }
    });
    const stop = () => {
      stopping = true;
      for (const worker of Object.values(cluster.workers ?? {})) worker?.process.kill('SIGTERM');
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
    return 0;
  }
  await runServer(config, false);
  return 0;
}
