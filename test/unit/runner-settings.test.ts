// `slipway runner` settings: flags over SLIPWAY_* variables over the credentials file, the URLs
// derived from each other, and a clear usage error for whatever is missing or wrong.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { UsageError } from '../../src/cli/args.js';
import { runnerSettings } from '../../src/cli/runner.js';

const file = {
  orgId: 'org_file', clientId: 'su_file', clientSecret: 'secret-from-file', tokenUrl: 'https://auth.example.com/oauth/v2/token', scope: 'openid urn:x:aud',
};
const read = (contents: unknown) => (name: string) => {
  assert.equal(name, 'creds.json');
  return typeof contents === 'string' ? contents : JSON.stringify(contents);
};

describe('runner settings', () => {
  it('takes everything from a credentials file, the API URL from its token URL when it names none', () => {
    assert.deepEqual(runnerSettings({ credentials: 'creds.json' }, {}, read(file)), {
      baseUrl: 'https://auth.example.com',
      orgId: 'org_file',
      credentials: { tokenUrl: file.tokenUrl, clientId: 'su_file', clientSecret: 'secret-from-file', scope: 'openid urn:x:aud' },
      concurrency: 4,
      reconcileSeconds: 15,
      logLevel: 'info',
    });
  });

  it('takes the API URL from the file\'s baseUrl when it has one (an API apart from its authorization server)', () => {
    const apart = { ...file, baseUrl: 'https://api.example.com' };
    const s = runnerSettings({ credentials: 'creds.json' }, {}, read(apart));
    assert.equal(s.baseUrl, 'https://api.example.com');
    assert.equal(s.credentials.tokenUrl, file.tokenUrl);
    assert.equal(runnerSettings({ credentials: 'creds.json' }, { SLIPWAY_URL: 'http://api.internal' }, read(apart)).baseUrl, 'http://api.internal');
  });

  it('prefers flags to variables, and variables to the file', () => {
    const env = { SLIPWAY_CLIENT_ID: 'su_env', SLIPWAY_CLIENT_SECRET: 'secret-from-env', SLIPWAY_ORG: 'org-env', SLIPWAY_URL: 'http://api.internal:8080/', SLIPWAY_ENVIRONMENTS: 'staging, qa' };
    const s = runnerSettings({ credentials: 'creds.json', 'client-id': 'su_flag', environment: ['production'], concurrency: '2', 'log-level': 'debug' }, env, read(file));
    assert.equal(s.credentials.clientId, 'su_flag');
    assert.equal(s.credentials.clientSecret, 'secret-from-env');
    assert.equal(s.credentials.tokenUrl, file.tokenUrl);
    assert.equal(s.orgId, 'org-env');
    assert.equal(s.baseUrl, 'http://api.internal:8080');
    assert.deepEqual(s.environments, ['production']);
    assert.deepEqual([s.concurrency, s.logLevel], [2, 'debug']);
    assert.equal(runnerSettings({ credentials: 'creds.json', 'reconcile-seconds': '3' }, { SLIPWAY_RUNNER_RECONCILE_SECONDS: '7' }, read(file)).reconcileSeconds, 3);
    assert.equal(runnerSettings({ credentials: 'creds.json' }, { SLIPWAY_RUNNER_RECONCILE_SECONDS: '7' }, read(file)).reconcileSeconds, 7);
    assert.deepEqual(runnerSettings({ credentials: 'creds.json' }, env, read(file)).environments, ['staging', 'qa']);
    assert.deepEqual(runnerSettings({ credentials: 'creds.json', environment: ['a,b', 'a'] }, {}, read(file)).environments, ['a', 'b']);
  });

  it('works from variables alone, the token URL from the API URL', () => {
    const s = runnerSettings({}, { SLIPWAY_URL: 'http://127.0.0.1:8080', SLIPWAY_ORG: 'default', SLIPWAY_CLIENT_ID: 'su_1', SLIPWAY_CLIENT_SECRET: 's', SLIPWAY_SCOPE: 'openid' });
    assert.equal(s.credentials.tokenUrl, 'http://127.0.0.1:8080/oauth/v2/token');
    assert.equal(s.baseUrl, 'http://127.0.0.1:8080');
    assert.equal(s.environments, undefined);
  });

  it('says what to set when something is missing or wrong', () => {
    const complete = { SLIPWAY_URL: 'http://x', SLIPWAY_ORG: 'o', SLIPWAY_CLIENT_ID: 'c', SLIPWAY_CLIENT_SECRET: 's', SLIPWAY_SCOPE: 'openid' };
    const without = (name: keyof typeof complete) => Object.fromEntries(Object.entries(complete).filter(([k]) => k !== name));
    for (const [flags, env, message] of [
      [{}, without('SLIPWAY_URL'), /--url \(SLIPWAY_URL\) is required/],
      [{}, without('SLIPWAY_ORG'), /--org \(SLIPWAY_ORG\) is required/],
      [{}, without('SLIPWAY_CLIENT_SECRET'), /--client-secret \(SLIPWAY_CLIENT_SECRET\) is required/],
      [{}, without('SLIPWAY_SCOPE'), /--scope \(SLIPWAY_SCOPE\) is required/],
      [{ url: 'ftp://x' }, complete, /--url \(SLIPWAY_URL\) must be an http\(s\) URL/],
      [{ concurrency: '0' }, complete, /--concurrency .* from 1 to 64, got "0"/],
      [{ 'reconcile-seconds': '1.5' }, complete, /--reconcile-seconds \(SLIPWAY_RUNNER_RECONCILE_SECONDS\) .* from 1 to 3600, got "1.5"/],
      [{ 'log-level': 'loud' }, complete, /--log-level .* must be one of/],
      // An environment given empty (`--environment "$ENV"`, ENV unset) is not every environment.
      [{ environment: [''] as string[] }, complete, /^--environment is given but names no environment/],
      [{ environment: ['staging', ' , '] as string[] }, complete, /^--environment is given but names no environment/],
      [{}, { ...complete, SLIPWAY_ENVIRONMENTS: '' }, /^SLIPWAY_ENVIRONMENTS is given but names no environment; name one, or leave it out/],
    ] as const) {
      assert.throws(() => runnerSettings(flags, env), (e: unknown) => e instanceof UsageError && message.test(e.message));
    }
    assert.throws(() => runnerSettings({ credentials: 'creds.json' }, {}, read('{ not json')), (e: unknown) => e instanceof UsageError && /--credentials creds\.json:/.test(e.message));
    assert.throws(() => runnerSettings({ credentials: 'creds.json' }, {}, read(['a'])), (e: unknown) => e instanceof UsageError && /JSON object/.test(e.message));
    // `service-user create --json > creds.json` that failed: the shell emptied the file before it ran.
    assert.throws(() => runnerSettings({ credentials: 'creds.json' }, {}, read('')), (e: unknown) => e instanceof UsageError && /^--credentials creds\.json is empty: a service-user create --json > creds\.json that failed/.test(e.message));
  });
});
