// Tokens of an external issuer (a ZITADEL): a stand-in issuer runs as a real HTTP server on
// loopback, serving its discovery document and its key set (RS256 keys, as ZITADEL's), and signs
// tokens shaped as ZITADEL's. Slipway, pointed at it, accepts them in the linked organization with
// the role they grant there, refuses every defect, picks up a key rotation without a restart, and
// keeps accepting its own tokens beside them.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { decodeJwt, exportJWK, generateKeyPair, jwtVerify, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';
import { createExternalKeys } from '../../src/modules/auth/external-issuer.js';
import type { Role } from '../../src/modules/auth/roles.js';
import type { Organization } from '../../src/modules/orgs/orgs.schemas.js';
import { cliContext } from '../../src/platform/context.js';
import { isAppError } from '../../src/platform/errors.js';
import { eventsSettled } from '../support/deployments.js';
import { startServer, type HttpResult, type TestServer } from '../support/harness.js';
import { assertProblem } from '../support/problems.js';
import { cliJson, runCli } from '../support/processes.js';
import { base64url, oauthPost, basic } from '../support/tokens.js';

const PROJECT = '263952365928112131';
const ZORG_A = '270000000000000001';
const ZORG_B = '270000000000000002';
const ZORG_C = '270000000000000003';
const AUDIENCE_SCOPE = `urn:zitadel:iam:org:project:id:${PROJECT}:aud`;
const ROLES_CLAIM = `urn:zitadel:iam:org:project:${PROJECT}:roles`;
/** The key set is read again for an unknown kid at most this often (external-issuer.ts), plus slack. */
const REFRESH_WAIT_MS = 1_200;

interface IssuerKey { kid: string; privateKey: CryptoKey; jwk: JWK }

