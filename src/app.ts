// The composition root: configuration in, a running Slipway out. It wires the platform (database,
// keys, logger), the domain services and the HTTP server, and nothing else.
import fs from 'node:fs';
import type { DestinationStream } from 'pino';
import { buildServer } from './http/server.js';
import { createRateLimiter } from './http/rate-limit.js';
import type { App } from './http/app-types.js';
import type { Config } from './platform/config.js';
import { openKeyring, type MasterKeyring } from './platform/crypto/master-key.js';
import { openDatabase, type Database } from './platform/db/database.js';
import { migrateToLatest } from './platform/db/migrations/index.js';
import { createLogger, type Logger } from './platform/logging.js';
import { oauthRoutes } from './modules/auth/oauth.routes.js';
import { createPrincipalDirectory } from './modules/auth/principal-directory.js';
import { createRevocationList } from './modules/auth/revocations.js';
import { fullScope } from './modules/auth/scopes.js';
import { createSigningKeys } from './modules/auth/signing-keys.js';
import { createTokenService } from './modules/auth/token.service.js';
import { createTokenVerifier } from './modules/auth/token-verifier.js';
import { eventsRoutes } from './modules/events/events.routes.js';
import { createEventsService } from './modules/events/events.service.js';
import { bootstrapIfEmpty } from './modules/instance/bootstrap.js';
import { loadInstanceIdentity } from './modules/instance/instance.service.js';
import { orgsRoutes } from './modules/orgs/orgs.routes.js';
import { createOrgsService } from './modules/orgs/orgs.service.js';
import { createDataKeys } from './modules/secrets/data-keys.js';
import { secretsRoutes } from './modules/secrets/secrets.routes.js';
import { createSecretsService } from './modules/secrets/secrets.service.js';
import { serviceUsersRoutes } from './modules/service-users/service-users.routes.js';
import { createServiceUsersService } from './modules/service-users/service-users.service.js';

export const VERSION = (JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

export interface CoreOptions {
  logStream?: DestinationStream;
  logger?: Logger;
  /** Run migrations before anything else (the CLI's `serve` and `migrate` do; workers do not need to). */
  migrate?: boolean;
}

/** Everything but HTTP: what the CLI needs to act on the same database as the server. */
export async function openCore(config: Config, options: CoreOptions = {}) {
  const logger = options.logger ?? createLogger(config.logLevel, options.logStream);
  const ring: MasterKeyring = openKeyring({
    envKey: config.masterKey,
    dataDir: config.dataDir,
    onGenerated: (file) => logger.warn({ file }, 'generated a master key file; back it up, or set SLIPWAY_MASTER_KEY (losing it loses every secret)'),
  });
  const database: Database = openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir });
  try {
    if (options.migrate !== false) await migrateToLatest(database);
    const { db } = database;
    const identity = await loadInstanceIdentity(db, ring, config.projectId);
    const issuer = config.authUrl;
    const tokenUrl = `${issuer}/oauth/v2/token`;
    const scope = fullScope(config.idpName, identity.projectId);

    const keys = createSigningKeys({ db, ring, tokenTtlSeconds: config.tokenTtlSeconds });
    await keys.ensureActiveKey();
    const principals = createPrincipalDirectory({ db });
    const revocations = createRevocationList({ db });
    const verifier = createTokenVerifier({ keys, principals, revocations, issuer, idpName: config.idpName, projectId: identity.projectId });
    const tokens = createTokenService({ db, pepper: identity.pepper, keys, revocations, verifier, issuer, idpName: config.idpName, projectId: identity.projectId, ttlSeconds: config.tokenTtlSeconds });

    const orgs = createOrgsService({ db });
    const serviceUsers = createServiceUsersService({ db, pepper: identity.pepper, tokenUrl, scope, onChanged: (id) => principals.forget(id) });
    const dataKeys = createDataKeys({ ring });
    const secrets = createSecretsService({ db, dataKeys });
    const events = createEventsService({ db });

    return {
      config, logger, ring, database, db, identity, issuer, tokenUrl, scope,
      keys, principals, revocations, verifier, tokens,
      orgs, serviceUsers, dataKeys, secrets, events,
      close: () => database.close(),
    };
  } catch (error) {
    await database.close();
    throw error;
  }
}

export type Core = Awaited<ReturnType<typeof openCore>>;

export interface SlipwayOptions extends CoreOptions {
  onUndeclaredStatus?: (route: string, status: number) => void;
  /** Create the default organization on an empty database (true for `serve`). */
  bootstrap?: boolean;
}

export interface Slipway {
  core: Core;
  server: App;
  bootstrapFile: string | null;
  listen(): Promise<string>;
  close(): Promise<void>;
}

export async function createSlipway(config: Config, options: SlipwayOptions = {}): Promise<Slipway> {
  const core = await openCore(config, options);
  const bootstrapFile = options.bootstrap === false ? null
    : await bootstrapIfEmpty({ db: core.db, dataDir: config.dataDir, orgs: core.orgs, serviceUsers: core.serviceUsers, logger: core.logger });

  const authPrefix = new URL(config.authUrl).pathname.replace(/\/+$/, '');
  const server = await buildServer({
    logger: core.logger,
    bodyLimit: config.limits.bodyBytes,
    verifier: core.verifier,
    orgs: core.orgs,
    apiLimiter: createRateLimiter({ name: 'api', limit: config.rateLimits.apiPerMinute, windowSeconds: 60 }),
    openapi: { baseUrl: config.baseUrl, tokenUrl: core.tokenUrl, scope: core.scope, version: VERSION },
    ready: async () => {
      await core.db.selectFrom('instance_settings').select('key').limit(1).execute();
      return true;
    },
    ...(options.onUndeclaredStatus ? { onUndeclaredStatus: options.onUndeclaredStatus } : {}),
  }, async (app) => {
    await app.register(async (scope) => {
      oauthRoutes(scope, {
        tokens: core.tokens, keys: core.keys, issuer: core.issuer, baseUrl: config.baseUrl, idpName: config.idpName, projectId: core.identity.projectId,
        limits: {
          perClient: createRateLimiter({ name: 'token-client', limit: config.rateLimits.tokenPerMinute, windowSeconds: 60 }),
          perAddress: createRateLimiter({ name: 'token-address', limit: config.rateLimits.tokenPerMinute, windowSeconds: 60 }),
        },
      }, authPrefix);
    });
    orgsRoutes(app, { orgs: core.orgs });
    serviceUsersRoutes(app, { serviceUsers: core.serviceUsers });
    secretsRoutes(app, { secrets: core.secrets, limits: config.limits });
    eventsRoutes(app, { events: core.events });
  });

  const prune = setInterval(() => { core.revocations.prune().catch((err: unknown) => core.logger.warn({ err }, 'pruning revoked tokens failed')); }, 3_600_000);
  prune.unref();

  return {
    core,
    server,
    bootstrapFile,
    async listen() {
      return server.listen({ host: config.host, port: config.port });
    },
    async close() {
      clearInterval(prune);
      await server.close();
      await core.close();
    },
  };
}
