// `slipway keys …`: the master key and the token signing key, on the same database (and data
// directory) as the servers, which keep serving while these run.
import { pino } from 'pino';
import { looseKeyFileWarning, readKeyFile } from '../platform/crypto/master-key.js';
import { createLogger } from '../platform/logging.js';
import type { KeysService } from '../modules/keys/keys.service.js';
import type { RewrapProgress } from '../modules/keys/master-key-rotation.js';
import { parse, printWarning, UsageError, wholeNumberFlag, type Parsed } from './args.js';
import { assertDatabaseExists } from './commands.js';
import { printFields, printJson, printTable } from './output.js';

type Env = Record<string, string | undefined>;

export const KEYS_HELP = `slipway keys — master key and token signing key

usage:
  slipway keys status [--json]
  slipway keys rotate-master [--new-key-file FILE] [--batch-size N] [--pause-ms MS] [--json]
  slipway keys rotate-signing [--revoke-previous] [--json]
  slipway keys revoke-signing --kid=KID [--json]

status          the current master key, how many rows each master key wraps, and every signing
                key (active; staged: the next one, published ahead; retired: still in the JWKS;
                expired and revoked: gone from it).
rotate-master   re-wraps every organization data key, signing key and instance key under a new
                master key, --batch-size rows (default 100) per transaction, waiting --pause-ms
                (default 0) between batches. Servers keep serving throughout, accepting the old
                and the new key. Interrupted? Run it again: it continues where it stopped.
                The key file is one data directory's: nodes sharing a PostgreSQL database
                rotate with SLIPWAY_MASTER_KEY instead (below).
rotate-signing  new tokens are signed with the next key, published in the JWKS ahead since the
                last rotation (by every running server within a minute), and a new next key is
                published; the old key stays in the JWKS until every token it signed has
                expired (SLIPWAY_TOKEN_TTL after the rotation, plus that minute).
                --revoke-previous: every other key, the next one included, is revoked instead
                and a new key signs (a key that leaked):
                within a minute no node publishes it or accepts a token it signed; clients get
                401 and request new tokens.
revoke-signing  revokes a retired key the same way (the key that signs: rotate-signing
                --revoke-previous).

Master key in the key file (<data dir>/master.key, the default):
  slipway keys rotate-master --data-dir DIR
  generates a new key (or takes the one in --new-key-file), writes it first in the key file with
  the old keys after it, re-wraps every row, then removes the old keys from the file. Servers on
  that data directory wrap with the new key from their next write on. Back the file up afterwards.

Either way, backups taken before a rotation open only with the key(s) it retired: keep a copy of
the old key with them (restoring one needs it as a line at the end of the key file, after the current
key, or in SLIPWAY_MASTER_KEY_PREVIOUS beside SLIPWAY_MASTER_KEY, the current key).

Master key in SLIPWAY_MASTER_KEY (SLIPWAY_MASTER_KEY_PREVIOUS: comma-separated keys accepted
besides it, never used to wrap):
  1. Make a new key:  openssl rand -base64 32
  2. Let every node accept it: restart the nodes one at a time with
       SLIPWAY_MASTER_KEY=<old> SLIPWAY_MASTER_KEY_PREVIOUS=<new>      (a single node: skip this)
  3. Switch every node to it: restart them one at a time with
       SLIPWAY_MASTER_KEY=<new> SLIPWAY_MASTER_KEY_PREVIOUS=<old>
  4. Re-wrap everything (interrupted? run the same command again):
       SLIPWAY_MASTER_KEY=<new> SLIPWAY_MASTER_KEY_PREVIOUS=<old> slipway keys rotate-master
     or, with the new key in a file (one base64 line, mode 0600):
       SLIPWAY_MASTER_KEY=<old> slipway keys rotate-master --new-key-file FILE
  5. Once it reports done and slipway keys status shows no row under the old key (a node still
     on the old key wraps new rows under it: switch it and run step 4 again), remove
     SLIPWAY_MASTER_KEY_PREVIOUS from every node, restart them one at a time, destroy the old key
     (but for the copy kept with earlier backups). A node started without a key that rows are
     still wrapped under refuses to start, naming the key.
`;

/**
 * Runs a keys command on the key store. `status` and `rotate-master` open on a database with rows
 * under a master key not given (status says which; rotate-master checks against the keys it rotates
 * with); the signing-key commands (`everyKey`) refuse it first, as every other command does, since
 * what they wrap under a mistyped key no node holding the real one could open.
 */
async function withKeys<T>(parsed: Parsed, run: (keys: KeysService) => Promise<T>, opts: { everyKey?: boolean } = {}): Promise<T> {
  const config = parsed.config();
  assertDatabaseExists(config);
  // Rotations are instance operations worth an info line each (on stderr: stdout is the result).
  // Loaded only when a command gets this far: help and usage errors answer without them.
  const [{ openKeyStore }, { createKeysService }, { refuseUnheldMasterKeys }] = await Promise.all([import('../app.js'), import('../modules/keys/keys.service.js'), import('../modules/keys/held-keys.js')]);
  // The key store alone, which unwraps nothing: it opens on a database whose instance keys are under
  // a master key not given (a backup restored without its key), so that status can say which.
  const core = await openKeyStore(config, { logger: createLogger(config.logLevel, pino.destination(2)), migrate: 'require' });
  try {
    if (opts.everyKey === true) await refuseUnheldMasterKeys(core.db, core.ring);
    return await run(createKeysService({ config, database: core.database, ring: core.ring, signingKeys: core.keys, logger: core.logger }));
  } finally {
    await core.close();
  }
}

