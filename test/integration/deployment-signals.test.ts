// Waking claims across PostgreSQL nodes when the LISTEN connection goes silent: no error comes from
// a connection whose peer stopped answering (a network dropping packets, a frozen server), so the
// signals ask it, and replace it when it does not answer. Between two nodes, one of them reaching
// PostgreSQL through a TCP proxy whose open connections the test can freeze (they stay open, nothing passes).
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { createDeploymentSignals, type DeploymentSignals } from '../../src/modules/deployments/deployment-signals.js';
import { openDatabase, type Database } from '../../src/platform/db/database.js';
import { createLogger } from '../../src/platform/logging.js';
import { eventually } from '../support/deployments.js';
import { TEST_DB, tempDir, testDatabase } from '../support/harness.js';
import { createTcpProxy } from '../support/tcp-proxy.js';

describe('deployment signals over a LISTEN connection gone silent', { skip: TEST_DB !== 'postgres' ? 'PostgreSQL only: SQLite has no LISTEN connection' : false }, () => {
  let drop: () => Promise<void>;
  let database: Database;
  let url: URL;
  const lines: Array<{ level: number; msg: string; err?: { message?: string } }> = [];
  const logger = createLogger('info', new Writable({ write: (chunk, _e, done) => { lines.push(JSON.parse(String(chunk))); done(); } }));
  // Claims would poll every 10 minutes: only a signal, or the replaced connection, wakes them here.
  const POLL_MS = 600_000;

  before(async () => {
    const db = await testDatabase();
    drop = db.drop;
    url = new URL(db.url!);
    database = openDatabase({ databaseUrl: db.url, dataDir: tempDir() });
  });
  after(async () => {
    await database.close();
    await drop();
  });

  /** Two nodes: `viaRelay` listens through a proxy that can freeze it; `direct` does not. Both notify through the pool. */
  async function nodes() {
    const hop = createTcpProxy();
    const relayed = new URL(url);
    relayed.hostname = '127.0.0.1';
    relayed.port = String(await hop.open(url.hostname, Number(url.port)));
    const make = (databaseUrl: string): DeploymentSignals => createDeploymentSignals({
      db: database.db, dialect: 'postgres', databaseUrl, logger, pollMs: POLL_MS, pingEveryMs: 200, pingDeadlineMs: 400,
    });
    const viaRelay = make(relayed.href);
    const direct = make(url.href);
    return {
      hop, viaRelay, direct,
      async close() {
        await Promise.all([viaRelay.close(), direct.close()]);
        await hop.cut();
      },
    };
  }

  /** Waits on `node` in `org` until woken; resolves with true when woken (a wait that polls would take POLL_MS). */
  async function listening(node: DeploymentSignals, other: DeploymentSignals, org: string): Promise<void> {
    // Up once a notify from the other node arrives.
    await eventually('the LISTEN connection to be up', async () => {
      const seen = node.version(org);
      const woken = node.wait(org, seen, 1_000);
      other.notify(org);
      await woken;
      return node.version(org) > seen ? true : undefined;
    });
  }

  it('finds a silent LISTEN connection, replaces it, and wakes the claims waiting meanwhile', async () => {
        const n = await nodes();
    try {
      const org = 'org_silent';
      await listening(n.viaRelay, n.direct, org);
      n.hop.freezeOpen();
      const seen = n.viaRelay.version(org);
      const waiting = n.viaRelay.wait(org, seen, POLL_MS);
      // Told while its connection is silent: the notification never arrives over it.
      n.direct.notify(org);
      await waiting;
      assert.ok(n.viaRelay.version(org) > seen, 'woken by a signal, not by the poll');
      const lost = await eventually('the loss to be logged', async () => lines.find((l) => l.msg.startsWith('deployment signal connection lost')));
      assert.match(lost.err?.message ?? '', /did not answer within 400 ms/);
      // The new connection listens: a later notify wakes a claim waiting on it.
      await listening(n.viaRelay, n.direct, org);
    } finally {
      await n.close();
    }
  });

  it('still tells the other nodes while its own LISTEN connection is silent, and stops at once', async () => {
    const n = await nodes();
    try {
      const org = 'org_telling';
      await listening(n.viaRelay, n.direct, org);
      await listening(n.direct, n.viaRelay, org);
      n.hop.freezeOpen();
      for (let i = 0; i < 3; i++) {
        const seen = n.direct.version(org);
        const woken = n.direct.wait(org, seen, POLL_MS);
        n.viaRelay.notify(org);
        await woken;
        assert.ok(n.direct.version(org) > seen);
      }
    } finally {
      // Ending a silent connection does not wait for PostgreSQL's answer.
      await n.close();
    }
  });
});
