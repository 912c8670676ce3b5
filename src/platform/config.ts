// Configuration is parsed once at start-up from the environment and `serve` flags, validated,
// and passed down. Nothing reads process.env after this.
import net from 'node:net';
import path from 'node:path';

export interface Limits {
  /** Largest accepted request body, bytes. */
  bodyBytes: number;
  /** Secrets in one bulk request. */
  secretsPerRequest: number;
  /** Keys in one secret. */
  keysPerSecret: number;
  /** Characters in one secret value. */
  valueChars: number;
  /**
   * Bytes of a service's spec as stored (its JSON), and of the spec a deployment freezes (the
   * service's with the deployment's variables laid over): what bounds every list of them.
   */
  specBytes: number;
  /** Webhooks in one organization. */
  webhooksPerOrg: number;
}

export interface RateLimits {
  /** Token requests per minute, per client id and per remote address (each its own bucket). */
  tokenPerMinute: number;
  /** API requests per minute per authenticated subject. */
  apiPerMinute: number;
  /**
   * Revocation requests per hour per client id: each revoked token is kept, and read by every node
   * every few seconds, until it expires, so one client must not be able to pile up a great many.
   */
  revokePerHour: number;
}

export interface Config {
  host: string;
  port: number;
  dataDir: string;
  databaseUrl: string | null;
  baseUrl: string;
  authUrl: string;
  masterKey: string | null;
  /** Keys still accepted beside masterKey while a rotation away from them runs. */
  masterKeyPrevious: string[];
  idpName: string;
  projectId: string | null;
  /** An issuer whose access tokens the API accepts beside its own (a ZITADEL): their exact `iss`. */
  externalIssuer: string | null;
  /** Where that issuer's keys are, when its discovery document is not to be asked. */
  externalJwksUrl: string | null;
  tokenTtlSeconds: number;
  logLevel: string;
  workers: number;
  limits: Limits;
  rateLimits: RateLimits;
  /** Days a deleted secret can still be restored before it is purged. */
  secretRetentionDays: number;
  /** Days a finished deployment's log is kept after it ended; 0: for good. */
  deploymentLogRetentionDays: number;
  /** Seconds a runner lease lasts without a heartbeat. */
  runnerLeaseSeconds: number;
  /** Claims of one deployment before a lost or given-back lease fails it. */
  deploymentMaxAttempts: number;
  runnerHostTimeoutSeconds: number;
  /** Mean event-loop delay, ms, past which requests are refused with 503 (0: never). */
  maxEventLoopDelayMs: number;
  /**
   * Which peers' X-Forwarded-For names the client: none (false), the nearest N hops, or peers at
   * these addresses and ranges (Fastify's `trustProxy`).
   */
  trustProxy: false | number | string[];
  /** Webhooks may deliver to this machine and private networks. */
  webhookAllowPrivate: boolean;
  /** Seconds a webhook may keep failing before it is disabled. */
  webhookDisableAfterSeconds: number;
  /** SQLite: whether each COMMIT syncs the write-ahead log (`full`) or only checkpoints do (`normal`). */
  sqliteSynchronous: 'full' | 'normal';
  /** Where GET /metrics is served (Prometheus), or null: no metrics. */
  metricsAddress: { host: string; port: number } | null;
  /** How long `serve` lets the requests in flight finish after SIGTERM before it exits 1. */
  shutdownGraceSeconds: number;
}

export class ConfigError extends Error {}

/**
 * Base64 (or base64url) of exactly 32 bytes, nothing else: Node's decoder skips characters that
 * are not base64, so a key with stray ones (`!!!`, a pasted quote) would decode all the same.
 */
function isKeyOf32Bytes(text: string): boolean {
  return /^(?:[A-Za-z0-9+/]{43}|[A-Za-z0-9_-]{43})=?$/.test(text) && Buffer.from(text, 'base64').length === 32;
}

