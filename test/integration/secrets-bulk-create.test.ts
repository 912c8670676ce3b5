// POST /v1/orgs/{orgId}/secrets, exactly as the spec and the design fix it.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/harness.js';

describe('bulk create secrets', () => {
  let server: TestServer;
  before(async () => { server = await startServer(); });
  after(async () => { await server.close(); });

  it('creates every secret in request order with version 1 and key names only', async () => {
    const res = await server.owner.http.post('/v1/orgs/default/secrets', {
      secrets: [
        { name: 'payments', values: { STRIPE_KEY: 'sk_live_1', WEBHOOK_SECRET: 'whsec_2' } },
        { name: 'database', values: { URL: 'postgres://x' } },
      ],
    });
    assert.equal(res.status, 201);
    assert.deepEqual(res.body.secrets.map((s: any) => [s.name, s.version, s.keys]), [
      ['payments', 1, ['STRIPE_KEY', 'WEBHOOK_SECRET']],
      ['database', 1, ['URL']],
    ]);
    for (const s of res.body.secrets) {
      assert.match(s.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      assert.equal(s.updatedAt, s.createdAt);
      assert.deepEqual(Object.keys(s).sort(), ['createdAt', 'keys', 'name', 'updatedAt', 'version']);
    }
    assert.ok(!res.text.includes('sk_live_1'));
  });

  it('creates 1,000 secrets in one request', async () => {
    const secrets = Array.from({ length: 1000 }, (_, i) => ({ name: `bulk-${i}`, values: { A: `a${i}`, B: `b${i}` } }));
    const res = await server.owner.http.post('/v1/orgs/default/secrets', { secrets });
    assert.equal(res.status, 201);
    assert.equal(res.body.secrets.length, 1000);
    assert.deepEqual(res.body.secrets.map((s: any) => s.name), secrets.map((s) => s.name));
  });
});