/** A stand-in ZITADEL: discovery and JWKS over real HTTP, counting what it is asked. */
async function startIssuer() {
  const keys: IssuerKey[] = [];
  const hits = { discovery: 0, jwks: 0 };
  let jwksStatus = 200;
  /** A body to answer with instead of the key set; keys published before the issuer's own. */
  let jwksBody: string | null = null;
  let ahead: JWK[] = [];
  let keyCounter = 0;
  async function newKey(): Promise<IssuerKey> {
    const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true });
    const kid = `zitadel-key-${++keyCounter}`;
    return { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' } };
  }
  keys.push(await newKey());
  const server = http.createServer((req, res) => {
    const json = (status: number, body: unknown) => { res.writeHead(status, { 'content-type': 'application/json' }); res.end(JSON.stringify(body)); };
    if (req.url === '/.well-known/openid-configuration') {
      hits.discovery++;
      return json(200, { issuer: url, jwks_uri: `${url}/oauth/v2/keys`, token_endpoint: `${url}/oauth/v2/token` });
    }
    if (req.url === '/oauth/v2/keys') {
      hits.jwks++;
      if (jwksBody !== null) return res.writeHead(jwksStatus, { 'content-type': 'application/json' }).end(jwksBody);
      return json(jwksStatus, jwksStatus === 200 ? { keys: [...ahead, ...keys.map((k) => k.jwk)] } : { error: 'down' });
    }
    return json(404, { error: 'not found' });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    hits,
    get current() { return keys.at(-1)!; },
    /** A new signing key, published beside the old one only from now on. */
    async rotate() { keys.push(await newKey()); return keys.at(-1)!; },
    setJwksStatus(status: number) { jwksStatus = status; },
    setJwksBody(body: string | null) { jwksBody = body; },
    publishAhead(jwks: JWK[]) { ahead = jwks; },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
type Issuer = Awaited<ReturnType<typeof startIssuer>>;

let jtiCounter = 0;

describe('external issuer (ZITADEL) tokens', () => {
  let issuer: Issuer;
  let server: TestServer;
  let orgA: Organization;
  let orgB: Organization;
  let unlinked: Organization;
  const minutes = (n: number) => Math.floor(Date.now() / 1000) + n * 60;

  before(async () => {
    issuer = await startIssuer();
    // A small revocation budget: an external token refused by DELETE /v1/token must not spend it.
    server = await startServer({ env: { SLIPWAY_EXTERNAL_ISSUER: issuer.url, SLIPWAY_PROJECT_ID: PROJECT, SLIPWAY_RATE_LIMIT_REVOKE_PER_HOUR: '2' } });
    orgA = await server.core.orgs.create(cliContext(), { slug: 'zitadel-a', name: 'A', externalId: ZORG_A });
    orgB = await server.core.orgs.create(cliContext(), { slug: 'zitadel-b', name: 'B', externalId: ZORG_B });
    unlinked = await server.createOrg('zitadel-unlinked');
  });
  after(async () => {
    assert.deepEqual(server.undeclared, []);
    await server.close();
    await issuer.close();
  });

  /** The claims ZITADEL puts in a JWT access token of a user of `org` with `roles` granted there. */
  function claims(org: string, roles: Role[] | Record<string, Record<string, string>>, change: Partial<JWTPayload> = {}): JWTPayload {
    const grants = Array.isArray(roles) ? Object.fromEntries(roles.map((r) => [r, { [org]: `${org}.zitadel.example` }])) : roles;
    return {
      iss: issuer.url, sub: `28${org.slice(2)}`, aud: [PROJECT, '270000000000000777'], iat: minutes(0), nbf: minutes(0), exp: minutes(10),
      jti: `29${String(++jtiCounter).padStart(16, '0')}`, client_id: 'deploy-bot',
      scope: `openid ${AUDIENCE_SCOPE} urn:zitadel:iam:org:projects:roles urn:zitadel:iam:user:resourceowner`,
      'urn:zitadel:iam:user:resourceowner:id': org, 'urn:zitadel:iam:user:resourceowner:name': 'Acme',
      [ROLES_CLAIM]: grants,
      ...change,
    };
  }
  const sign = (payload: JWTPayload, header: Record<string, unknown> = {}, key = issuer.current) =>
    new SignJWT(payload).setProtectedHeader({ alg: 'RS256', typ: 'JWT', kid: key.kid, ...header }).sign(key.privateKey);
  const api = async (payload: JWTPayload, header: Record<string, unknown> = {}) => server.http(await sign(payload, header));

  function assertInvalid(res: HttpResult, detail: RegExp, label: string): void {
    const body = assertProblem(res, 401, 'invalid_token', label);
    assert.match(String(body.detail), detail, label);
    const challenge = res.headers.get('www-authenticate') ?? '';
    assert.match(challenge, /^Bearer realm="slipway", error="invalid_token"/, label);
    // RFC 6750 §3: error_description holds only %x20-21 / %x23-5B / %x5D-7E, whatever the token said.
    assert.match(challenge, /^Bearer realm="slipway", error="invalid_token", error_description="[\x20\x21\x23-\x5b\x5d-\x7e]+"(, scope="[^"]+")?$/, `${label}: ${challenge}`);
  }

  it('accepts a token in its linked organization: lists it, writes as its role, and the event names its subject', async () => {
    const token = await sign(claims(ZORG_A, ['developer']));
    const developer = server.http(token);
    const list = await developer.get('/v1/orgs');
    assert.equal(list.status, 200, list.text);
    assert.deepEqual(list.body.orgs.map((o: Organization) => [o.id, o.externalId]), [[orgA.id, ZORG_A]]);
    const created = await developer.post(`/v1/orgs/${orgA.slug}/secrets`, { secrets: [{ name: 'from-zitadel', values: { A: '1' } }] });
    assert.equal(created.status, 201, created.text);
    // Verified once and remembered, like our own tokens: with the revocation list fresh, the next request waits for nothing.
    await server.core.revocations.isRevoked('tok_none');
    assert.equal(server.core.verifier.known(token)?.orgId, orgA.id);

    const admin = await api(claims(ZORG_A, ['admin']));
    await eventsSettled(server);
    const events = await admin.get(`/v1/orgs/${orgA.slug}/events?type=secret.*`);
    assert.equal(events.status, 200, events.text);
    assert.deepEqual(events.body.events.map((e: { actor: string }) => e.actor), [`28${ZORG_A.slice(2)}`]);
  });

  it('accepts typ at+jwt as well as JWT', async () => {
    assert.equal((await (await api(claims(ZORG_A, ['viewer']), { typ: 'at+jwt' })).get('/v1/orgs')).status, 200);
  });

  it('takes the highest role granted in the token\'s own organization, and refuses a role too low with 403', async () => {
    const viewer = await api(claims(ZORG_A, ['viewer']));
    assert.equal((await viewer.get(`/v1/orgs/${orgA.id}/secrets`)).status, 200);
    assertProblem(await viewer.post(`/v1/orgs/${orgA.id}/secrets`, { secrets: [{ name: 'nope', values: { A: '1' } }] }), 403, 'forbidden');
    // Owner only in another organization, viewer here: a viewer here.
    const mixed = await api(claims(ZORG_A, { owner: { [ZORG_B]: 'b' }, viewer: { [ZORG_A]: 'a' }, 'slipway-admin': { [ZORG_A]: 'a' } }));
    assertProblem(await mixed.patch(`/v1/orgs/${orgA.id}`, { name: 'Renamed' }), 403, 'forbidden');
    const owner = await api(claims(ZORG_A, ['viewer', 'owner', 'runner']));
    assert.equal((await owner.patch(`/v1/orgs/${orgA.id}`, { name: 'A (renamed)' })).status, 200);
  });

  it('refuses a token that grants none of our roles in its organization, saying which to grant', async () => {
    const refused: Array<Record<string, Record<string, string>>> = [{}, { owner: { [ZORG_B]: 'b' } }, { PROJECT_OWNER: { [ZORG_A]: 'a' } }];
    for (const roles of refused) {
      const body = assertProblem(await (await api(claims(ZORG_A, roles))).get('/v1/orgs'), 403, 'role_not_granted');
      assert.match(String(body.detail), new RegExp(`owner, admin, developer, viewer, runner.*urn:zitadel:iam:org:projects:roles.*${ROLES_CLAIM}`));
    }
    // The roles of the client's own project (the unnumbered claim) are not Slipway's.
    const unnumbered = claims(ZORG_A, {}, { 'urn:zitadel:iam:org:project:roles': { owner: { [ZORG_A]: 'a' } } });
    assertProblem(await (await api(unnumbered)).get('/v1/orgs'), 403, 'role_not_granted');
  });

  it('hides other organizations\' resources (404), and never makes an instance administrator', async () => {
    const owner = await api(claims(ZORG_A, ['owner']));
    assertProblem(await owner.get(`/v1/orgs/${orgB.id}/secrets`), 404);
    assertProblem(await owner.get(`/v1/orgs/${server.bootstrap.orgId}`), 404);
    assertProblem(await owner.post('/v1/orgs', { slug: 'by-zitadel', name: 'No' }), 403, 'forbidden');
  });

  it('refuses an organization linked to none, until linked: on this node at once, from the CLI within the cache window', async () => {
    const token = await sign(claims(ZORG_C, ['developer']));
    const res = await server.http(token).get('/v1/orgs');
    const body = assertProblem(res, 403, 'org_not_linked');
    assert.match(String(body.detail), new RegExp(`slipway org link --org ORG --external-id ${ZORG_C}`));

    const env = { SLIPWAY_DATA_DIR: server.dataDir, ...(server.config.databaseUrl ? { SLIPWAY_DATABASE_URL: server.config.databaseUrl } : {}) };
    const linked = await cliJson<Organization>(['org', 'link', '--org', unlinked.slug, '--external-id', ZORG_C], env);
    assert.deepEqual([linked.id, linked.externalId], [unlinked.id, ZORG_C]);
    // The server remembers "not linked" for up to 5 seconds: poll past that window, bounded.
    const deadline = Date.now() + 10_000;
    let after = await server.http(token).get('/v1/orgs');
    while (after.status !== 200 && Date.now() < deadline) {
      await sleep(100);
      after = await server.http(token).get('/v1/orgs');
    }
    assert.deepEqual(after.body.orgs?.map((o: Organization) => o.id), [unlinked.id], after.text);

    // One external organization, one Slipway organization: the CLI says where it is linked.
    const taken = await runCli(['org', 'link', '--org', orgB.slug, '--external-id', ZORG_C], env);
    assert.equal(taken.code, 1, taken.stderr);
    assert.match(taken.stderr, new RegExp(`^slipway: The external organization "${ZORG_C}" is already linked to the organization "${unlinked.slug}"`));
    const usage = await runCli(['org', 'link', '--org', orgB.slug, '--external-id', 'has spaces'], env);
    assert.equal(usage.code, 2, usage.stderr);

    // Unlinking on this node is seen by the very next request; so is linking again.
    await server.core.orgs.update(cliContext(), unlinked.id, { externalId: null });
    assertProblem(await server.http(token).get('/v1/orgs'), 403, 'org_not_linked');
    await server.core.orgs.update(cliContext(), unlinked.id, { externalId: ZORG_C });
    assert.equal((await server.http(token).get('/v1/orgs')).status, 200);
  });

  it('refuses a token without the project id in aud with the same 401 as ours, naming ZITADEL\'s audience scope', async () => {
    for (const aud of [['270000000000000777'], undefined]) {
      const res = await (await api(claims(ZORG_A, ['owner'], { aud }))).get('/v1/orgs');
      assertInvalid(res, new RegExp(`request a token with the scope \`${AUDIENCE_SCOPE}\``), `aud ${JSON.stringify(aud)}`);
      assert.equal(res.body.requiredScope, AUDIENCE_SCOPE);
      assert.match(res.headers.get('www-authenticate') ?? '', new RegExp(`scope="${AUDIENCE_SCOPE}"`));
    }
  });

  it('refuses every other defect with a 401 that names it', async () => {
    const good = claims(ZORG_A, ['owner']);
    const hmacKey = new TextEncoder().encode('x'.repeat(32));
    const { privateKey: strangerKey } = await generateKeyPair('RS256');
    const cases: Array<[string, () => Promise<string>, RegExp]> = [
      // Any other iss meets our own checks, as before there was an external issuer, and fails them.
      ['another issuer', () => sign({ ...good, iss: 'https://zitadel.other.example' }), /must be signed with ES256\./],
      ['the issuer with a trailing slash', () => sign({ ...good, iss: `${issuer.url}/` }), /must be signed with ES256\./],
      ['HS256', () => new SignJWT(good).setProtectedHeader({ alg: 'HS256', typ: 'JWT', kid: issuer.current.kid }).sign(hmacKey), /must be signed with RS256, .* or Ed25519/],
      ['alg: none', async () => `${base64url({ alg: 'none', typ: 'JWT' })}.${base64url(good)}.`, /must be signed with RS256/],
      ['expired', () => sign({ ...good, iat: minutes(-120), nbf: minutes(-120), exp: minutes(-60) }), /expired/],
      ['not valid yet', () => sign({ ...good, nbf: minutes(30), exp: minutes(60) }), /not valid yet/],
      ['issued a day ahead, with no nbf', () => sign({ ...good, iat: minutes(24 * 60), nbf: undefined, exp: minutes(25 * 60) }), /issued in the future/],
      ['the subject of a request without a token', () => sign({ ...good, sub: 'anonymous' }), /form of a Slipway id/],
      ['no typ', () => sign(good, { typ: undefined }), /wrong type; expected a JWT \(or at\+jwt\)/],
      ['typ of an ID token\'s kin', () => sign(good, { typ: 'dpop+jwt' }), /wrong type/],
      ['another key under the issuer\'s kid', () => new SignJWT(good).setProtectedHeader({ alg: 'RS256', typ: 'JWT', kid: issuer.current.kid }).sign(strangerKey), /signature is invalid/],
      ['no jti', () => sign({ ...good, jti: undefined }), /jti/],
      ['no organization claim', () => sign({ ...good, 'urn:zitadel:iam:user:resourceowner:id': undefined }), /scope `urn:zitadel:iam:user:resourceowner`/],
      ['no client', () => sign({ ...good, client_id: undefined }), /client_id or azp/],
      ['a subject that passes for a service user', () => sign({ ...good, sub: server.bootstrap.clientId }), /form of a Slipway id/],
      // Signed by the issuer, and still not what the claims must hold.
      ['a subject that is a number', () => sign({ ...good, sub: 123 as never }), /sub claim must be a string of 1 to 255 characters/],
      ['an empty subject', () => sign({ ...good, sub: '' }), /sub claim must be a string/],
      ['a jti that is an object', () => sign({ ...good, jti: {} as never }), /jti claim must be a string/],
      ['an expiry no date can hold', () => sign({ ...good, exp: 1.7e308 }), /exp claim is not a date this server can keep/],
      // The subject is repeated in the challenge: no character of it may break the header.
      ['such a subject with a quote, a backslash and characters no header can carry', () => sign({ ...good, sub: `${server.bootstrap.clientId}"\\→` }), /form of a Slipway id/],
    ];
    for (const [label, make, detail] of cases) assertInvalid(await server.http(await make()).get('/v1/orgs'), detail, label);
    // azp stands in for client_id, as ZITADEL documents it.
    assert.equal((await (await api({ ...good, client_id: undefined, azp: '270000000000000777' })).get('/v1/orgs')).status, 200);
  });

  it('picks up a key rotation at the issuer without a restart', async () => {
    assert.equal((await (await api(claims(ZORG_A, ['viewer']))).get('/v1/orgs')).status, 200);
    const before = { ...issuer.hits };
    const rotated = await issuer.rotate();
    await sleep(REFRESH_WAIT_MS);
    const refreshing = Date.now();
    const res = await server.http(await sign(claims(ZORG_A, ['viewer']), {}, rotated)).get('/v1/orgs');
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(issuer.hits, { discovery: before.discovery, jwks: before.jwks + 1 });
    // A kid the issuer does not publish is the token's fault, and asks the issuer again only after the
    // cooldown (1 s from that read): checked when both requests took less than that (a loaded machine may not).
    const ghost = await server.http(await sign(claims(ZORG_A, ['viewer']), { kid: 'ghost' })).get('/v1/orgs');
    assertInvalid(ghost, /unknown key/, 'unknown kid');
    if (Date.now() - refreshing < 1_000) assert.equal(issuer.hits.jwks, before.jwks + 1);
  });

  it('tries each key the set holds under a token\'s kid, and answers 503 naming a key that cannot be used', async () => {
    const { publicKey: other } = await generateKeyPair('RS256', { extractable: true });
    const weak = crypto.generateKeyPairSync('rsa', { modulusLength: 1024 });
    issuer.publishAhead([
      // A stale copy under the current kid, ahead of the real key.
      { ...(await exportJWK(other)), kid: issuer.current.kid, alg: 'RS256', use: 'sig' },
      // And one that cannot be used under it: it is passed over.
      { ...weak.publicKey.export({ format: 'jwk' }), kid: issuer.current.kid, alg: 'RS256', use: 'sig' } as JWK,
      { ...weak.publicKey.export({ format: 'jwk' }), kid: 'weak-1024', alg: 'RS256', use: 'sig' } as JWK,
    ]);
    try {
      // The key set is read again for the kid it does not know yet.
      await sleep(REFRESH_WAIT_MS);
      const payload = claims(ZORG_A, ['viewer']);
      const input = `${base64url({ alg: 'RS256', typ: 'JWT', kid: 'weak-1024' })}.${base64url(payload)}`;
      const weakToken = `${input}.${crypto.sign('sha256', Buffer.from(input), weak.privateKey).toString('base64url')}`;
      const refused = await server.http(weakToken).get('/v1/orgs');
      const body = assertProblem(refused, 503, 'unavailable');
      assert.match(String(body.detail), /The external issuer's key "weak-1024" cannot be used \(.*2048.*\); its key set needs fixing\./);
      // Two keys under the current kid: the one that verifies the token is found.
      assert.equal((await (await api(claims(ZORG_A, ['viewer']))).get('/v1/orgs')).status, 200);
      const { privateKey: stranger } = await generateKeyPair('RS256');
      const forged = await new SignJWT(claims(ZORG_A, ['viewer'])).setProtectedHeader({ alg: 'RS256', typ: 'JWT', kid: issuer.current.kid }).sign(stranger);
      assertInvalid(await server.http(forged).get('/v1/orgs'), /signature is invalid/, 'neither key of the kid');
    } finally {
      issuer.publishAhead([]);
    }
  });

  it('answers 503 with Retry-After while the issuer cannot be read, and keeps accepting known keys', async () => {
    issuer.setJwksStatus(500);
    try {
      await sleep(REFRESH_WAIT_MS);
      const down = await server.http(await sign(claims(ZORG_A, ['viewer']), { kid: 'not-yet-published' })).get('/v1/orgs');
      const body = assertProblem(down, 503, 'unavailable');
      assert.match(String(body.detail), /external issuer's signing keys cannot be read now .*answered 500/);
      assert.equal(down.headers.get('retry-after'), '5');
      const hits = issuer.hits.jwks;
      // Within the retry window the issuer is not asked again; a token under a known key still works.
      assertProblem(await server.http(await sign(claims(ZORG_A, ['viewer']), { kid: 'not-yet-published' })).get('/v1/orgs'), 503, 'unavailable');
      assert.equal(issuer.hits.jwks, hits);
      assert.equal((await (await api(claims(ZORG_A, ['viewer']))).get('/v1/orgs')).status, 200);
    } finally {
      issuer.setJwksStatus(200);
    }
  });

  it('keeps verifying under the keys last read for a while when a refresh falls due while the issuer is out of reach', async () => {
    const keys = createExternalKeys({ issuer: issuer.url, jwksUrl: `${issuer.url}/oauth/v2/keys` });
    const options = { issuer: issuer.url, algorithms: ['RS256'] };
    await jwtVerify(await sign(claims(ZORG_A, ['viewer'])), keys, options);
    // Signed now, verified (below) as if 11 minutes later.
    const known = await sign(claims(ZORG_A, ['viewer']));
    const unknown = await sign(claims(ZORG_A, ['viewer']), { kid: 'never-read' });
    issuer.setJwksStatus(500);
    const realNow = Date.now;
    try {
      // Past the 10 minutes a key set is kept: the next token makes it ask the issuer, which fails.
      Date.now = () => realNow() + 11 * 60_000;
      const hits = issuer.hits.jwks;
      const { payload } = await jwtVerify(known, keys, { ...options, currentDate: new Date(realNow()) });
      assert.equal(payload['urn:zitadel:iam:user:resourceowner:id'], ZORG_A);
      assert.equal(issuer.hits.jwks, hits + 1, 'the refresh was tried');
      // A kid the keys last read lack still waits for the issuer.
      const unavailable = (error: unknown) => isAppError(error) && error.status === 503;
      await assert.rejects(jwtVerify(unknown, keys, { ...options, currentDate: new Date(realNow()) }), unavailable);
      // Not when the issuer answers something else than a failure of its own (the set has moved)...
      issuer.setJwksStatus(404);
      Date.now = () => realNow() + 12 * 60_000;
      await assert.rejects(jwtVerify(known, keys, { ...options, currentDate: new Date(realNow()) }), unavailable);
      // ...and not an hour after it last answered.
      issuer.setJwksStatus(500);
      Date.now = () => realNow() + 61 * 60_000;
      await assert.rejects(jwtVerify(known, keys, { ...options, currentDate: new Date(realNow()) }), unavailable);
    } finally {
      Date.now = realNow;
      issuer.setJwksStatus(200);
    }
  });

  it('takes an issuer\'s key set that answers 200 with something else for a failure, not for an outage, whatever came before', async () => {
    const keys = createExternalKeys({ issuer: issuer.url, jwksUrl: `${issuer.url}/oauth/v2/keys` });
    const options = { issuer: issuer.url, algorithms: ['RS256'] };
    await jwtVerify(await sign(claims(ZORG_A, ['viewer'])), keys, options);
    const known = await sign(claims(ZORG_A, ['viewer']));
    const realNow = Date.now;
    const at = (minutes: number) => { Date.now = () => realNow() + minutes * 60_000; };
    const verifyKnown = () => jwtVerify(known, keys, { ...options, currentDate: new Date(realNow()) });
    const unavailable = (detail: RegExp) => (error: unknown) => isAppError(error) && error.status === 503 && detail.test(error.detail);
    try {
      // An outage first: the keys last read verify meanwhile.
      issuer.setJwksStatus(500);
      at(11);
      await verifyKnown();
      // Back, then answering 200 with what is not a key set: that is no outage, and no grace.
      issuer.setJwksStatus(200);
      issuer.setJwksBody('not json at all');
      at(22);
      await assert.rejects(verifyKnown(), unavailable(/answered 200 with a body that is not JSON/));
      issuer.setJwksBody('{"keys": "none"}');
      at(33);
      await assert.rejects(verifyKnown(), unavailable(/no "keys" array/));
      issuer.setJwksBody(JSON.stringify({ keys: [], padding: 'x'.repeat(1024 * 1024) }));
      at(44);
      await assert.rejects(verifyKnown(), unavailable(/answered more than 1048576 bytes/));
    } finally {
      Date.now = realNow;
      issuer.setJwksStatus(200);
      issuer.setJwksBody(null);
    }
  });

  it('describes an external token by its issuer\'s claims: no service user name here', async () => {
    const token = await sign(claims(ZORG_A, ['developer']));
    const res = await server.http(token).get('/v1/token');
    assert.equal(res.status, 200, res.text);
    assert.deepEqual([res.body.subject, res.body.name, res.body.orgId, res.body.role, res.body.instanceAdmin, res.body.issuer],
      [decodeJwt(token).sub, null, orgA.id, 'developer', false, issuer.url]);
  });

  it('keeps our own tokens working beside, and our authorization server speaks only for them', async () => {
    const own = await server.owner.http.get('/v1/orgs');
    assert.equal(own.status, 200);
    assert.ok(own.body.orgs.some((o: Organization) => o.id === orgA.id));
    const discovery = await server.http().get('/.well-known/openid-configuration');
    assert.equal(discovery.body.issuer, server.core.issuer);

    const external = await sign(claims(ZORG_A, ['owner']));
    assert.equal((await server.http(external).get('/v1/orgs')).status, 200);
    const introspected = await oauthPost(server, 'introspect', { authorization: basic(server.bootstrap.clientId, server.bootstrap.clientSecret), form: { token: external } });
    assert.deepEqual([introspected.status, introspected.body], [200, { active: false }]);
  });

  it('refuses to revoke an external token through DELETE /v1/token, naming its issuer; it keeps working', async () => {
    for (const role of ['owner', 'runner'] as const) {
      const external = server.http(await sign(claims(ZORG_A, [role])));
      // More tries than the budget: each is the same refusal, never a 429 for a budget it did not spend.
      for (let attempt = 1; attempt <= 3; attempt++) {
        const res = await external.delete('/v1/token');
        const body = assertProblem(res, 400, 'external_token', `${role}, try ${attempt}`);
        assert.equal(body.issuer, issuer.url);
        assert.match(String(body.detail), /revoke it at that issuer/);
      }
      assert.equal((await external.get('/v1/orgs')).status, 200, `${role}: the token was not revoked`);
    }
    // Slipway's own tokens are still revoked beside.
    const own = await server.actor(orgA.id, 'viewer');
    assert.equal((await own.http.delete('/v1/token')).status, 204);
    assert.equal((await own.http.get('/v1/orgs')).status, 401);
  });

  it('lets a runner the external issuer vouches for claim, though it has no service user here to be kept to environments', async () => {
    const runner = server.http(await sign(claims(ZORG_A, ['runner'])));
    const claimed = await runner.post(`/v1/orgs/${orgA.id}/runner/claim`, { waitSeconds: 0 });
    assert.equal(claimed.status, 204, claimed.text);
    const serving = await runner.post(`/v1/orgs/${orgA.id}/runner/serving`, { deployments: ['dep_none'] });
    assert.deepEqual([serving.status, serving.body.serving], [200, []]);
  });

  it('reads the keys from SLIPWAY_EXTERNAL_JWKS_URL without asking for the discovery document', async () => {
    const keys = createExternalKeys({ issuer: issuer.url, jwksUrl: `${issuer.url}/oauth/v2/keys` });
    const discoveries = issuer.hits.discovery;
    const { payload } = await jwtVerify(await sign(claims(ZORG_A, ['viewer'])), keys, { issuer: issuer.url, algorithms: ['RS256'] });
    assert.equal(payload['urn:zitadel:iam:user:resourceowner:id'], ZORG_A);
    assert.equal(issuer.hits.discovery, discoveries);
  });

  it('refuses, with 503, a discovery document that is not the configured issuer\'s own', async () => {
    // The same discovery URL (the trailing slash goes), but the document names the issuer without it.
    const keys = createExternalKeys({ issuer: `${issuer.url}/`, jwksUrl: null });
    const discoveries = issuer.hits.discovery;
    const token = await sign(claims(ZORG_A, ['viewer'], { iss: `${issuer.url}/` }));
    for (let attempt = 0; attempt < 2; attempt++) {
      await assert.rejects(jwtVerify(token, keys), (error: unknown) => isAppError(error) && error.status === 503 && /names the issuer/.test(error.detail));
    }
    assert.equal(issuer.hits.discovery, discoveries + 1, 'the issuer is not asked again within the retry window');
  });
});