type Env = Record<string, string | undefined>;

/** The variables and their `serve` flag names, so both are documented and parsed from one table. */
/** The most keys SLIPWAY_MAX_KEYS_PER_SECRET may allow: no secret ever holds more. */
export const KEYS_PER_SECRET_CEILING = 10_000;
/** The longest SLIPWAY_TOKEN_TTL: 31 days. */
export const MAX_TOKEN_TTL_SECONDS = 31 * 86400;

export const CONFIG_VARIABLES = {
  host: 'SLIPWAY_HOST',
  port: 'SLIPWAY_PORT',
  dataDir: 'SLIPWAY_DATA_DIR',
  databaseUrl: 'SLIPWAY_DATABASE_URL',
  baseUrl: 'SLIPWAY_BASE_URL',
  authUrl: 'SLIPWAY_AUTH_URL',
  masterKey: 'SLIPWAY_MASTER_KEY',
  masterKeyPrevious: 'SLIPWAY_MASTER_KEY_PREVIOUS',
  idpName: 'SLIPWAY_IDP_NAME',
  projectId: 'SLIPWAY_PROJECT_ID',
  externalIssuer: 'SLIPWAY_EXTERNAL_ISSUER',
  externalJwksUrl: 'SLIPWAY_EXTERNAL_JWKS_URL',
  tokenTtl: 'SLIPWAY_TOKEN_TTL',
  logLevel: 'SLIPWAY_LOG_LEVEL',
  workers: 'SLIPWAY_WORKERS',
  bodyLimit: 'SLIPWAY_BODY_LIMIT_BYTES',
  maxSecretsPerRequest: 'SLIPWAY_MAX_SECRETS_PER_REQUEST',
  maxKeysPerSecret: 'SLIPWAY_MAX_KEYS_PER_SECRET',
  maxValueChars: 'SLIPWAY_MAX_VALUE_CHARS',
  maxSpecBytes: 'SLIPWAY_MAX_SPEC_BYTES',
  rateLimitToken: 'SLIPWAY_RATE_LIMIT_TOKEN_PER_MINUTE',
  rateLimitApi: 'SLIPWAY_RATE_LIMIT_API_PER_MINUTE',
  rateLimitRevoke: 'SLIPWAY_RATE_LIMIT_REVOKE_PER_HOUR',
  secretRetentionDays: 'SLIPWAY_SECRET_RETENTION_DAYS',
  deploymentLogRetentionDays: 'SLIPWAY_DEPLOYMENT_LOG_RETENTION_DAYS',
  runnerLeaseSeconds: 'SLIPWAY_RUNNER_LEASE_SECONDS',
  deploymentMaxAttempts: 'SLIPWAY_DEPLOYMENT_MAX_ATTEMPTS',
  runnerHostTimeoutSeconds: 'SLIPWAY_RUNNER_HOST_TIMEOUT_SECONDS',
  maxEventLoopDelay: 'SLIPWAY_MAX_EVENT_LOOP_DELAY_MS',
  trustProxy: 'SLIPWAY_TRUST_PROXY',
  maxWebhooksPerOrg: 'SLIPWAY_MAX_WEBHOOKS_PER_ORG',
  webhookAllowPrivate: 'SLIPWAY_WEBHOOK_ALLOW_PRIVATE',
  webhookDisableAfterSeconds: 'SLIPWAY_WEBHOOK_DISABLE_AFTER_SECONDS',
  sqliteSynchronous: 'SLIPWAY_SQLITE_SYNCHRONOUS',
  metricsAddress: 'SLIPWAY_METRICS_ADDRESS',
  shutdownGraceSeconds: 'SLIPWAY_SHUTDOWN_GRACE_SECONDS',
} as const;

export type ConfigKey = keyof typeof CONFIG_VARIABLES;

