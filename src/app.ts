// The composition root: configuration in, a running Slipway out. It wires the platform (database,
// keys, logger), the domain services and the HTTP server, and nothing else.
import cluster from 'node:cluster';
import fs from 'node:fs';
import path from 'node:path';
import { sql } from 'kysely';
import type { DestinationStream } from 'pino';
import { registerConsole } from './http/console.js';
import { listenForMetrics, type MetricsListener } from './http/metrics-listener.js';
import { buildServer } from './http/server.js';
import { createRateLimiter } from './http/rate-limit.js';
import type { App } from './http/app-types.js';
import { ConfigError, redactUrl, routePrefix, type Config } from './platform/config.js';
import { KEY_FILE, MissingKeyFileError, openKeyring, type MasterKeyring } from './platform/crypto/master-key.js';
import { refuseUnheldMasterKeys } from './modules/keys/held-keys.js';
import { keysRepo } from './modules/keys/keys.repo.js';
import { cannotConnect, openDatabase, sqliteFile, type Database } from './platform/db/database.js';
import { migrateToLatest, schemaState } from './platform/db/migrations/index.js';
import { startClockSync, syncClock } from './platform/db/database-clock.js';
import { createLogger, type Logger } from './platform/logging.js';
import { createMetrics } from './platform/metrics.js';
import { oauthRoutes } from './modules/auth/oauth.routes.js';
import { createPrincipalDirectory } from './modules/auth/principal-directory.js';
import { createRevocationList } from './modules/auth/revocations.js';
import { fullScope } from './modules/auth/scopes.js';
import { createSigningKeys } from './modules/auth/signing-keys.js';
import { tokenRoutes } from './modules/auth/token.routes.js';
import { createTokenService } from './modules/auth/token.service.js';
import { createTokenVerifier } from './modules/auth/token-verifier.js';
import { createDeploymentSignals } from './modules/deployments/deployment-signals.js';
import { deploymentsRoutes } from './modules/deployments/deployments.routes.js';
import { createSecretUsage, secretUsageRoutes } from './modules/deployments/secret-usage.js';
import { createDeploymentChanges, deploymentChangesRoutes } from './modules/deployments/deployment-changes.js';
import { createDeploymentsService } from './modules/deployments/deployments.service.js';
import { environmentsRoutes } from './modules/environments/environments.routes.js';
import { createEnvironmentsService } from './modules/environments/environments.service.js';
import { eventsRoutes } from './modules/events/events.routes.js';
import { eventLogHold } from './modules/events/events.repo.js';
import { createEventsService } from './modules/events/events.service.js';
import { bootstrapIfEmpty } from './modules/instance/bootstrap.js';
import { registerIdempotency } from './modules/idempotency/idempotency.hooks.js';
import { createIdempotencyService, IDEMPOTENCY_SEAL_KEY } from './modules/idempotency/idempotency.service.js';
import { loadInstanceIdentity, loadInstanceKey } from './modules/instance/instance.service.js';
import { orgsRoutes } from './modules/orgs/orgs.routes.js';
import { runnerRoutes } from './modules/runner/runner.routes.js';
import { createRunnerService } from './modules/runner/runner.service.js';
import { VERSION } from './platform/version.js';
import { runnersRoutes } from './modules/runner/runners.routes.js';
import { createRunnersService, onlineWithinSeconds } from './modules/runner/runners.service.js';
import { servicesRoutes } from './modules/services/services.routes.js';
import { createServicesService } from './modules/services/services.service.js';
import { createOrgsService } from './modules/orgs/orgs.service.js';
import { createDataKeys } from './modules/secrets/data-keys.js';
import { secretsRoutes } from './modules/secrets/secrets.routes.js';
import { createSecretsService } from './modules/secrets/secrets.service.js';
import { serviceUsersRoutes } from './modules/service-users/service-users.routes.js';
import { createWebhookDispatcher } from './modules/webhooks/webhook-dispatcher.js';
import { webhooksRoutes } from './modules/webhooks/webhooks.routes.js';
import { createWebhooksService } from './modules/webhooks/webhooks.service.js';
import { createServiceUsersService } from './modules/service-users/service-users.service.js';


/**
 * How long a server waits for PostgreSQL to answer one statement before it takes the connection
 * for lost (every statement of a request takes milliseconds), and for a readiness probe's answer.
 */
