// Token signing keys: ES256, kept in the database (private part wrapped by the master key) so every
// node signs with the same key and publishes the same JWKS. Beside the key that signs, the next one
// is made ahead and published (`staged`): a rotation makes it sign at once, and every node and
// every relying party that reads the JWKS knew it long before its first token. The old key stays in
// the JWKS until every token it signed has expired.
import { createPrivateKey } from 'node:crypto';
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from 'jose';
import type { Db } from '../../platform/db/database.js';
import { errors, isAppError, type AppError } from '../../platform/errors.js';
import { MasterKeyNotHeldError, unwrapKey, wrapKey, type MasterKeyring } from '../../platform/crypto/master-key.js';
import { es256Signer } from './jws.js';
import { signingKeysRepo, type SigningKeyRow } from './signing-keys.repo.js';
import { instanceRepo } from '../instance/instance.repo.js';
import { nowMs, nowIso } from '../../platform/clock.js';
import { MAX_TOKEN_TTL_SECONDS } from '../../platform/config.js';

export const SIGNING_ALG = 'ES256';

export interface ActiveSigner {
  kid: string;
  privateKey: CryptoKey;
  /**
   * An RFC 9068 access token (`typ: at+jwt`, this key's kid) carrying the claims given as their
   * JSON text, signed through node:crypto, which needs no thread-pool hop (see jws.ts).
   */
  signAccessToken: (claimsJson: string) => string;
}

export interface KeySet {
  /**
   * What signs, or why nothing can here: the key is wrapped under a master key this process is not
   * configured with. The public keys need no unwrapping, so tokens are verified and the JWKS
   * served all the same; only issuing waits for an operator.
   */
  signer: ActiveSigner | AppError;
  /** Public JWKs of every key whose tokens may still be live, newest first. */
  publicJwks: JWK[];
}

/** Associated data of a private key wrapped under the master key (a master-key rotation re-wraps with it too). */
export const signingKeyBinding = (kid: string) => `signing-key/${kid}`;

/** How long a node keeps signing with the key it loaded: a rotation elsewhere reaches it within this. */
export const SIGNER_CACHE_MS = 60_000;

/**
 * How long a retired key stays in the JWKS: a token signed just before retirement lives a token
 * lifetime, and a node that had not yet noticed the rotation kept signing for up to a cache period.
 */
export function jwksRetentionMs(tokenTtlSeconds: number): number {
  return tokenTtlSeconds * 1000 + SIGNER_CACHE_MS;
}

/**
 * How long `row`, once retired, stays in the JWKS: by the longest token lifetime of the nodes that
 * signed with it (recorded on the key), and never less than this node's own, as before keys carried it.
 */
function retentionOf(row: Pick<SigningKeyRow, 'token_ttl_seconds'>, tokenTtlSeconds: number): number {
  return jwksRetentionMs(Math.max(row.token_ttl_seconds ?? 0, tokenTtlSeconds));
}

export type SigningKeyState = 'staged' | 'active' | 'retired' | 'expired' | 'revoked';

export interface SigningKeyInfo {
  kid: string;
  alg: string;
  createdAt: string;
  activatedAt: string | null;
  retiredAt: string | null;
  /** active signs; retired is still in the JWKS (its tokens may be live); expired and revoked are gone from it. */
  state: SigningKeyState;
  /** When a retired key leaves the JWKS (a revoked one: when it was revoked). */
  publishedUntil: string | null;
  revokedAt: string | null;
}

export function describeSigningKey(row: SigningKeyRow, tokenTtlSeconds: number, now = nowMs()): SigningKeyInfo {
  const retention = row.retired_at === null ? null : new Date(Date.parse(row.retired_at) + retentionOf(row, tokenTtlSeconds)).toISOString();
  const publishedUntil = row.revoked_at !== null && (retention === null || row.revoked_at < retention) ? row.revoked_at : retention;
  const state: SigningKeyState = row.revoked_at !== null ? 'revoked'
    : row.activated_at === null ? 'staged'
      : row.retired_at === null ? 'active'
        : Date.parse(publishedUntil!) > now ? 'retired' : 'expired';
  return { kid: row.kid, alg: row.alg, createdAt: row.created_at, activatedAt: row.activated_at, retiredAt: row.retired_at, state, publishedUntil, revokedAt: row.revoked_at };
}

/** A new key, signing from `activatedAt` (null: staged, published ahead of signing). */
export async function generateSigningKeyRow(ring: MasterKeyring, now: string, activatedAt: string | null = now): Promise<SigningKeyRow> {
  const { publicKey, privateKey } = await generateKeyPair(SIGNING_ALG, { extractable: true });
  const publicJwk = await exportJWK(publicKey);
  const kid = await calculateJwkThumbprint(publicJwk);
  const privateJwk = await exportJWK(privateKey);
  const wrapped = wrapKey(ring, Buffer.from(JSON.stringify(privateJwk)), signingKeyBinding(kid));
  return {
    kid,
    alg: SIGNING_ALG,
    public_jwk: JSON.stringify({ ...publicJwk, kid, alg: SIGNING_ALG, use: 'sig' }),
    private_sealed: wrapped.sealed,
    master_key_id: wrapped.masterKeyId,
    created_at: now,
    activated_at: activatedAt,
    retired_at: null,
    revoked_at: null,
    token_ttl_seconds: null,
  };
}