/** `--data-dir` for dataDir and so on: the flag spelling of each variable. */
export function flagName(key: ConfigKey): string {
  return CONFIG_VARIABLES[key].replace(/^SLIPWAY_/, '').toLowerCase().replace(/_/g, '-');
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/**
 * Builds the configuration from environment variables, overridden by flags
 * (`{ port: '9000' }` as parsed from `--port 9000`). Throws ConfigError with one clear line.
 */
export function loadConfig(env: Env, flags: Partial<Record<ConfigKey, string>> = {}, cwd = process.cwd()): Config {
  const raw = (key: ConfigKey): string | undefined => {
    const value = flags[key] ?? env[CONFIG_VARIABLES[key]];
    return value === undefined || value === '' ? undefined : value;
  };
  // An error names what the user actually set: the flag when one was given, else the variable.
  const label = (key: ConfigKey): string => (flags[key] !== undefined ? `--${flagName(key)} (${CONFIG_VARIABLES[key]})` : CONFIG_VARIABLES[key]);
  const int = (key: ConfigKey, fallback: number, min: number, max: number): number => {
    const value = raw(key);
    if (value === undefined) return fallback;
    if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > max) {
      throw new ConfigError(`${label(key)} must be a whole number from ${min} to ${max}, got "${value}"`);
    }
    return Number(value);
  };
  const httpUrl = (key: ConfigKey, value: string): URL => {
    let parsed: URL;
    try {
      parsed = new URL(value);
    } catch {
      throw new ConfigError(`${label(key)} must be an absolute http(s) URL, got "${value}"`);
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
      throw new ConfigError(`${label(key)} must be an http(s) URL, got "${value}"`);
    }
    return parsed;
  };
  // A URL that paths are appended to, or that a token's `iss` is compared with as text: a query or
  // a fragment (even an empty one) would land in the middle of every URL made from it.
  const plainUrl = (key: ConfigKey, value: string, what = 'an http(s) URL'): void => {
    httpUrl(key, value);
    if (/[?#]/.test(value)) throw new ConfigError(`${label(key)} must be ${what} without query or fragment, got "${value}"`);
  };
  const url = (key: ConfigKey, fallback: string): string => {
    const value = raw(key) ?? fallback;
    plainUrl(key, value);
    return value.replace(/\/+$/, '');
  };

  const host = raw('host') ?? '127.0.0.1';
  if (!isListenHost(host)) {
    throw new ConfigError(`${label('host')} must be an IP address (such as 127.0.0.1, 0.0.0.0 or ::) or a host name (dot-separated labels of letters, digits and inner dashes, at most 63 characters each, the last not a number), got "${host}"`);
  }
  const port = int('port', 8080, 0, 65535);
  const dataDir = path.resolve(cwd, raw('dataDir') ?? '.slipway');
  // Listening on every address is not an address to call: the default URLs use loopback then.
  const hostForUrl = host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '[::1]' : host.includes(':') ? `[${host}]` : host;
  const defaultUrl = `http://${hostForUrl}:${port}`;

  const databaseUrl = raw('databaseUrl') ?? null;
  const postgresUrl = databaseUrl !== null && /^(postgres|postgresql):\/\//.test(databaseUrl);
  if (databaseUrl !== null && !postgresUrl && !/^sqlite:./.test(databaseUrl)) {
    throw new ConfigError(`${label('databaseUrl')} must be a PostgreSQL URL (postgres:// or postgresql://) or sqlite:PATH, got "${redactUrl(databaseUrl)}"`);
  }
  if (postgresUrl && !URL.canParse(databaseUrl)) {
    throw new ConfigError(`${label('databaseUrl')} is not a valid URL (a port must be a number; percent-encode @, / and : in the user name and password), got "${redactUrl(databaseUrl)}"`);
  }

  // Trimmed, as a key read from a file (a Kubernetes secret, an env file) often ends in a newline.
  const masterKey = raw('masterKey')?.trim() ?? null;
  if (masterKey !== null && !isKeyOf32Bytes(masterKey)) {
    throw new ConfigError(`${label('masterKey')} must be the base64 encoding of exactly 32 bytes (openssl rand -base64 32 makes one)`);
  }
  const masterKeyPrevious = (raw('masterKeyPrevious') ?? '').split(',').map((k) => k.trim()).filter(Boolean);
  if (masterKeyPrevious.some((k) => !isKeyOf32Bytes(k))) {
    throw new ConfigError(`${label('masterKeyPrevious')} must be comma-separated base64 encodings of exactly 32 bytes each`);
  }
  if (masterKeyPrevious.length > 0 && masterKey === null) {
    throw new ConfigError(`${label('masterKeyPrevious')} needs SLIPWAY_MASTER_KEY (the new key); a key file keeps its previous keys itself`);
  }

  const idpName = raw('idpName') ?? 'slipway';
  if (!/^[a-z][a-z0-9-]{0,62}$/.test(idpName)) {
    throw new ConfigError(`${label('idpName')} must be 1 to 63 characters: a lowercase letter, then lowercase letters, digits and dashes, got "${idpName}"`);
  }
  const projectId = raw('projectId') ?? null;
  if (projectId !== null && !/^\d{1,30}$/.test(projectId)) {
    throw new ConfigError(`${label('projectId')} must be 1 to 30 digits, got "${projectId}"`);
  }

  const externalIssuer = raw('externalIssuer') ?? null;
  const externalJwksUrl = raw('externalJwksUrl') ?? null;
  const baseUrl = url('baseUrl', defaultUrl);
  const authUrl = url('authUrl', defaultUrl);
  if (port === 0) {
    // Port 0 listens wherever the system says, which the default URLs cannot know: the issuer,
    // the token URL and bootstrap.json would name port 0.
    const unset = (['baseUrl', 'authUrl'] as const).filter((key) => raw(key) === undefined).map((key) => CONFIG_VARIABLES[key]);
    if (unset.length > 0) {
      throw new ConfigError(`${label('port')} is 0, a port the system picks, which the default URLs cannot name: set ${unset.join(' and ')} to where clients reach it, or give a port from 1 to 65535`);
    }
  }
  if (externalIssuer !== null) {
    // Kept exactly as given: a token's `iss` must equal it character for character (OpenID Connect Discovery §4.3).
    plainUrl('externalIssuer', externalIssuer, 'an issuer URL');
    if (projectId === null) {
      throw new ConfigError(`${label('externalIssuer')} needs SLIPWAY_PROJECT_ID: the id of the issuer's project that external tokens must name in aud`);
    }
    if (externalIssuer.replace(/\/+$/, '') === authUrl) throw new ConfigError(`${label('externalIssuer')} must differ from SLIPWAY_AUTH_URL, Slipway's own issuer`);
  }
  if (externalJwksUrl !== null) {
    httpUrl('externalJwksUrl', externalJwksUrl);
    if (externalIssuer === null) throw new ConfigError(`${label('externalJwksUrl')} needs SLIPWAY_EXTERNAL_ISSUER: the issuer whose keys it serves`);
  }

  const trustProxy = proxiesToTrust(raw('trustProxy'), label('trustProxy'));
  const sqliteSynchronous = raw('sqliteSynchronous') ?? 'full';
  if (sqliteSynchronous !== 'full' && sqliteSynchronous !== 'normal') {
    throw new ConfigError(`${label('sqliteSynchronous')} must be full or normal, got "${sqliteSynchronous}"`);
  }
  const webhookAllowPrivate = raw('webhookAllowPrivate') ?? 'false';
  if (webhookAllowPrivate !== 'true' && webhookAllowPrivate !== 'false') {
    throw new ConfigError(`${label('webhookAllowPrivate')} must be true or false, got "${webhookAllowPrivate}"`);
  }

  const metricsAddress = listenAddress(raw('metricsAddress'), label('metricsAddress'));
  if (metricsAddress !== null && metricsAddress.port !== 0 && metricsAddress.port === port && (metricsAddress.host === host || isWildcard(host) || isWildcard(metricsAddress.host))) {
    throw new ConfigError(`${label('metricsAddress')} must be another port than the API's (${port}): the metrics have a listener of their own`);
  }

  const logLevel = raw('logLevel') ?? 'info';
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new ConfigError(`${label('logLevel')} must be one of ${LOG_LEVELS.join(', ')}, got "${logLevel}"`);
  }

  return {
    host,
    port,
    dataDir,
    databaseUrl,
    baseUrl,
    authUrl,
    masterKey,
    masterKeyPrevious,
    idpName,
    projectId,
    externalIssuer,
    externalJwksUrl,
    tokenTtlSeconds: int('tokenTtl', 43200, 60, MAX_TOKEN_TTL_SECONDS),
    logLevel,
    workers: int('workers', 1, 1, 256),
    limits: {
      bodyBytes: int('bodyLimit', 4 * 1024 * 1024, 1024, 512 * 1024 * 1024),
      secretsPerRequest: int('maxSecretsPerRequest', 1000, 1, 10000),
      keysPerSecret: int('maxKeysPerSecret', 100, 1, KEYS_PER_SECRET_CEILING),
      valueChars: int('maxValueChars', 65536, 1, 16 * 1024 * 1024),
      specBytes: int('maxSpecBytes', 64 * 1024, 1024, 64 * 1024 * 1024),
      webhooksPerOrg: int('maxWebhooksPerOrg', 20, 1, 1000),
    },
    rateLimits: {
      tokenPerMinute: int('rateLimitToken', 600, 1, 1_000_000_000),
      apiPerMinute: int('rateLimitApi', 6000, 1, 1_000_000_000),
      revokePerHour: int('rateLimitRevoke', 120, 1, 1_000_000_000),
    },
    secretRetentionDays: int('secretRetentionDays', 30, 0, 3650),
    deploymentLogRetentionDays: int('deploymentLogRetentionDays', 0, 0, 36_500),
    runnerLeaseSeconds: int('runnerLeaseSeconds', 30, 2, 3600),
    deploymentMaxAttempts: int('deploymentMaxAttempts', 3, 1, 100),
    runnerHostTimeoutSeconds: int('runnerHostTimeoutSeconds', 60, 2, 86_400),
    maxEventLoopDelayMs: int('maxEventLoopDelay', 1000, 0, 60_000),
    trustProxy,
    webhookAllowPrivate: webhookAllowPrivate === 'true',
    webhookDisableAfterSeconds: int('webhookDisableAfterSeconds', 3 * 86_400, 1, 30 * 86_400),
    sqliteSynchronous,
    metricsAddress,
    shutdownGraceSeconds: int('shutdownGraceSeconds', 30, 1, 3600),
  };
}

const isWildcard = (host: string): boolean => host === '0.0.0.0' || host === '::';

/**
 * SLIPWAY_METRICS_ADDRESS: `PORT` (on 127.0.0.1), `HOST:PORT` or `[IPv6]:PORT`; unset, no metrics.
 * Port 0 listens where the system says (the log tells where).
 */
function listenAddress(value: string | undefined, label: string): { host: string; port: number } | null {
  if (value === undefined) return null;
  const match = /^(?:(?:\[([^\]]+)\]|([^:]+)):)?(\d{1,5})$/.exec(value);
  const host = match?.[1] ?? match?.[2] ?? '127.0.0.1';
  const port = Number(match?.[3]);
  if (match === null || port > 65535 || !isListenHost(host) || (match[1] !== undefined && net.isIPv6(host) === false)) {
    throw new ConfigError(`${label} must be PORT, HOST:PORT or [IPv6]:PORT (such as 9464, 127.0.0.1:9464 or 0.0.0.0:9464), with a port from 0 to 65535, got "${value}"`);
  }
  return { host, port };
}

