// scopeParser: RFC 6749 §3.3 scope strings. None asked gets all five; any arrangement of known scopes is granted (each once,
// in the order first asked); any unknown scope refuses the whole request and is named.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { audienceScope, fullScope, scopeParser, STANDARD_SCOPES } from '../../src/modules/auth/scopes.js';

const IDP = 'slipway';
const PROJECT = '318206273917';
const AUDIENCE = audienceScope(IDP, PROJECT);
const KNOWN = [...STANDARD_SCOPES, AUDIENCE];
const parseScopes = scopeParser(IDP, PROJECT);

/** Space-separated, with runs of spaces and leading/trailing ones as clients sometimes send. */
const joined = (parts: string[], gaps: number[]) => parts.map((p, i) => p + ' '.repeat(gaps[i] ?? 1)).join('');
const gaps = fc.array(fc.integer({ min: 1, max: 3 }), { maxLength: 40 });
const known = fc.array(fc.constantFrom(...KNOWN), { maxLength: 20 });
// A scope token (RFC 6749 §3.3: %x21 / %x23-5B / %x5D-7E) that is none of ours.
const unknownScope = fc.string({ unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789:_-.~!#$%&()*+,/;<=>?@[]^`{|}'.split('')), minLength: 1, maxLength: 30 })
  .filter((s) => !KNOWN.includes(s));

describe('scopeParser', () => {
  it('grants the spec\'s five scopes and marks the audience', () => {
    const parsed = parseScopes(fullScope(IDP, PROJECT));
    assert.deepEqual(parsed, { ok: true, granted: [...KNOWN], audience: true, scope: KNOWN.join(' ') });
    assert.equal(fullScope(IDP, PROJECT), `openid email profile offline_access urn:slipway:iam:org:project:id:${PROJECT}:aud`);
  });

  it('grants all five when no scope is asked (RFC 6749 §3.3: the server\'s default)', () => {
    const all = { ok: true, granted: [...KNOWN], audience: true, scope: KNOWN.join(' ') };
    for (const none of [undefined, '', ' ', '   ']) assert.deepEqual(parseScopes(none), all, JSON.stringify(none));
  });

  it('grants any permutation or repetition of known scopes, each once, in first-asked order', () => {
    fc.assert(fc.property(known.filter((scopes) => scopes.length > 0), gaps, fc.integer({ min: 0, max: 2 }), (scopes, g, lead) => {
      const parsed = parseScopes(' '.repeat(lead) + joined(scopes, g));
      assert.equal(parsed.ok, true);
      if (!parsed.ok) return;
      assert.deepEqual(parsed.granted, [...new Set(scopes)]);
      assert.equal(parsed.scope, [...new Set(scopes)].join(' '));
      assert.equal(parsed.audience, scopes.includes(AUDIENCE));
    }));
  });

  it('refuses any request holding an unknown scope, naming each unknown one once', () => {
    fc.assert(fc.property(known, fc.array(unknownScope, { minLength: 1, maxLength: 4 }), gaps, fc.nat(), (good, bad, g, seed) => {
      // Unknown scopes inserted at positions the seed picks.
      const all = [...good];
      bad.forEach((b, i) => all.splice((seed + i * 7) % (all.length + 1), 0, b));
      const parsed = parseScopes(joined(all, g));
      assert.equal(parsed.ok, false);
      if (parsed.ok) return;
      assert.deepEqual(new Set(parsed.unknown), new Set(bad));
      assert.equal(parsed.unknown.length, new Set(bad).size);
    }));
  });

  it('answers a scope string it has seen before the same, and nobody can change that answer', () => {
    const parse = scopeParser(IDP, PROJECT);
    const first = parse('openid email');
    assert.equal(parse('openid email'), first);
    assert.throws(() => { (first as { granted: string[] }).granted.push('profile'); }, TypeError);
    assert.throws(() => { (first as { audience: boolean }).audience = true; }, TypeError);
    // Past what it remembers, it parses again and still answers right.
    for (let i = 0; i < 200; i++) assert.equal(parse(`openid x${i}`).ok, false);
    assert.deepEqual(parse('openid email'), { ok: true, granted: ['openid', 'email'], audience: false, scope: 'openid email' });
    // A very long scope string is answered alike but not kept.
    const long = `${'openid '.repeat(300)}email`;
    assert.notEqual(parse(long), parse(long));
    assert.deepEqual(parse(long), { ok: true, granted: ['openid', 'email'], audience: false, scope: 'openid email' });
  });

  it('is case-sensitive and exact: near misses of known scopes are unknown', () => {
    for (const near of ['OpenID', 'openid,email', `${AUDIENCE} `.trim().toUpperCase(), audienceScope(IDP, '1'), audienceScope('zitadel', PROJECT), `${AUDIENCE}x`, 'openid\temail']) {
      const parsed = parseScopes(near);
      assert.equal(parsed.ok, false, near);
    }
  });
});
