// Configuration: defaults, flags over environment, and one clear line naming the variable for every
// invalid value.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { CONFIG_VARIABLES, ConfigError, flagName, loadConfig, redactUrl, type ConfigKey } from '../../src/platform/config.js';

/** The ConfigError message `loadConfig` throws for this environment (fails if it does not throw). */
function refusal(env: Record<string, string>, flags: Record<string, string> = {}): string {
  try {
    loadConfig(env, flags, '/srv');
  } catch (error) {
    assert.ok(error instanceof ConfigError, `not a ConfigError: ${String(error)}`);
    return error.message;
  }
  assert.fail(`accepted ${JSON.stringify(env)} ${JSON.stringify(flags)}`);
}

/** One invalid value of each kind, for every variable that can have one. */
const INVALID: Array<[string, string]> = [
  ['SLIPWAY_HOST', '256.1.1.1'], ['SLIPWAY_PORT', 'abc'], ['SLIPWAY_PORT', '65536'], ['SLIPWAY_PORT', '-1'], ['SLIPWAY_PORT', '80.5'],
  ['SLIPWAY_DATABASE_URL', 'mysql://db/app'], ['SLIPWAY_DATABASE_URL', 'sqlite:'], ['SLIPWAY_DATABASE_URL', 'postgres://u:p@127.0.0.1:notaport/db'],
  ['SLIPWAY_BASE_URL', 'not a url'], ['SLIPWAY_AUTH_URL', 'ftp://files.example.test'],
  ['SLIPWAY_MASTER_KEY', Buffer.alloc(16).toString('base64')], ['SLIPWAY_MASTER_KEY_PREVIOUS', Buffer.alloc(16).toString('base64')],
  ['SLIPWAY_IDP_NAME', 'Not Lowercase'], ['SLIPWAY_IDP_NAME', '1idp'], ['SLIPWAY_PROJECT_ID', 'abc'], ['SLIPWAY_PROJECT_ID', '1'.repeat(31)],
  ['SLIPWAY_TOKEN_TTL', '10'], ['SLIPWAY_LOG_LEVEL', 'loud'], ['SLIPWAY_WORKERS', '0'],
  ['SLIPWAY_BODY_LIMIT_BYTES', '10'], ['SLIPWAY_MAX_SECRETS_PER_REQUEST', '0'], ['SLIPWAY_MAX_KEYS_PER_SECRET', '0'], ['SLIPWAY_MAX_VALUE_CHARS', '0'], ['SLIPWAY_MAX_SPEC_BYTES', '1023'],
  ['SLIPWAY_RATE_LIMIT_TOKEN_PER_MINUTE', '0'], ['SLIPWAY_RATE_LIMIT_API_PER_MINUTE', 'lots'],
  ['SLIPWAY_SECRET_RETENTION_DAYS', '3651'], ['SLIPWAY_RUNNER_LEASE_SECONDS', '1'], ['SLIPWAY_DEPLOYMENT_MAX_ATTEMPTS', '0'],
  ['SLIPWAY_RUNNER_HOST_TIMEOUT_SECONDS', '1'], ['SLIPWAY_MAX_EVENT_LOOP_DELAY_MS', '60001'], ['SLIPWAY_TRUST_PROXY', 'true'],
  ['SLIPWAY_EXTERNAL_ISSUER', 'zitadel.example.test'], ['SLIPWAY_EXTERNAL_ISSUER', 'ftp://zitadel.example.test'],
  ['SLIPWAY_EXTERNAL_JWKS_URL', 'not a url'], ['SLIPWAY_METRICS_ADDRESS', 'localhost'], ['SLIPWAY_SHUTDOWN_GRACE_SECONDS', '0'], ['SLIPWAY_METRICS_ADDRESS', '127.0.0.1:65536'],
];