export function createSigningKeys(deps: { db: Db; ring: MasterKeyring; tokenTtlSeconds: number }) {
  let cached: { set: KeySet; loadedAt: number } | null = null;
  // The requests that find the cache expired all wait for the same read.
  let refreshing: Promise<KeySet> | null = null;
  const listeners: Array<(set: KeySet) => void> = [];
  // Reads are numbered: one that finishes after a later one was applied is not applied over it.
  let reads = 0;
  let appliedRead = 0;

  /** After a change made here: the next use reads the keys again, and no read begun before it is applied. */
  function forget(): void {
    cached = null;
    appliedRead = ++reads;
  }

  /** The signer of `row`: its private key unwrapped and made into a KeyObject, once per key. */
  async function signerOf(row: SigningKeyRow): Promise<ActiveSigner> {
    const privateJwk = JSON.parse(unwrapKey(deps.ring, row.private_sealed, row.master_key_id, signingKeyBinding(row.kid)).toString('utf8')) as JWK;
    const privateKey = (await importJWK(privateJwk, SIGNING_ALG)) as CryptoKey;
    const keyObject = createPrivateKey({ key: privateJwk as never, format: 'jwk' });
    return { kid: row.kid, privateKey, signAccessToken: es256Signer({ typ: 'at+jwt', kid: row.kid }, keyObject) };
  }

  /** The keys to publish: those listUsable gives, but for the retired ones whose tokens have all expired. */
  async function usable(): Promise<SigningKeyRow[]> {
    const now = nowMs();
    // Retired within the longest lifetime any key may carry; each then by its own.
    const rows = await signingKeysRepo.listUsable(deps.db, new Date(now - jwksRetentionMs(MAX_TOKEN_TTL_SECONDS)).toISOString());
    return rows.filter((r) => r.retired_at === null || Date.parse(r.retired_at) + retentionOf(r, deps.tokenTtlSeconds) > now);
  }

  async function load(): Promise<KeySet> {
    const read = ++reads;
    let rows = await usable();
    if (!rows.some((r) => r.activated_at !== null && r.retired_at === null) || !rows.some((r) => r.activated_at === null)) {
      await ensureActiveKey();
      rows = await usable();
    }
    const active = rows.find((r) => r.activated_at !== null && r.retired_at === null)!;
    // Most reads find the key already signing (a master-key rotation re-wraps it, the key stays the same).
    const known = cached?.set.signer;
    const signer = known !== undefined && !isAppError(known) && known.kid === active.kid ? known
      : await signerOf(active).catch((error: unknown) => {
        if (error instanceof MasterKeyNotHeldError) return errors.masterKeyMissing(error.masterKeyId, error.source === 'SLIPWAY_MASTER_KEY');
        throw error;
      });
    const set = { signer, publicJwks: rows.map((r) => JSON.parse(r.public_jwk) as JWK) };
    // Older than what is applied (or than a change this process made since it began): its caller
    // gets it, nobody else does.
    if (read < appliedRead) return cached?.set ?? set;
    appliedRead = read;
    cached = { set, loadedAt: nowMs() };
    for (const listener of listeners) listener(set);
    return set;
  }

  const activeOf = (rows: SigningKeyRow[]) => rows.filter((r) => r.activated_at !== null && r.retired_at === null);
  const stagedOf = (rows: SigningKeyRow[]) => rows.filter((r) => r.activated_at === null && r.revoked_at === null);

  /**
   * Creates the key that signs when there is none (first start, or every key retired), and the next
   * one, published ahead, when there is none (first start, a database of a Slipway that made none),
   * under a lock: nodes starting together on an empty database each made one before. Where that
   * left more than one key signing, the newest (the one servers sign with) stays and the others
   * are retired: their tokens stay valid until they expire.
   */
  async function ensureActiveKey(): Promise<void> {
    const all = await signingKeysRepo.listAll(deps.db);
    if (activeOf(all).length === 1 && stagedOf(all).length > 0) return;
    // Made before the lock is taken, which then is held for the writes only.
    const now = nowIso();
    const [fresh, next] = await Promise.all([generateSigningKeyRow(deps.ring, now), generateSigningKeyRow(deps.ring, now, null)]);
    await deps.db.transaction().execute(async (trx) => {
      await instanceRepo.lock(trx, 'signing_keys');
      const rows = await signingKeysRepo.listAll(trx);
      const active = activeOf(rows);
      if (active.length === 0) {
        await signingKeysRepo.insert(trx, fresh);
      } else if (active.length > 1) {
        const newest = active.reduce((a, b) => (b.activated_at! > a.activated_at! || (b.activated_at === a.activated_at && b.kid > a.kid) ? b : a));
        await signingKeysRepo.retireActive(trx, newest.kid, now);
      }
      if (stagedOf(rows).length === 0) await signingKeysRepo.insert(trx, next);
    });
    forget();
  }

  /**
   * Each key this process signs with carries its token lifetime before the first token (once per
   * key, or again after a failed write): the key stays published that long after it retires,
   * whatever lifetime the node that publishes it has.
   */
  const lifetimeRecorded = new Set<string>();
  const recording = new Map<string, Promise<void>>();
  function recordLifetime(kid: string): Promise<void> {
    let pending = recording.get(kid);
    if (pending === undefined) {
      pending = signingKeysRepo.recordTokenTtl(deps.db, kid, deps.tokenTtlSeconds)
        .then(() => { lifetimeRecorded.add(kid); })
        .finally(() => recording.delete(kid));
      recording.set(kid, pending);
    }
    return pending;
  }

  return {
    ensureActiveKey,
    /** The current key set; re-read every minute so a rotation on another node reaches this one. */
    async current(): Promise<KeySet> {
      if (cached && nowMs() - cached.loadedAt < SIGNER_CACHE_MS) return cached.set;
      refreshing ??= load().finally(() => { refreshing = null; });
      return refreshing;
    },
    /** The key that signs now; a 503 `master_key_missing` when this process cannot open it. */
    async signer(): Promise<ActiveSigner> {
      const { signer } = await this.current();
      if (isAppError(signer)) throw signer;
      if (!lifetimeRecorded.has(signer.kid)) await recordLifetime(signer.kid);
      return signer;
    },
    /** Re-reads now: a token names a kid this node has not seen yet. */
    reload: load,
    /**
     * Starts re-reading the key set in the background when it is older than SIGNER_CACHE_MS, for
     * callers that answer from what they know already (tokens verified before): a key revoked on
     * another node reaches them within that period too. A failed read is left for the next caller
     * that needs the keys to meet.
     */
    refreshIfStale(): void {
      if (refreshing !== null || (cached !== null && nowMs() - cached.loadedAt < SIGNER_CACHE_MS)) return;
      refreshing = load().finally(() => { refreshing = null; });
      refreshing.catch(() => undefined);
    },
    /** `listener` is given every key set read from now on (the token verifier follows revocations so). */
    onKeySet(listener: (set: KeySet) => void): void {
      listeners.push(listener);
    },
    /**
     * Starts signing with the next key, published ahead (or a new one where there is none), and
     * stages a new next key; the old one stays published until its tokens expire. With
     * `revokePrevious` every other key, the next one included (it was kept as the leaked one was),
     * is revoked: gone from the JWKS, its tokens refused; a new key signs at once.
     */
    async rotate(opts: { revokePrevious?: boolean } = {}): Promise<{ kid: string; next: string; retired: string[]; revoked: string[] }> {
      const now = nowIso();
      const fresh = await generateSigningKeyRow(deps.ring, now);
      const next = await generateSigningKeyRow(deps.ring, now, null);
      const { kid, before, revoked } = await deps.db.transaction().execute(async (trx) => {
        await instanceRepo.lock(trx, 'signing_keys');
        const all = await signingKeysRepo.listAll(trx);
        const revoking = opts.revokePrevious === true ? all.filter((r) => r.revoked_at === null).map((r) => r.kid) : [];
        // The oldest staged key: the one published longest.
        const staged = revoking.length > 0 ? undefined : stagedOf(all)[0];
        if (staged !== undefined) await signingKeysRepo.activate(trx, staged.kid, now);
        else await signingKeysRepo.insert(trx, fresh);
        const signing = staged?.kid ?? fresh.kid;
        await signingKeysRepo.insert(trx, next);
        await signingKeysRepo.retireActive(trx, signing, now);
        await signingKeysRepo.revoke(trx, revoking, now);
        return { kid: signing, before: activeOf(all).map((r) => r.kid), revoked: revoking };
      });
      forget();
      return { kid, next: next.kid, retired: before.filter((k) => !revoked.includes(k)), revoked };
    },

    /**
     * Revokes a key that no longer signs (a retired one: its tokens may be live still): out of the
     * JWKS, its tokens refused. The key that signs is revoked by rotating (`rotate({ revokePrevious })`),
     * so that a key signs all along.
     */
    async revoke(kid: string): Promise<'revoked' | 'already revoked'> {
      const row = (await signingKeysRepo.listAll(deps.db)).find((r) => r.kid === kid);
      if (row === undefined) throw errors.notFound('signing key', kid);
      if (row.revoked_at !== null) return 'already revoked';
      if (row.activated_at !== null && row.retired_at === null) {
        throw errors.conflict('signing_key_active', `${kid} is the key that signs tokens now: revoke it with slipway keys rotate-signing --revoke-previous, which makes a new key sign first.`);
      }
      await signingKeysRepo.revoke(deps.db, [kid], nowIso());
      forget();
      return 'revoked';
    },
    /** Every key ever made, oldest first, with what it is doing now. */
    async list(): Promise<SigningKeyInfo[]> {
      const now = nowMs();
      return (await signingKeysRepo.listAll(deps.db)).map((r) => describeSigningKey(r, deps.tokenTtlSeconds, now));
    },
  };
}

export type SigningKeys = ReturnType<typeof createSigningKeys>;
