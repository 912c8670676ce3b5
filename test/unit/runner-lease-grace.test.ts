// When the lease sweep may expire leases again after the database was out of reach: a whole lease
// after this node finds it back, not after it last found it gone (which may be long before, when
// no sweep ran in between: a process descheduled, a sweep's statement waiting on the network). The database
// here is a stand-in that can be made unreachable at will, and the clock is moved by hand: what is
// checked is which statements the sweep sends, a probe or the expiry's.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import {
  DummyDriver, Kysely, SqliteAdapter, SqliteIntrospector, SqliteQueryCompiler, type CompiledQuery, type DatabaseConnection, type QueryResult,
} from 'kysely';
import { clockOffset, setClockOffset } from '../../src/platform/clock.js';
import type { Schema } from '../../src/platform/db/schema.js';
import { createRunnerService, type RunnerDeps } from '../../src/modules/runner/runner.service.js';

const LEASE_SECONDS = 3;

/** A database that answers every statement with no rows, or refuses the connection while `down`. */
function standIn() {
  const state = { down: false, statements: [] as string[] };
  const connection: DatabaseConnection = {
    async executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
      if (state.down) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      state.statements.push(query.sql);
      return { rows: [] };
    },
    async *streamQuery() {
      throw new Error('not used');
    },
  };
  class Driver extends DummyDriver {
    override async acquireConnection(): Promise<DatabaseConnection> {
      return connection;
    }
  }
  const db = new Kysely<Schema>({
    dialect: { createAdapter: () => new SqliteAdapter(), createDriver: () => new Driver(), createIntrospector: (k) => new SqliteIntrospector(k), createQueryCompiler: () => new SqliteQueryCompiler() },
  });
  return { db, state };
}

describe('lease sweep after the database was out of reach', () => {
  const offsetBefore = clockOffset();
  after(() => setClockOffset(offsetBefore));
  const later = (ms: number) => setClockOffset(clockOffset() + ms);

  function service() {
    const { db, state } = standIn();
    const runner = createRunnerService({
      db, dialect: 'sqlite', leaseSeconds: LEASE_SECONDS, maxAttempts: 3, hostTimeoutSeconds: 60,
      secrets: { resolveValues: async () => { throw new Error('not used'); } },
      signals: { notify: () => {} } as unknown as RunnerDeps['signals'],
      runners: { heard: async () => {} },
    });
    /** What the next sweep sent: a probe (`select 1`) only, or the expiry's statements. */
    const sweep = async (): Promise<'probe' | 'expiry'> => {
      state.statements.length = 0;
      await runner.sweep();
      return state.statements.length === 1 && /^select 1$/i.test(state.statements[0]!.trim()) ? 'probe' : 'expiry';
    };
    return { runner, state, sweep };
  }

  it('probes until a lease after the database is found back, however long ago it was last found gone (by the sweep)', async () => {
    const { state, sweep } = service();
    assert.equal(await sweep(), 'probe', 'in its first lease after the start');
    later(LEASE_SECONDS * 1000 + 1);
    assert.equal(await sweep(), 'expiry');

    state.down = true;
    await assert.rejects(sweep(), { code: 'ECONNREFUSED' });
    // Longer than a lease without a sweep, then the database answers again.
    later(10_000);
    state.down = false;
    assert.equal(await sweep(), 'probe', 'found back now: the runners\' retried heartbeats land first');
    later(LEASE_SECONDS * 1000 - 500);
    assert.equal(await sweep(), 'probe');
    later(501);
    assert.equal(await sweep(), 'expiry');
  });
});
