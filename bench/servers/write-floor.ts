// Reference "floors" for single writes: the least work that honestly does what Slipway's PATCH
// of a secret and its deployment creation do, so that their rows can say how far Slipway is
// from what any implementation of the same job costs on this machine (bench/RESULTS.md).
//
// Honest means: what the job itself requires, and nothing of Slipway's contract besides.
//   PATCH /secrets/:name   {"set": {...}}  find the secret with its current version, open its
//     values (AES-256-GCM), set the keys, seal the result, insert the new version (versions are
//     kept: a secret's history is part of the job), bump the secret, append an event; answer the
//     new version's metadata.
//   POST /deployments      {"service", "environment"}  find both by name, pin the current
//     version of each secret the service uses, insert the queued deployment with that snapshot
//     (indexed for a runner's claim by environment and state), append an event; answer the
//     deployment.
// No authentication, validation beyond JSON parsing, logging, request ids, rate limits or
// idempotency; the minimum of tables and indexes. SQLite in WAL mode with synchronous=FULL, as
// Slipway runs it, and with the same group commit (transactions that arrive together share one
// COMMIT, each in a savepoint), so that the floor is as fast as this machine allows.

import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import Fastify from 'fastify';
import { SQLite as Database } from '../../src/platform/db/sqlite-library.js';
import { announceListening, requireEnv } from './child.js';

const db = new Database(requireEnv('BENCH_WRITE_FLOOR_DB'));
db.pragma('journal_mode = WAL');
db.pragma('synchronous = FULL');
db.exec(`
  CREATE TABLE IF NOT EXISTS secrets (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, version INTEGER NOT NULL);
  CREATE TABLE IF NOT EXISTS secret_versions (
    secret_id INTEGER NOT NULL, version INTEGER NOT NULL, ciphertext BLOB NOT NULL, PRIMARY KEY (secret_id, version)
  ) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, type TEXT NOT NULL, subject TEXT NOT NULL, data TEXT NOT NULL, created_at TEXT NOT NULL);
  CREATE TABLE IF NOT EXISTS environments (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
  CREATE TABLE IF NOT EXISTS services (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, spec TEXT NOT NULL);
  CREATE TABLE IF NOT EXISTS deployments (
    id INTEGER PRIMARY KEY, service_id INTEGER NOT NULL, environment_id INTEGER NOT NULL, state TEXT NOT NULL,
    snapshot TEXT NOT NULL, created_at TEXT NOT NULL
  );
  CREATE INDEX IF NOT EXISTS deployments_queue ON deployments (environment_id, state, id);
`);

const key = randomBytes(32);
const aad = (secretId: number, version: number): Buffer => Buffer.from(`${secretId}:${version}`);

/** nonce (12) ‖ tag (16) ‖ ciphertext */
function seal(values: Record<string, string>, secretId: number, version: number): Buffer {
  const nonce = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  cipher.setAAD(aad(secretId, version));
  const body = Buffer.concat([cipher.update(JSON.stringify(values), 'utf8'), cipher.final()]);
  return Buffer.concat([nonce, cipher.getAuthTag(), body]);
}

function open(sealed: Buffer, secretId: number, version: number): Record<string, string> {
  const decipher = createDecipheriv('aes-256-gcm', key, sealed.subarray(0, 12));
  decipher.setAAD(aad(secretId, version));
  decipher.setAuthTag(sealed.subarray(12, 28));
  return JSON.parse(Buffer.concat([decipher.update(sealed.subarray(28)), decipher.final()]).toString('utf8')) as Record<string, string>;
}

const statements = {
  begin: db.prepare('BEGIN IMMEDIATE'),
  commit: db.prepare('COMMIT'),
  savepoint: db.prepare('SAVEPOINT job'),
  release: db.prepare('RELEASE job'),
  rollbackJob: db.prepare('ROLLBACK TO job'),
  secretWithCurrent: db.prepare<[string], { id: number; version: number; ciphertext: Buffer }>(
    'SELECT s.id, s.version, v.ciphertext FROM secrets s JOIN secret_versions v ON v.secret_id = s.id AND v.version = s.version WHERE s.name = ?'),
  secretVersion: db.prepare<[string], { version: number }>('SELECT version FROM secrets WHERE name = ?'),
  insertSecret: db.prepare('INSERT INTO secrets (name, version) VALUES (?, 1)'),
  insertVersion: db.prepare('INSERT INTO secret_versions (secret_id, version, ciphertext) VALUES (?, ?, ?)'),
  bump: db.prepare('UPDATE secrets SET version = ? WHERE id = ? AND version = ?'),
  insertEvent: db.prepare('INSERT INTO events (type, subject, data, created_at) VALUES (?, ?, ?, ?)'),
  environment: db.prepare<[string], { id: number }>('SELECT id FROM environments WHERE name = ?'),
  insertEnvironment: db.prepare('INSERT INTO environments (name) VALUES (?)'),
  service: db.prepare<[string], { id: number; spec: string }>('SELECT id, spec FROM services WHERE name = ?'),
  insertService: db.prepare('INSERT INTO services (name, spec) VALUES (?, ?)'),
  insertDeployment: db.prepare("INSERT INTO deployments (service_id, environment_id, state, snapshot, created_at) VALUES (?, ?, 'queued', ?, ?)"),
};

