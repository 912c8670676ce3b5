// Reference "floor" for bulk secret writes: the least work that honestly does
// the job. Parse the JSON body, seal each secret's values with AES-256-GCM
// (32-byte key, fresh 12-byte random nonce), insert one row per secret
// (name, ciphertext) in a single better-sqlite3 transaction into a SQLite file
// in WAL mode with synchronous=FULL, as Slipway by default. No validation beyond JSON parsing, no
// versions, no events, no logging.
//
// One seal per secret (over its JSON-encoded values map), because that is what
// one (name, ciphertext) row holds and what DESIGN.md §6 prescribes ("each
// version's values sealed"). Sealing every key separately would double the
// cipher work: ~7 µs per createCipheriv, i.e. ~7 ms more per 1,000 secrets.

import { createCipheriv, randomBytes } from 'node:crypto';
import { SQLite as Database } from '../../src/platform/db/sqlite-library.js';
import Fastify from 'fastify';
import { announceListening, requireEnv } from './child.js';

interface BulkBody {
  secrets: { name: string; values: Record<string, string> }[];
}

const db = new Database(requireEnv('BENCH_FLOOR_DB'));
db.pragma('journal_mode = WAL');
db.pragma('synchronous = FULL');
db.exec(`CREATE TABLE IF NOT EXISTS secrets (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  ciphertext BLOB NOT NULL
)`);
const insert = db.prepare('INSERT INTO secrets (name, ciphertext) VALUES (?, ?)');

const key = randomBytes(32);

/** nonce (12) ‖ ciphertext ‖ tag (16) */
function seal(plaintext: string): Buffer {
  const nonce = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return Buffer.concat([nonce, body, cipher.getAuthTag()]);
}

const insertAll = db.transaction((rows: [string, Buffer][]) => {
  for (const [name, ciphertext] of rows) insert.run(name, ciphertext);
});

const app = Fastify({ logger: false, bodyLimit: 16 * 1024 * 1024 });
app.post<{ Body: BulkBody }>('/secrets', async (request, reply) => {
  const rows: [string, Buffer][] = request.body.secrets.map((s) => [s.name, seal(JSON.stringify(s.values))]);
  insertAll(rows);
  return reply.code(201).send({ created: rows.length });
});

await app.listen({ host: '127.0.0.1', port: 0 });
const address = app.server.address();
announceListening(typeof address === 'object' && address ? address.port : 0, async () => {
  await app.close();
  db.close();
});