const STATEMENT_DEADLINE_MS = 15_000;
const READY_WITHIN_MS = 5_000;
/**
 * At shutdown, once no request is in flight: how long a background statement (a delivery round, a
 * lease sweep) may wait for PostgreSQL's answer before its connection is ended, so that a database
 * gone silent does not hold the exit past SLIPWAY_SHUTDOWN_GRACE_SECONDS (1 s at the least).
 */
const BACKGROUND_STATEMENTS_AT_SHUTDOWN_MS = 500;

/** The first housekeeping run after start, and the pause between runs (pruning, purging). */
const HOUSEKEEPING_FIRST_MS = 30_000;
const HOUSEKEEPING_EVERY_MS = 600_000;

export interface CoreOptions {
  logStream?: DestinationStream;
  logger?: Logger;
  /**
   * Run migrations before anything else (the CLI's `serve` and `migrate` do; workers do not need
   * to). `'require'`: run none, and refuse a database whose schema is missing or behind (the CLI's
   * other commands: a mistyped database URL must not get Slipway's schema from `org list`).
   */
  migrate?: boolean | 'require';
  /**
   * A configured SLIPWAY_PROJECT_ID replaces the stored one (`serve` and `migrate`); any other
   * command uses the stored one and warns that the variable is ignored.
   */
  adoptProjectId?: boolean;
  /** SQLite: checkpoint in a worker thread, off the event loop (servers do; short CLI commands need not). */
  backgroundCheckpoints?: boolean;
}

/** The database a configuration names, for messages: its file, or its URL without a password. */
const databaseNamed = (config: Config) => sqliteFile(config.databaseUrl, config.dataDir) ?? redactUrl(config.databaseUrl!);

/** A database a newer Slipway migrated: this version must not run on it, nor migrate it. */
function newerSchema(where: string, unknown: string[]): ConfigError {
  return new ConfigError(`the database ${where} was migrated by a newer Slipway (it has ${unknown.length} migration(s) this version does not know: ${unknown.join(', ')}): run that version or a later one, or restore a backup taken before the upgrade; nothing was written`);
}

/** Refuses, writing nothing, a database that `slipway migrate` has not brought to this build's schema. */
async function requireCurrentSchema(database: Database, config: Config): Promise<void> {
  const state = await schemaState(database);
  const where = databaseNamed(config);
  if (state.kind === 'absent') {
    throw new ConfigError(`the database ${where} holds no Slipway schema: check --database-url (SLIPWAY_DATABASE_URL) and --data-dir (SLIPWAY_DATA_DIR), or set it up with slipway migrate (slipway serve does too); nothing was written`);
  }
  if (state.kind === 'ahead') throw newerSchema(where, state.unknown);
  if (state.kind === 'behind') {
    throw new ConfigError(`the database ${where} has Slipway's schema up to ${state.at}, and this version needs ${state.pending.length} more migration(s) (${state.pending.join(', ')}): run slipway migrate (slipway serve does too) first; nothing was written`);
  }
}

/**
 * The database, brought to (or checked against) this build's schema, the master keyring and the
 * signing keys: what the `keys` commands work with, which must open on a database whose instance
 * keys are wrapped under a master key not given (a backup restored without its key), to say so.
 * Nothing is unwrapped here.
 */
