// The claims' wake-up counters of one process: bounded however many organizations it hears of,
// and never read the same after a signal, dropped or not, so that no claim waits through one.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createDeploymentSignals } from '../../src/modules/deployments/deployment-signals.js';
import { createLogger } from '../../src/platform/logging.js';
import type { Db } from '../../src/platform/db/database.js';

/** Signals of one SQLite process: no database is asked, nothing goes to other nodes. */
const local = () => createDeploymentSignals({ db: undefined as unknown as Db, dialect: 'sqlite', databaseUrl: null, logger: createLogger('silent'), pollMs: 60_000 });

describe('deployment signals', () => {
  it('keep a bounded number of counters however many organizations are signalled, and those claims wait in', async () => {
    const signals = local();
    try {
      const waiting = signals.wait('org-waited-in', signals.version('org-waited-in'), 60_000);
      assert.equal(signals.waiting('org-waited-in'), 1);
      for (let i = 0; i < 25_000; i++) signals.notify(`org-${i}`);
      assert.equal(signals.counts('org-24999'), true, 'the last one signalled');
      assert.equal(signals.counts('org-0'), false, 'dropped');
      const counted = Array.from({ length: 25_000 }, (_, i) => signals.counts(`org-${i}`)).filter(Boolean).length;
      assert.ok(counted <= 10_000, `${counted} counters kept`);
      // The waiting claim is woken by its organization's signal, dropped counters or not.
      signals.notify('org-waited-in');
      assert.equal(signals.waiting('org-waited-in'), 0);
      await waiting;
    } finally {
      await signals.close();
    }
  });

  it('never reads a counter the same after a signal, whether or not it was dropped meanwhile', async () => {
    const signals = local();
    try {
      for (const [read, between] of [
        ['never signalled', () => {}],
        ['signalled before', () => {}],
        ['dropped', () => { for (let i = 0; i < 10_001; i++) signals.notify(`crowd-${i}`); }],
      ] as const) {
        const org = `org-${read}`;
        if (read === 'signalled before') signals.notify(org);
        const seen = signals.version(org);
        signals.notify(org);
        between();
        assert.notEqual(signals.version(org), seen, read);
        // A claim that read `seen` before the signal does not wait.
        const waited = signals.wait(org, seen, 60_000);
        assert.equal(signals.waiting(org), 0, read);
        await waited;
      }
    } finally {
      await signals.close();
    }
  });

  it('reads a forgotten organization\'s counter as none read before, and wakes its claims', async () => {
    const signals = local();
    try {
      signals.notify('gone');
      const seen = signals.version('gone');
      const waiting = signals.wait('gone', seen, 60_000);
      assert.equal(signals.waiting('gone'), 1);
      signals.forget('gone');
      assert.equal(signals.waiting('gone'), 0);
      await waiting;
      assert.equal(signals.counts('gone'), false);
      assert.notEqual(signals.version('gone'), seen);
    } finally {
      await signals.close();
    }
  });
});