/** A label of a host name (RFC 1123): letters, digits and dashes, neither first nor last a dash. */
const HOST_LABEL = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;

/**
 * An address to listen on that the default URLs can name: an IP address (without an IPv6 zone,
 * which a URL cannot carry) or a host name. A name whose last label is a number is an IPv4 address
 * to a URL parser (`256.1.1.1`, `1.2.3`, `0x7f.1`), and no name.
 */
function isListenHost(host: string): boolean {
  if (net.isIP(host) !== 0) return !host.includes('%');
  const labels = host.split('.');
  return host.length <= 253 && labels.every((part) => HOST_LABEL.test(part)) && !/^(\d+|0x[0-9a-f]*)$/i.test(labels.at(-1)!);
}

/** proxy-addr's names for the private ranges, which a list may give beside addresses. */
const PROXY_RANGE_NAMES = ['loopback', 'linklocal', 'uniquelocal'];

/**
 * SLIPWAY_TRUST_PROXY: unset trusts no proxy (the peer's address is the client's); a number trusts
 * that many hops nearest the server; else a comma-separated list of addresses, CIDR ranges and
 * proxy-addr's range names. `true` and a /0 range (every peer) are refused: any client could then
 * name itself whatever address it likes, and the per-address limits would mean nothing.
 */