export async function openKeyStore(config: Config, options: CoreOptions = {}) {
  const logger = options.logger ?? createLogger(config.logLevel, options.logStream);
  const database: Database = openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    sqliteSynchronous: config.sqliteSynchronous,
    ...(options.backgroundCheckpoints ? {
      onBackgroundCheckpointError: (message: string | null) => {
        if (message === null) logger.info('SQLite background checkpoints work again');
        else logger.warn({ error: message }, 'SQLite background checkpoint failed; retrying every 250 ms, said again once it works or fails otherwise');
      },
    } : {}),
  });
  try {
    // PostgreSQL is first asked here: out of reach, or refusing the credentials, it is said so.
    if (database.dialect === 'postgres') await sql`select 1`.execute(database.db).catch((error: unknown) => { throw cannotConnect(config.databaseUrl!, error); });
    // Nodes compare what they write by the database's clock, not each their own (platform/clock.ts).
    await syncClock(database, logger);
    // The migrations this opening applied (for `slipway migrate` to say so).
    let migrationsApplied: string[] = [];
    if (options.migrate === 'require') await requireCurrentSchema(database, config);
    else if (options.migrate !== false) {
      const state = await schemaState(database);
      if (state.kind === 'ahead') throw newerSchema(databaseNamed(config), state.unknown);
      migrationsApplied = (await migrateToLatest(database)).applied;
      if (migrationsApplied.length > 0) logger.info({ migrations: migrationsApplied }, 'brought the database schema up to date');
    }
    // The database first: a missing key file is replaced by a new key only when nothing is wrapped yet.
    const keyFileMissing = config.masterKey === null && !fs.existsSync(path.join(config.dataDir, KEY_FILE));
    const wrappedKeyIds = keyFileMissing ? [...new Set((await keysRepo.usage(database.db)).map((u) => u.masterKeyId))] : [];
    let ring: MasterKeyring;
    try {
      ring = openKeyring({
        envKey: config.masterKey,
        envPrevious: config.masterKeyPrevious,
        dataDir: config.dataDir,
        wrappedKeyIds,
        onGenerated: (file) => logger.warn({ file }, 'generated a master key file; back it up, or set SLIPWAY_MASTER_KEY (losing it loses every secret)'),
        onRefused: (r) => logger.error({ file: r.file, held: r.held, inFile: r.inFile }, 'the master key file holds none of the keys in use and retires none of them: unwrapping with the keys held, and wrapping nothing new until the file holds one of them (restore the right file, or add the key held to it as a line after the first)'),
        onChanged: (keys) => logger.info({ masterKeyId: keys.current, accepted: keys.accepted }, 'master keyring reloaded'),
        // Once per start: the workers of serve --workers N open the file the primary warned of.
        ...(cluster.isWorker ? {} : { onLooseMode: (warning: string, file: string) => logger.warn({ file }, warning) }),
      });
    } catch (error) {
      if (error instanceof MissingKeyFileError) throw new ConfigError(error.message);
      throw error;
    }
    const keys = createSigningKeys({ db: database.db, ring, tokenTtlSeconds: config.tokenTtlSeconds });
    return { config, logger, database, db: database.db, ring, keys, migrationsApplied, close: () => database.close() };
  } catch (error) {
    await database.close();
    throw error;
  }
}