// Group commit: each write runs in a savepoint of the open transaction, and the transaction is
// committed once the event loop has taken in what else arrived together.
let inTransaction = false;
let waiting: Array<() => void> = [];
let flushScheduled = false;

function flush(): void {
  flushScheduled = false;
  if (!inTransaction) return;
  statements.commit.run();
  inTransaction = false;
  const done = waiting;
  waiting = [];
  for (const resolve of done) resolve();
}

function write<T>(work: () => T): Promise<T> {
  if (!inTransaction) {
    statements.begin.run();
    inTransaction = true;
  }
  statements.savepoint.run();
  let result: T;
  try {
    result = work();
  } catch (error) {
    statements.rollbackJob.run();
    statements.release.run();
    throw error;
  } finally {
    if (!flushScheduled) {
      flushScheduled = true;
      setImmediate(flush);
    }
  }
  statements.release.run();
  return new Promise<T>((resolve) => waiting.push(() => resolve(result)));
}

class NotFound extends Error {}

interface SecretRef {
  secret: string;
}

const app = Fastify({ logger: false });
app.setErrorHandler((error, _request, reply) => {
  void reply.code(error instanceof NotFound ? 404 : 500).send({ error: (error as Error).message });
});

// Set-up, not measured: secrets, an environment and a service to deploy.
app.post<{ Body: { secrets?: { name: string; values: Record<string, string> }[]; environment?: string; service?: { name: string; secrets: SecretRef[] } } }>(
  '/setup', async (request, reply) => {
    const { secrets = [], environment, service } = request.body;
    await write(() => {
      const now = new Date().toISOString();
      for (const s of secrets) {
        const id = Number(statements.insertSecret.run(s.name).lastInsertRowid);
        statements.insertVersion.run(id, 1, seal(s.values, id, 1));
        statements.insertEvent.run('secret.created', `secret:${id}`, JSON.stringify({ name: s.name, version: 1, keys: Object.keys(s.values).sort() }), now);
      }
      if (environment !== undefined) statements.insertEnvironment.run(environment);
      if (service !== undefined) statements.insertService.run(service.name, JSON.stringify({ secrets: service.secrets }));
    });
    return reply.code(201).send({ ok: true });
  });

app.patch<{ Params: { name: string }; Body: { set: Record<string, string> } }>('/secrets/:name', async (request) => {
  const { name } = request.params;
  const { set } = request.body;
  return write(() => {
    const now = new Date().toISOString();
    const row = statements.secretWithCurrent.get(name);
    if (row === undefined) throw new NotFound(`no secret ${name}`);
    const values = { ...open(row.ciphertext, row.id, row.version), ...set };
    const version = row.version + 1;
    const keys = Object.keys(values).sort();
    statements.insertVersion.run(row.id, version, seal(values, row.id, version));
    statements.bump.run(version, row.id, row.version);
    statements.insertEvent.run('secret.updated', `secret:${row.id}`, JSON.stringify({ name, version, keys, set: Object.keys(set) }), now);
    return { name, version, keys, updatedAt: now, result: 'updated' };
  });
});

app.post<{ Body: { service: string; environment: string } }>('/deployments', async (request, reply) => {
  const deployment = await write(() => {
    const now = new Date().toISOString();
    const service = statements.service.get(request.body.service);
    const environment = statements.environment.get(request.body.environment);
    if (service === undefined || environment === undefined) throw new NotFound('no such service or environment');
    const spec = JSON.parse(service.spec) as { secrets: SecretRef[] };
    const secrets = spec.secrets.map((ref) => {
      const found = statements.secretVersion.get(ref.secret);
      if (found === undefined) throw new NotFound(`no secret ${ref.secret}`);
      return { secret: ref.secret, version: found.version };
    });
    const snapshot = JSON.stringify({ spec, secrets });
    const id = Number(statements.insertDeployment.run(service.id, environment.id, snapshot, now).lastInsertRowid);
    statements.insertEvent.run('deployment.created', `deployment:${id}`, JSON.stringify({ service: request.body.service, environment: request.body.environment, state: 'queued' }), now);
    return { id, service: request.body.service, environment: request.body.environment, state: 'queued', secrets, createdAt: now };
  });
  return reply.code(201).send(deployment);
});

await app.listen({ host: '127.0.0.1', port: 0 });
const address = app.server.address();
announceListening(typeof address === 'object' && address ? address.port : 0, async () => {
  await app.close();
  if (inTransaction) flush();
  db.close();
});
