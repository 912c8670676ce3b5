// What the API reads from a verified ZITADEL access token. ZITADEL's claim and scope names are its
// own and fixed (`urn:zitadel:…`), whatever SLIPWAY_IDP_NAME says:
// - the organization: `urn:zitadel:iam:user:resourceowner:id`, the user's organization (asserted
//   when the token is requested with the scope `urn:zitadel:iam:user:resourceowner`);
// - the role: `urn:zitadel:iam:org:project:<projectId>:roles`, `{ "<role>": { "<orgId>": "<domain>" } }`
//   (asserted with `urn:zitadel:iam:org:projects:roles`, or by the project's "assert roles" setting,
//   for each project the user has roles in). The unnumbered `urn:zitadel:iam:org:project:roles`
//   is not read: it holds the roles of whichever project the requesting client belongs to, which
//   need not be Slipway's.
import type { JWTPayload } from 'jose';
import { BUILT_IN_ACTOR_IDS } from '../../platform/context.js';
import { errors } from '../../platform/errors.js';
import { ID_PREFIXES } from '../../platform/ids.js';
import { ROLES, type Role } from './roles.js';
import { audienceScope, orgClaim } from './scopes.js';

export const ZITADEL = 'zitadel';
export const ZITADEL_ORG_CLAIM = orgClaim(ZITADEL);
export const ZITADEL_ORG_SCOPE = 'urn:zitadel:iam:user:resourceowner';
export const ZITADEL_ROLES_SCOPE = 'urn:zitadel:iam:org:projects:roles';

export function zitadelRolesClaim(projectId: string): string {
  return `urn:zitadel:iam:org:project:${projectId}:roles`;
}

/** The scope that puts the project id in a ZITADEL token's `aud`. */
export function zitadelAudienceScope(projectId: string): string {
  return audienceScope(ZITADEL, projectId);
}

/** The longest `sub` or `jti` read: ZITADEL's ids are 18 digits. */
const MAX_ID_CLAIM = 255;

/** What a verified external token says, fixed for its lifetime (its organization's link is not: it is looked up per request). */
export interface ExternalClaims {
  subject: string;
  clientId: string;
  tokenId: string;
  scopes: string[];
  expiresAt: number;
  forThisApi: boolean;
  /** The issuer's id of the user's organization. */
  externalOrgId: string;
  /** The highest of our roles the token grants in that organization; null: none. */
  role: Role | null;
}

/**
 * Our role in `orgId` from a roles claim: the first of ROLES (highest first, a human role before
 * `runner`) that is granted in that organization. Grants in other organizations, and role keys
 * that are not ours, count for nothing.
 */
export function grantedRole(rolesClaim: unknown, orgId: string): Role | null {
  if (typeof rolesClaim !== 'object' || rolesClaim === null || Array.isArray(rolesClaim)) return null;
  const grants = rolesClaim as Record<string, unknown>;
  return ROLES.find((role) => {
    const orgs = Object.hasOwn(grants, role) ? grants[role] : undefined;
    return typeof orgs === 'object' && orgs !== null && Object.hasOwn(orgs, orgId);
  }) ?? null;
}

/**
 * A subject that could pass for one of Slipway's own actors (a service user id, `cli`): events,
 * idempotency keys and rate limits are kept per subject, so an external one must not collide.
 */
function reservedSubject(subject: string): boolean {
  return BUILT_IN_ACTOR_IDS.includes(subject) || Object.values(ID_PREFIXES).some((prefix) => subject.startsWith(`${prefix}_`));
}

/** Maps the payload of a token whose signature, issuer, type and times were checked. Throws a 401 for what it lacks. */
export function zitadelClaims(payload: JWTPayload, projectId: string): ExternalClaims {
  // jose checks that they are there; what they hold is the issuer's to get right, and checked here.
  for (const claim of ['sub', 'jti'] as const) {
    const value: unknown = payload[claim];
    if (typeof value !== 'string' || value === '' || value.length > MAX_ID_CLAIM) throw errors.invalidToken(`The access token's ${claim} claim must be a string of 1 to ${MAX_ID_CLAIM} characters.`);
  }
  // A NumericDate whose milliseconds are a number still: one written as 1e308 would never expire here.
  if (!Number.isSafeInteger(Math.trunc(payload.exp! * 1000))) throw errors.invalidToken('The access token\'s exp claim is not a date this server can keep.');
  const subject = payload.sub!;
  if (reservedSubject(subject)) throw errors.invalidToken(`The access token's subject "${subject}" has the form of a Slipway id, which an external subject may not have.`);
  const clientId = typeof payload.client_id === 'string' ? payload.client_id : payload.azp;
  if (typeof clientId !== 'string') throw errors.invalidToken('The access token lacks the client claim (client_id or azp).');
  const externalOrgId = payload[ZITADEL_ORG_CLAIM];
  if (typeof externalOrgId !== 'string' || externalOrgId === '') {
    throw errors.invalidToken(`The access token lacks the organization claim ${ZITADEL_ORG_CLAIM}: request it with the scope \`${ZITADEL_ORG_SCOPE}\`.`);
  }
  const aud = Array.isArray(payload.aud) ? payload.aud : payload.aud === undefined ? [] : [payload.aud];
  const scope = payload.scope as unknown;
  return {
    subject,
    clientId,
    tokenId: payload.jti!,
    scopes: typeof scope === 'string' ? scope.split(' ').filter(Boolean) : Array.isArray(scope) ? scope.filter((s): s is string => typeof s === 'string') : [],
    expiresAt: payload.exp! * 1000,
    forThisApi: aud.includes(projectId),
    externalOrgId,
    role: grantedRole(payload[zitadelRolesClaim(projectId)], externalOrgId),
  };
}