function proxiesToTrust(value: string | undefined, label: string): false | number | string[] {
  if (value === undefined || value === 'false') return false;
  const hint = 'the number of proxies in front of Slipway (e.g. 1), or their addresses and ranges (e.g. 10.0.0.0/8,loopback)';
  if (value === 'true') throw new ConfigError(`${label} must be ${hint}; "true" would trust every client's X-Forwarded-For`);
  if (/^\d+$/.test(value)) {
    const hops = Number(value);
    if (hops < 1 || hops > 32) throw new ConfigError(`${label} must be a hop count from 1 to 32, or a list of addresses, got "${value}"`);
    return hops;
  }
  const entries = value.split(',').map((entry) => entry.trim()).filter(Boolean);
  const everyone = entries.find((entry) => /\/0+$/.test(entry));
  if (everyone !== undefined) throw new ConfigError(`${label} must be ${hint}; "${everyone}" would trust every client's X-Forwarded-For`);
  const bad = entries.find((entry) => {
    if (PROXY_RANGE_NAMES.includes(entry)) return false;
    const [address, bits, extra] = entry.split('/');
    const family = net.isIP(address ?? '');
    if (family === 0 || extra !== undefined) return true;
    return bits !== undefined && (!/^\d{1,3}$/.test(bits) || Number(bits) > (family === 4 ? 32 : 128));
  });
  if (entries.length === 0 || bad !== undefined) throw new ConfigError(`${label} must be ${hint}, got "${bad ?? value}"`);
  return entries;
}

/**
 * The path of a public URL without its trailing slash ('' for none): the prefix of the routes it
 * names, which are served under it (the API under SLIPWAY_BASE_URL's, the OAuth endpoints under
 * SLIPWAY_AUTH_URL's).
 */
export function routePrefix(url: string): string {
  return new URL(url).pathname.replace(/\/+$/, '');
}

/** A database URL with its password replaced, fit for a log line or an error. */
export function redactUrl(value: string): string {
  // Up to the last @ before the query: a password may hold an @ or a / of its own, which
  // PostgreSQL's client takes as part of it.
  const at = value.search(/[?#]/);
  const [head, tail] = at < 0 ? [value, ''] : [value.slice(0, at), value.slice(at)];
  // The client also takes a password from the query (`?password=…`, and a key's `sslpassword`).
  return head.replace(/\/\/([^:/@]+):.*@/, '//$1:***@') + tail.replace(/([?&](?:ssl)?password=)[^&#]*/gi, '$1***');
}
