// The metrics registry on its own: a database that does not answer leaves the deployment gauges
// unread within a bound and the rest served; a scrape reads the database once for both gauges;
// label values stay few whatever the requests.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createMetrics, type PendingDeployments } from '../../src/platform/metrics.js';

describe('metrics', () => {
  it('serves the rest when the database does not answer, and the deployment gauges unread', async () => {
    const metrics = createMetrics({ version: '1.2.3' });
    metrics.readPendingDeployments(() => new Promise<PendingDeployments>(() => {}));
    metrics.request('GET', '/v1/orgs', 200, 0.002);
    const started = Date.now();
    const text = await metrics.registry.metrics();
    assert.ok(Date.now() - started < 10_000, 'bounded, not the database\'s own timeout');
    assert.match(text, /^slipway_http_requests_total\{method="GET",route="\/v1\/orgs",status="200"\} 1$/m);
    assert.doesNotMatch(text, /^slipway_deployments\{/m);
    assert.match(text, /^slipway_deployment_oldest_queued_age_seconds NaN$/im);
  });

  it('reads the database once a scrape, for both gauges', async () => {
    const metrics = createMetrics({ version: '1.2.3' });
    let reads = 0;
    metrics.readPendingDeployments(async () => {
      reads++;
      return { queued: 3, inProgress: 1, oldestQueuedAt: new Date(Date.now() - 5_000).toISOString() };
    });
    const text = await metrics.registry.metrics();
    assert.equal(reads, 1);
    assert.match(text, /^slipway_deployments\{state="queued"\} 3$/m);
    assert.match(text, /^slipway_deployments\{state="in_progress"\} 1$/m);
    const age = Number(/^slipway_deployment_oldest_queued_age_seconds (\S+)$/m.exec(text)?.[1]);
    assert.ok(age >= 5 && age < 60, String(age));
    await metrics.registry.metrics();
    assert.equal(reads, 2, 'and again at the next');
  });

  it('labels no path and no unknown method', async () => {
    const metrics = createMetrics({ version: '1.2.3' });
    metrics.request('PROPFIND', undefined, 404, 0.001);
    metrics.request('GET', '', 404, 0.001);
    const text = await metrics.registry.metrics();
    assert.match(text, /^slipway_http_requests_total\{method="other",route="\(unmatched\)",status="404"\} 1$/m);
    assert.match(text, /^slipway_http_requests_total\{method="GET",route="\(unmatched\)",status="404"\} 1$/m);
  });
});