describe('configuration', () => {
  it('needs nothing: SQLite in ./.slipway on 127.0.0.1:8080', () => {
    const config = loadConfig({}, {}, '/srv/app');
    assert.equal(config.host, '127.0.0.1');
    assert.equal(config.port, 8080);
    assert.equal(config.dataDir, '/srv/app/.slipway');
    assert.equal(config.databaseUrl, null);
    assert.equal(config.baseUrl, 'http://127.0.0.1:8080');
    assert.equal(config.authUrl, 'http://127.0.0.1:8080');
    assert.equal(config.masterKey, null);
    assert.equal(config.idpName, 'slipway');
    assert.equal(config.tokenTtlSeconds, 43200);
    assert.equal(config.logLevel, 'info');
    assert.equal(config.workers, 1);
    assert.equal(config.externalIssuer, null);
    assert.equal(config.externalJwksUrl, null);
    assert.equal(config.limits.specBytes, 65536);
  });

  it('takes flags over environment variables, and treats empty values as unset', () => {
    const config = loadConfig({ SLIPWAY_PORT: '9000', SLIPWAY_DATA_DIR: 'data', SLIPWAY_LOG_LEVEL: '' }, { port: '9100' }, '/srv');
    assert.equal(config.port, 9100);
    assert.equal(config.dataDir, '/srv/data');
    assert.equal(config.logLevel, 'info');
    assert.equal(config.baseUrl, 'http://127.0.0.1:9100');
  });

  it('derives callable default URLs from the listen address', () => {
    assert.equal(loadConfig({ SLIPWAY_HOST: '0.0.0.0' }).baseUrl, 'http://127.0.0.1:8080');
    assert.equal(loadConfig({ SLIPWAY_HOST: '::' }).baseUrl, 'http://[::1]:8080');
    assert.equal(loadConfig({ SLIPWAY_HOST: '::1' }).baseUrl, 'http://[::1]:8080');
    const split = loadConfig({ SLIPWAY_BASE_URL: 'https://api.example.test/', SLIPWAY_AUTH_URL: 'https://login.example.test/auth//' });
    assert.deepEqual([split.baseUrl, split.authUrl], ['https://api.example.test', 'https://login.example.test/auth']);
  });

  it('listens on an IP address or a host name, and refuses anything else as SLIPWAY_HOST with what a host is', () => {
    for (const host of ['localhost', 'slipway-1.internal', 'LOCALHOST', '10.0.0.7', '::', '::1', 'fd00::7']) {
      const config = loadConfig({ SLIPWAY_HOST: host });
      assert.equal(config.host, host);
      assert.ok(URL.canParse(config.baseUrl), config.baseUrl);
    }
    assert.equal(loadConfig({ SLIPWAY_HOST: 'slipway-1.internal' }).authUrl, 'http://slipway-1.internal:8080');
    for (const host of ['256.1.1.1', '1.2.3', '0x7f.1', 'build.42', 'exa mple', 'host_name', '-host', 'host-', 'a..b', '127.0.0.1:8080', 'fe80::1%eth0', `${'a'.repeat(64)}.test`]) {
      assert.equal(refusal({ SLIPWAY_HOST: host }), 'SLIPWAY_HOST must be an IP address (such as 127.0.0.1, 0.0.0.0 or ::) or a host name '
        + `(dot-separated labels of letters, digits and inner dashes, at most 63 characters each, the last not a number), got "${host}"`);
    }
    assert.match(refusal({}, { host: '256.1.1.1' }), /^--host \(SLIPWAY_HOST\) must be an IP address/);
  });

  it('refuses each invalid value with one line naming the variable', () => {
    for (const [variable, value] of INVALID) {
      const message = refusal({ [variable]: value });
      assert.ok(message.startsWith(`${variable} `), `${variable}=${value}: ${message}`);
      assert.ok(!message.includes('\n'), `${variable}: more than one line`);
    }
  });

  it('names the flag, and the variable beside it, when the bad value came from one', () => {
    for (const [variable, value] of INVALID) {
      const key = (Object.keys(CONFIG_VARIABLES) as ConfigKey[]).find((k) => CONFIG_VARIABLES[k] === variable)!;
      const message = refusal({}, { [key]: value });
      assert.ok(message.startsWith(`--${flagName(key)} (${variable}) `), `--${flagName(key)} ${value}: ${message}`);
    }
  });

  it('states the whole rule that a value breaks', () => {
    const rules: Array<[Record<string, string>, string]> = [
      [{ SLIPWAY_IDP_NAME: '1idp' }, 'SLIPWAY_IDP_NAME must be 1 to 63 characters: a lowercase letter, then lowercase letters, digits and dashes, got "1idp"'],
      [{ SLIPWAY_IDP_NAME: 'a'.repeat(64) }, `SLIPWAY_IDP_NAME must be 1 to 63 characters: a lowercase letter, then lowercase letters, digits and dashes, got "${'a'.repeat(64)}"`],
      [{ SLIPWAY_PROJECT_ID: '1'.repeat(31) }, `SLIPWAY_PROJECT_ID must be 1 to 30 digits, got "${'1'.repeat(31)}"`],
      [{ SLIPWAY_PROJECT_ID: '12a' }, 'SLIPWAY_PROJECT_ID must be 1 to 30 digits, got "12a"'],
      [{ SLIPWAY_DATABASE_URL: 'mysql://db/app' }, 'SLIPWAY_DATABASE_URL must be a PostgreSQL URL (postgres:// or postgresql://) or sqlite:PATH, got "mysql://db/app"'],
      [{ SLIPWAY_MASTER_KEY: 'c2hvcnQ=' }, 'SLIPWAY_MASTER_KEY must be the base64 encoding of exactly 32 bytes (openssl rand -base64 32 makes one)'],
      // Node's decoder would skip the stray characters and find 32 bytes all the same.
      [{ SLIPWAY_MASTER_KEY: `!!!${Buffer.alloc(32, 7).toString('base64')}` }, 'SLIPWAY_MASTER_KEY must be the base64 encoding of exactly 32 bytes (openssl rand -base64 32 makes one)'],
      [{ SLIPWAY_LOG_LEVEL: 'loud' }, 'SLIPWAY_LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got "loud"'],
    ];
    for (const [env, message] of rules) assert.equal(refusal(env), message);
    assert.equal(loadConfig({ SLIPWAY_IDP_NAME: `a${'-9'.repeat(31)}`, SLIPWAY_PROJECT_ID: '9'.repeat(30) }).idpName.length, 63);
    const key = Buffer.alloc(32, 250);
    for (const form of [key.toString('base64'), key.toString('base64url'), key.toString('base64').replace(/=$/, '')]) {
      assert.equal(loadConfig({ SLIPWAY_MASTER_KEY: form }).masterKey, form, form);
    }
    // Read from a file, a key often ends in a newline.
    assert.equal(loadConfig({ SLIPWAY_MASTER_KEY: `${key.toString('base64')}\n` }).masterKey, key.toString('base64'));
  });

  it('refuses public URLs with a query or a fragment, which every URL made from them would carry in the middle', () => {
    for (const variable of ['SLIPWAY_BASE_URL', 'SLIPWAY_AUTH_URL']) {
      for (const value of ['http://127.0.0.1:8080/?x=1', 'http://127.0.0.1:8080/#top', 'http://127.0.0.1:8080?', 'https://id.example/auth#']) {
        assert.equal(refusal({ [variable]: value }), `${variable} must be an http(s) URL without query or fragment, got "${value}"`);
      }
    }
    assert.match(refusal({}, { authUrl: 'http://127.0.0.1:8080/?x=1' }), /^--auth-url \(SLIPWAY_AUTH_URL\) must be an http\(s\) URL without query or fragment/);
  });

  it('takes an external issuer exactly as given, with the project id its tokens must name', () => {
    const config = loadConfig({ SLIPWAY_EXTERNAL_ISSUER: 'https://acme.zitadel.example/', SLIPWAY_PROJECT_ID: '263952365928112131' });
    assert.equal(config.externalIssuer, 'https://acme.zitadel.example/');
    assert.equal(config.externalJwksUrl, null);
    const pinned = loadConfig({}, { externalIssuer: 'https://acme.zitadel.example', externalJwksUrl: 'https://keys.example/jwks', projectId: '1' });
    assert.deepEqual([pinned.externalIssuer, pinned.externalJwksUrl], ['https://acme.zitadel.example', 'https://keys.example/jwks']);
  });

  it('refuses an external issuer set up halfway, with one line each', () => {
    const project = { SLIPWAY_PROJECT_ID: '263952365928112131' };
    const cases: Array<[Record<string, string>, RegExp]> = [
      [{ SLIPWAY_EXTERNAL_ISSUER: 'https://acme.zitadel.example' }, /^SLIPWAY_EXTERNAL_ISSUER needs SLIPWAY_PROJECT_ID/],
      [{ ...project, SLIPWAY_EXTERNAL_ISSUER: 'https://acme.zitadel.example/?tenant=1' }, /^SLIPWAY_EXTERNAL_ISSUER must be an issuer URL without query or fragment/],
      [{ ...project, SLIPWAY_EXTERNAL_ISSUER: 'https://acme.zitadel.example/#' }, /^SLIPWAY_EXTERNAL_ISSUER must be an issuer URL without query or fragment/],
      [{ ...project, SLIPWAY_EXTERNAL_ISSUER: 'http://127.0.0.1:8080/' }, /^SLIPWAY_EXTERNAL_ISSUER must differ from SLIPWAY_AUTH_URL/],
      [{ ...project, SLIPWAY_EXTERNAL_ISSUER: 'https://id.example', SLIPWAY_AUTH_URL: 'https://id.example' }, /^SLIPWAY_EXTERNAL_ISSUER must differ/],
      [{ SLIPWAY_EXTERNAL_JWKS_URL: 'https://keys.example/jwks' }, /^SLIPWAY_EXTERNAL_JWKS_URL needs SLIPWAY_EXTERNAL_ISSUER/],
    ];
    for (const [env, message] of cases) {
      const refused = refusal(env);
      assert.match(refused, message);
      assert.ok(!refused.includes('\n'), refused);
    }
    assert.match(refusal({}, { externalIssuer: 'https://acme.zitadel.example' }), /^--external-issuer \(SLIPWAY_EXTERNAL_ISSUER\) needs SLIPWAY_PROJECT_ID/);
  });

  it('never repeats a database password in an error', () => {
    const message = refusal({ SLIPWAY_DATABASE_URL: 'mysql://app:hunter2@db/app' });
    assert.ok(!message.includes('hunter2'), message);
    assert.equal(redactUrl('postgres://app:hunter2@db:5432/app'), 'postgres://app:***@db:5432/app');
    // A password with an @ of its own is hidden whole.
    assert.equal(redactUrl('postgres://app:top@secret@db:5432/app?x=1'), 'postgres://app:***@db:5432/app?x=1');
    assert.equal(redactUrl('postgres://app:pass/word@db:5432/app'), 'postgres://app:***@db:5432/app');
    assert.equal(redactUrl('postgres://app@db/app?sslmode=require&password=hunter2&sslpassword=k3y'), 'postgres://app@db/app?sslmode=require&password=***&sslpassword=***');
  });

  it('accepts every port and refuses everything that is not one (property)', () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 65535 }), (port) => loadConfig({ SLIPWAY_PORT: String(port) }).port === port));
    fc.assert(fc.property(fc.string({ minLength: 1 }).filter((s) => !/^\d+$/.test(s)), (value) => {
      assert.match(refusal({ SLIPWAY_PORT: value }), /^SLIPWAY_PORT must be a whole number from 0 to 65535/);
    }));
  });

  it('takes port 0 (the system picks one) only beside both public URLs, which the default ones could not name', () => {
    const urls = { SLIPWAY_BASE_URL: 'https://api.example.test', SLIPWAY_AUTH_URL: 'https://login.example.test' };
    const config = loadConfig({ ...urls, SLIPWAY_PORT: '0' });
    assert.deepEqual([config.port, config.baseUrl, config.authUrl], [0, 'https://api.example.test', 'https://login.example.test']);
    assert.equal(refusal({ SLIPWAY_PORT: '0' }),
      'SLIPWAY_PORT is 0, a port the system picks, which the default URLs cannot name: set SLIPWAY_BASE_URL and SLIPWAY_AUTH_URL to where clients reach it, or give a port from 1 to 65535');
    assert.match(refusal({ SLIPWAY_PORT: '0', SLIPWAY_BASE_URL: urls.SLIPWAY_BASE_URL }), /^SLIPWAY_PORT is 0, .*: set SLIPWAY_AUTH_URL to where/);
    assert.match(refusal({ SLIPWAY_AUTH_URL: urls.SLIPWAY_AUTH_URL }, { port: '0' }), /^--port \(SLIPWAY_PORT\) is 0, .*: set SLIPWAY_BASE_URL to where/);
  });

  it('trusts no proxy by default, and takes a hop count or addresses, ranges and range names', () => {
    assert.equal(loadConfig({}, {}, '/srv').trustProxy, false);
    assert.equal(loadConfig({ SLIPWAY_TRUST_PROXY: '2' }, {}, '/srv').trustProxy, 2);
    assert.deepEqual(loadConfig({ SLIPWAY_TRUST_PROXY: '10.0.0.0/8, loopback,2001:db8::1,192.0.2.7/32' }, {}, '/srv').trustProxy,
      ['10.0.0.0/8', 'loopback', '2001:db8::1', '192.0.2.7/32']);
    assert.deepEqual(loadConfig({}, { trustProxy: 'uniquelocal' }, '/srv').trustProxy, ['uniquelocal']);
  });

  it('refuses trusting every peer, and anything that is no hop count or address', () => {
    for (const everyone of ['true', '0.0.0.0/0', '10.0.0.0/8,::/0']) {
      assert.match(refusal({ SLIPWAY_TRUST_PROXY: everyone }), /^SLIPWAY_TRUST_PROXY must be the number of proxies .* would trust every client's X-Forwarded-For/, everyone);
    }
    for (const value of ['0', '33', 'proxy.internal', '10.0.0.0/33', '10.0.0.1/8/8', '::1/129', ',']) {
      assert.match(refusal({ SLIPWAY_TRUST_PROXY: value }), /^SLIPWAY_TRUST_PROXY must be /, value);
    }
  });

  it('serves no metrics unless asked, and takes PORT, HOST:PORT or [IPv6]:PORT', () => {
    assert.equal(loadConfig({}, {}, '/srv').metricsAddress, null);
    assert.deepEqual(loadConfig({ SLIPWAY_METRICS_ADDRESS: '9464' }, {}, '/srv').metricsAddress, { host: '127.0.0.1', port: 9464 });
    assert.deepEqual(loadConfig({ SLIPWAY_METRICS_ADDRESS: '0.0.0.0:9464' }, {}, '/srv').metricsAddress, { host: '0.0.0.0', port: 9464 });
    assert.deepEqual(loadConfig({ SLIPWAY_METRICS_ADDRESS: '[::1]:9464' }, {}, '/srv').metricsAddress, { host: '::1', port: 9464 });
    assert.deepEqual(loadConfig({}, { metricsAddress: 'metrics.internal:0' }, '/srv').metricsAddress, { host: 'metrics.internal', port: 0 });
  });

  it('refuses a metrics address that is none, or the API\'s own port', () => {
    for (const value of ['', ' ', 'localhost', ':9464', '::1:9464', '[localhost]:9464', '[::1]', '1.2.3:9464', '127.0.0.1:99999', '127.0.0.1:94a']) {
      if (value === '') continue; // empty is unset
      assert.match(refusal({ SLIPWAY_METRICS_ADDRESS: value }), /^SLIPWAY_METRICS_ADDRESS must be PORT, HOST:PORT or \[IPv6\]:PORT .*, got "/, value);
    }
    for (const value of ['8080', '127.0.0.1:8080', '0.0.0.0:8080']) {
      assert.match(refusal({ SLIPWAY_METRICS_ADDRESS: value }), /^SLIPWAY_METRICS_ADDRESS must be another port than the API's \(8080\)/, value);
    }
    assert.match(refusal({ SLIPWAY_HOST: '0.0.0.0', SLIPWAY_PORT: '9000' }, { metricsAddress: '10.0.0.1:9000' }), /^--metrics-address \(SLIPWAY_METRICS_ADDRESS\) must be another port/);
    // Another address of the machine, on the API's port: both can listen.
    assert.deepEqual(loadConfig({ SLIPWAY_HOST: '127.0.0.1', SLIPWAY_METRICS_ADDRESS: '10.0.0.1:8080' }, {}, '/srv').metricsAddress, { host: '10.0.0.1', port: 8080 });
  });

  it('is documented: the README\'s configuration table has a row for every variable', () => {
    const readme = fs.readFileSync(fileURLToPath(new URL('../../../README.md', import.meta.url)), 'utf8');
    // A row's first cell names one variable or several: `| \`A\`, \`B\` |`.
    const documented = new Set([...readme.matchAll(/^\| (`SLIPWAY_[A-Z_]+`(?:, `SLIPWAY_[A-Z_]+`)*) \|/gm)].flatMap((m) => m[1]!.split(', ').map((c) => c.slice(1, -1))));
    const missing = Object.values(CONFIG_VARIABLES).filter((name) => !documented.has(name));
    assert.deepEqual(missing, []);
    // What SLIPWAY_MAX_SPEC_BYTES bounds: an environment's configuration too, and what it adds to a deployment's spec.
    const specBytes = /^\| `SLIPWAY_MAX_SPEC_BYTES` \|.*$/m.exec(readme)?.[0] ?? '';
    assert.match(specBytes, /an environment's `variables` and `secrets`/);
    assert.match(specBytes, /the service's with the environment's/);
  });
});
