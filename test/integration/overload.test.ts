// An overloaded server (its event loop lagging past SLIPWAY_MAX_EVENT_LOOP_DELAY_MS) refuses new
// requests with a 503 problem and Retry-After instead of queueing them, keeps answering liveness,
// and serves again once it has caught up.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import { clientCredentialsGrant, startServer, type TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';

/** Busy work in slices with a turn of the event loop between them, as a server drowning in requests would be. */
async function lag(ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const slice = Date.now() + 150;
    while (Date.now() < slice) { /* busy */ }
    await nextTurn();
  }
}

describe('overload protection', () => {
  let server: TestServer;
  before(async () => { server = await startServer({ env: { SLIPWAY_MAX_EVENT_LOOP_DELAY_MS: '50' } }); });
  after(async () => { await server.close(); });

  // The server samples its event-loop delay once a second.
  const measuredDelay = () => server.slipway.server.memoryUsage().eventLoopDelay;

  it('answers 503 with Retry-After while the event loop lags, keeps /healthz up, and recovers', async () => {
    // Readings taken in the first two seconds after start measure start-up, and refuse nothing.
    await sleep(2_100);
    const deadline = Date.now() + 20_000;
    while (measuredDelay() <= 50) {
      assert.ok(Date.now() < deadline, 'the server noticed the lag within 20 s');
      await lag(300);
    }
    // Sent while the lag goes on, so that they meet the overloaded reading.
    const api = server.owner.http.get('/v1/orgs');
    const token = clientCredentialsGrant(`${server.url}/oauth/v2/token`, server.bootstrap, server.bootstrap.scope);
    const live = server.http().get('/healthz');
    const ready = server.http().get('/readyz');
    await lag(300);

    const refused = await api;
    const problem = assertProblem(refused, 503, 'unavailable');
    assert.match(String(problem.detail), /SLIPWAY_MAX_EVENT_LOOP_DELAY_MS/);
    assert.equal(refused.headers.get('retry-after'), '2');
    // The token endpoint says it in OAuth's words.
    const tokenAnswer = await token;
    assert.equal(tokenAnswer.status, 503);
    assert.equal(((await tokenAnswer.json()) as { error?: string }).error, 'temporarily_unavailable');
    assert.equal((await live).status, 200);
    assert.equal((await ready).status, 503);

    while (measuredDelay() > 50) {
      assert.ok(Date.now() < deadline + 10_000, 'the server caught up within 10 s');
      await sleep(200);
    }
    assert.equal((await server.owner.http.get('/v1/orgs')).status, 200);
    assert.deepEqual(server.undeclared, []);
  });
});