function newKeyFrom(file: string | boolean | undefined, json: boolean): Buffer | undefined {
  if (typeof file !== 'string') return undefined;
  let keys: Buffer[];
  try {
    keys = readKeyFile(file);
  } catch (error) {
    throw new UsageError(`--new-key-file: ${(error as Error).message}`);
  }
  if (keys.length !== 1) throw new UsageError(`--new-key-file ${file} must hold exactly one key`);
  const loose = looseKeyFileWarning(file);
  if (loose !== null) printWarning(json, `--new-key-file: ${loose}`);
  return keys[0];
}

export async function keysCommand(argv: string[], env: Env): Promise<number> {
  const [sub, ...rest] = argv;
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(KEYS_HELP);
    return 0;
  }
  switch (sub) {
    case 'status': {
      const p = parse(rest, {}, env);
      const status = await withKeys(p, (keys) => keys.status());
      if (p.values.json) {
        printJson(status);
        return 0;
      }
      const m = status.masterKey;
      // Rows under a key nobody gave (a backup restored without its key) need that key, not a rotation.
      const missing = m.usage.filter((u) => !u.configured && u.total > 0).map((u) => u.masterKeyId);
      printFields({
        'master key': m.currentId, source: m.keyFile ?? 'SLIPWAY_MASTER_KEY', accepted: m.acceptedIds.join(', '),
        ...(missing.length > 0 ? { missing: `rows under ${missing.join(', ')}, a key not given: add it to SLIPWAY_MASTER_KEY_PREVIOUS or to the key file (a line at its end); nothing else opens until then` } : {}),
        rotation: missing.length > 0 ? 'once every key is given, see whether one is still pending' : m.rotationPending ? 'unfinished: run slipway keys rotate-master' : 'none pending',
      });
      process.stdout.write('\n');
      printTable(m.usage.map((u) => ({ masterKeyId: u.masterKeyId, current: u.current, configured: u.configured, ...u.rows, total: u.total })),
        ['masterKeyId', 'current', 'configured', 'org_data_keys', 'signing_keys', 'instance_keys', 'total']);
      process.stdout.write('\n');
      printTable(status.signingKeys.map((k) => ({ ...k })), ['kid', 'state', 'createdAt', 'retiredAt', 'publishedUntil']);
      return 0;
    }
    case 'rotate-master': {
      const p = parse(rest, { 'new-key-file': { type: 'string' }, 'batch-size': { type: 'string' }, 'pause-ms': { type: 'string' } }, env);
      const json = p.values.json === true;
      const newKey = newKeyFrom(p.values['new-key-file'], json);
      const batchSize = wholeNumberFlag(p.values['batch-size'], 'batch-size', { min: 1, max: 10_000, fallback: 100 });
      const pauseMs = wholeNumberFlag(p.values['pause-ms'], 'pause-ms', { min: 0, max: 3_600_000, fallback: 0 });
      // Progress goes to stderr, as every log line of the CLI does: stdout holds only the result.
      // With --json, as a JSON line too, so that everything the command writes can be parsed.
      const progress = (r: RewrapProgress) => process.stderr.write(json
        ? `${JSON.stringify({ progress: { batch: r.batch, done: r.done, total: r.total, table: r.table } })}\n`
        : `batch ${r.batch}: ${r.done} of ${r.total} rows re-wrapped (${r.table})\n`);
      const result = await withKeys(p, (keys) => keys.rotateMaster({
        ...(newKey ? { newKey } : {}),
        batchSize,
        pauseMs,
        onProgress: progress,
      }));
      if (json) printJson(result);
      else {
        printFields({ 'master key': result.masterKeyId, previous: result.previousKeyIds.join(', ') || '(none)', 're-wrapped': result.rewrapped, resumed: result.resumed });
        for (const step of result.nextSteps) process.stdout.write(`next: ${step}\n`);
      }
      return 0;
    }
    case 'rotate-signing': {
      const p = parse(rest, { 'revoke-previous': { type: 'boolean' } }, env);
      const result = await withKeys(p, (keys) => keys.rotateSigning({ revokePrevious: p.values['revoke-previous'] === true }), { everyKey: true });
      if (p.values.json) printJson(result);
      else {
        printFields({
          'signing key': result.active.kid,
          next: `${result.next.kid} (published now, signs from the next rotation)`,
          retired: result.retired.map((k) => `${k.kid} (in the JWKS until ${k.publishedUntil})`).join(', ') || '(none)',
          ...(result.revoked.length > 0 ? { revoked: result.revoked.map((k) => k.kid).join(', ') } : {}),
        });
      }
      return 0;
    }
    case 'revoke-signing': {
      const p = parse(rest, { kid: { type: 'string' } }, env);
      const kid = p.values.kid;
      if (typeof kid !== 'string' || kid === '') throw new UsageError('revoke-signing needs --kid=KID (slipway keys status lists the keys)');
      const result = await withKeys(p, (keys) => keys.revokeSigning(kid), { everyKey: true });
      if (p.values.json) printJson(result);
      else printFields({ 'signing key': result.key.kid, state: result.key.state, revoked: result.key.revokedAt!, result: result.result });
      return 0;
    }
    case undefined:
      throw new UsageError('a keys command is needed: status, rotate-master, rotate-signing or revoke-signing; see slipway keys --help');
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(KEYS_HELP);
      return 0;
    default:
      throw new UsageError(`unknown keys command "${sub}"; see slipway keys --help`);
  }
}