/** Everything but HTTP: what the CLI needs to act on the same database as the server. */
export async function openCore(config: Config, options: CoreOptions = {}) {
  const { logger, database, ring, keys, migrationsApplied } = await openKeyStore(config, options);
  try {
    const { db } = database;
    // Rows wrapped under a master key the configuration lacks: refused, in one line naming it. The
    // `keys` commands open anyway (openKeyStore): `status` shows which keys rows are under, and
    // `rotate-master` checks against the keys it rotates with, one from --new-key-file included.
    await refuseUnheldMasterKeys(db, ring);
    const identity = await loadInstanceIdentity(db, ring, config.projectId, {
      adopt: options.adoptProjectId === true,
      onIgnored: (stored, configured) => logger.warn({ stored, configured }, 'SLIPWAY_PROJECT_ID differs from the instance\'s project id and is ignored: only slipway serve and slipway migrate change it'),
    });
    const issuer = config.authUrl;
    const tokenUrl = `${issuer}/oauth/v2/token`;
    const scope = fullScope(config.idpName, identity.projectId);

    await keys.ensureActiveKey();
    const principals = createPrincipalDirectory({ db });
    const revocations = createRevocationList({ db });
    // A deleted organization's service users: forgotten by this node's caches at once (the others', within 5 s);
    // its data keys too, unwrapped ones included, and its claims' wake-up counter.
    const orgs = createOrgsService({
      db,
      runnersOnlineWithinSeconds: onlineWithinSeconds(config.runnerHostTimeoutSeconds),
      onDeleted: (orgId, { serviceUserIds, dataKeyIds }) => {
        for (const id of serviceUserIds) { principals.forget(id); tokens.forgetClient(id); }
        dataKeys.forgetOrganization(orgId, dataKeyIds);
        signals.forget(orgId);
      },
    });
    const external = config.externalIssuer === null ? undefined : { issuer: config.externalIssuer, jwksUrl: config.externalJwksUrl, orgs };
    const verifier = createTokenVerifier({ keys, principals, revocations, issuer, idpName: config.idpName, projectId: identity.projectId, external });
    const tokens = createTokenService({ db, pepper: identity.pepper, keys, revocations, verifier, issuer, idpName: config.idpName, projectId: identity.projectId, ttlSeconds: config.tokenTtlSeconds, writesElsewhere: () => database.writesElsewhere() });

    const serviceUsers = createServiceUsersService({ db, pepper: identity.pepper, tokenUrl, scope, baseUrl: config.baseUrl, onChanged: (id) => { principals.forget(id); tokens.forgetClient(id); } });
    const dataKeys = createDataKeys({ ring });
    database.onWritesLost(() => dataKeys.forgetCurrent());
    const secrets = createSecretsService({ db, dataKeys, dialect: database.dialect, limits: config.limits, retentionDays: config.secretRetentionDays });
    const events = createEventsService({ db, dialect: database.dialect });
    const signals = createDeploymentSignals({ db, dialect: database.dialect, databaseUrl: config.databaseUrl, logger });
    const environments = createEnvironmentsService({ db, dialect: database.dialect, secrets, limits: config.limits });
    const services = createServicesService({ db, dialect: database.dialect, secrets, limits: config.limits });
    const deployments = createDeploymentsService({ db, dialect: database.dialect, secrets, signals, limits: config.limits });
    const secretUsage = createSecretUsage({ db, dialect: database.dialect, secrets });
    const deploymentChanges = createDeploymentChanges({ db });
    const runners = createRunnersService({ db, dialect: database.dialect, hostTimeoutSeconds: config.runnerHostTimeoutSeconds, logger });
    const runner = createRunnerService({
      db, dialect: database.dialect, secrets, signals, leaseSeconds: config.runnerLeaseSeconds, maxAttempts: config.deploymentMaxAttempts, hostTimeoutSeconds: config.runnerHostTimeoutSeconds,
      runners,
    });
    const webhooks = createWebhooksService({ db, dialect: database.dialect, dataKeys, allowPrivate: config.webhookAllowPrivate, maxPerOrg: config.limits.webhooksPerOrg });
    if (options.migrate === true || options.migrate === undefined) {
      const renumbered = await events.renumberRestored((trx) => webhooks.followRenumberedEvents(trx));
      if (renumbered > 0) logger.warn({ events: renumbered }, 'events carried transaction ids of another PostgreSQL cluster (a restore?): renumbered to come first, in id order');
    }
    const idempotency = createIdempotencyService({ db, sealKey: await loadInstanceKey(db, ring, IDEMPOTENCY_SEAL_KEY) });

    return {
      config, logger, ring, database, db, identity, issuer, tokenUrl, scope, migrationsApplied,
      keys, principals, revocations, verifier, tokens,
      orgs, serviceUsers, dataKeys, secrets, events, idempotency,
      environments, services, deployments, secretUsage, deploymentChanges, runner, runners, signals, webhooks,
      close: async () => {
        await signals.close();
        await database.close();
      },
    };
  } catch (error) {
    await database.close();
    throw error;
  }
}

export type Core = Awaited<ReturnType<typeof openCore>>;

/** The metrics listener (SLIPWAY_METRICS_ADDRESS) could not listen; `cause` says why. */
export class MetricsListenError extends Error {
  constructor(cause: unknown) {
    super(`cannot listen for metrics: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

export interface SlipwayOptions extends CoreOptions {
  onUndeclaredStatus?: (route: string, status: number) => void;
  /**
   * Serve GET /metrics on SLIPWAY_METRICS_ADDRESS (when set). The workers of `serve --workers N`
   * do not: the primary serves theirs, each labelled with its worker.
   */
  metricsListener?: boolean;
  /** Create the default organization on an empty database (true for `serve`). */
  bootstrap?: boolean;
}

export interface Slipway {
  core: Core;
  server: App;
  bootstrapFile: string | null;
  /** Where GET /metrics is served (`host:port`), once listening, or null. */
  readonly metricsAddress: string | null;
  listen(): Promise<string>;
  close(): Promise<void>;
}

export async function createSlipway(config: Config, options: SlipwayOptions = {}): Promise<Slipway> {
  const core = await openCore(config, { backgroundCheckpoints: true, adoptProjectId: true, ...options });
  // Migrated: from now on a statement that PostgreSQL leaves unanswered fails the request (503).
  core.database.setStatementDeadline(STATEMENT_DEADLINE_MS);
  const bootstrapFile = options.bootstrap === false ? null
    : await bootstrapIfEmpty({ db: core.db, dataDir: config.dataDir, orgs: core.orgs, serviceUsers: core.serviceUsers, logger: core.logger });

  const metrics = config.metricsAddress === null ? null : createMetrics({ version: VERSION });
  const eventLogHeldSince = eventLogHold(core.db, core.database.dialect);
  metrics?.readPendingDeployments(async () => {
    const [pending, heldSince] = await Promise.all([core.deployments.pending(), eventLogHeldSince()]);
    return { ...pending, eventLogHeldSince: heldSince };
  });

  /** Whether the log has said that the SQLite file is gone (once). */
  let fileGoneSaid = false;
  const server = await buildServer({
    logger: core.logger,
    ...(metrics === null ? {} : { metrics }),
    bodyLimit: config.limits.bodyBytes,
    trustProxy: config.trustProxy,
    verifier: core.verifier,
    orgs: core.orgs,
    apiLimiter: createRateLimiter({ name: 'api', limit: config.rateLimits.apiPerMinute, windowSeconds: 60 }),
    maxEventLoopDelayMs: config.maxEventLoopDelayMs,
    openapi: { baseUrl: config.baseUrl, tokenUrl: core.tokenUrl, scope: core.scope, version: VERSION },
    ready: async () => {
      if (!core.database.fileInPlace()) {
        if (!fileGoneSaid) core.logger.error({ file: core.database.file }, 'the SQLite database file is no longer the one this server has open (deleted or replaced): what it writes now is lost when it stops; not ready until it is restarted on the right file');
        fileGoneSaid = true;
        return 'The database file is no longer in place; this server is not ready until it is restarted.';
      }
      // A probe gets its answer within seconds whatever the database does: silence is not ready.
      let timer: NodeJS.Timeout | undefined;
      const silence = new Promise<false>((resolve) => { timer = setTimeout(() => resolve(false), READY_WITHIN_MS); });
      const answer = core.db.selectFrom('instance_settings').select('key').limit(1).execute().then(() => true, () => false);
      try {
        return await Promise.race([answer, silence]);
      } finally {
        clearTimeout(timer);
      }
    },
    ...(options.onUndeclaredStatus ? { onUndeclaredStatus: options.onUndeclaredStatus } : {}),
  }, async (app) => {
    // Before any route, so that every POST of the API declared below gets its hooks.
    registerIdempotency(app, { idempotency: core.idempotency });
    // One hourly budget per client, whether it revokes through RFC 7009's endpoint or DELETE /v1/token.
    const revocationsPerClient = createRateLimiter({ name: 'token-revocations', limit: config.rateLimits.revokePerHour, windowSeconds: 3600 });
    await app.register(async (scope) => {
      oauthRoutes(scope, {
        tokens: core.tokens, keys: core.keys, issuer: core.issuer, baseUrl: config.baseUrl, idpName: config.idpName, projectId: core.identity.projectId,
        limits: {
          perClient: createRateLimiter({ name: 'token-client', limit: config.rateLimits.tokenPerMinute, windowSeconds: 60 }),
          failuresPerAddress: createRateLimiter({ name: 'token-failures', limit: config.rateLimits.tokenPerMinute, windowSeconds: 60 }),
          revocationsPerClient,
        },
      }, routePrefix(config.authUrl));
    });
    // The API under the base URL's path, as the OAuth endpoints are under the auth URL's: every URL
    // handed out (bootstrap.json's baseUrl, Location) is then one the server answers.
    await app.register(async (api) => {
      orgsRoutes(api, { orgs: core.orgs });
      tokenRoutes(api, { tokens: core.tokens, revocationsPerClient });
      serviceUsersRoutes(api, { serviceUsers: core.serviceUsers });
      secretsRoutes(api, { secrets: core.secrets, limits: config.limits });
      eventsRoutes(api, { events: core.events });
      environmentsRoutes(api, { environments: core.environments, limits: config.limits });
      servicesRoutes(api, { services: core.services, limits: config.limits });
      deploymentsRoutes(api, { deployments: core.deployments, limits: config.limits });
      secretUsageRoutes(api, { usage: core.secretUsage });
      deploymentChangesRoutes(api, { changes: core.deploymentChanges });
      runnerRoutes(api, { runner: core.runner, runners: core.runners, issuer: core.issuer });
      runnersRoutes(api, { runners: core.runners });
      webhooksRoutes(api, { webhooks: core.webhooks });
    }, { prefix: routePrefix(config.baseUrl) });
    registerConsole(app, { baseUrl: config.baseUrl, tokenUrl: core.tokenUrl, scope: core.scope }, routePrefix(config.baseUrl));
    // Waiting claims answer 204 at once instead of holding the shutdown for their whole wait.
    app.addHook('preClose', async () => { await core.signals.close(); });
  });

  // Housekeeping: soon after start (a node that restarts often still gets to it), then every few
  // minutes, so a deleted secret's ciphertext is destroyed within minutes of its retention's end.
  const housekeeping = () => {
    core.revocations.prune().catch((err: unknown) => core.logger.warn({ err }, 'pruning revoked tokens failed'));
    core.idempotency.prune().catch((err: unknown) => core.logger.warn({ err }, 'pruning expired idempotency keys failed'));
    core.secrets.purgeExpired().catch((err: unknown) => core.logger.warn({ err }, 'purging deleted secrets past retention failed'));
    core.runners.prune().catch((err: unknown) => core.logger.warn({ err }, 'forgetting runners long gone failed'));
    if (config.deploymentLogRetentionDays > 0) {
      core.deployments.removeExpiredLogs(config.deploymentLogRetentionDays)
        .then((n) => { if (n > 0) core.logger.info({ deployments: n, retentionDays: config.deploymentLogRetentionDays }, 'removed the logs of deployments that ended past their retention'); })
        .catch((err: unknown) => core.logger.warn({ err }, 'removing deployment logs past retention failed'));
    }
  };
  const firstHousekeeping = setTimeout(housekeeping, HOUSEKEEPING_FIRST_MS);
  firstHousekeeping.unref();
  const prune = setInterval(housekeeping, HOUSEKEEPING_EVERY_MS);
  prune.unref();
  // Every node sweeps expired runner leases; the compare-and-set makes concurrent sweeps harmless.
  // Every node delivers webhooks; a lease in the database gives each webhook to one node at a time.
  const dispatcher = createWebhookDispatcher({
    db: core.db, dialect: core.database.dialect, dataKeys: core.dataKeys, logger: core.logger,
    allowPrivate: config.webhookAllowPrivate, disableAfterSeconds: config.webhookDisableAfterSeconds,
    ...(metrics === null ? {} : { metrics }),
  });
  const stopClockSync = startClockSync(core.database, core.logger);
  const stopSweeper = core.runner.startSweeper(Math.max(1000, Math.min(5000, config.runnerLeaseSeconds * 500)),
    (err) => core.logger.warn({ err }, 'sweeping expired runner leases failed'));

  let metricsListener: MetricsListener | null = null;
  return {
    core,
    server,
    bootstrapFile,
    get metricsAddress() {
      return metricsListener?.address ?? null;
    },
    async listen() {
      if (metrics !== null && config.metricsAddress !== null && options.metricsListener !== false) {
        const { registry } = metrics;
        metricsListener = await listenForMetrics(config.metricsAddress, { contentType: registry.contentType, text: () => registry.metrics() }, core.logger)
          .catch((error: unknown) => { throw new MetricsListenError(error); });
        core.logger.info({ address: metricsListener.address }, 'metrics listening: GET /metrics');
      }
      const address = await server.listen({ host: config.host, port: config.port });
      core.runner.listening();
      dispatcher.start();
      return address;
    },
    async close() {
      await metricsListener?.close();
      clearTimeout(firstHousekeeping);
      clearInterval(prune);
      stopClockSync();
      stopSweeper();
      // No delivery starts from now on; those in flight end (their events are tried again later).
      const deliveriesStopped = dispatcher.stop();
      await server.close();
      // No request is left in flight: what background work still waits for (a delivery round, a
      // lease sweep) is not waited for long on a database that went silent.
      core.database.endStatementsWithin(BACKGROUND_STATEMENTS_AT_SHUTDOWN_MS);
      await deliveriesStopped;
      await core.close();
    },
  };
}
