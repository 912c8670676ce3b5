import type { Role } from './roles.js';

/** The caller behind a verified access token, with its current role and state. */
export interface Principal {
  subject: string;
  clientId: string;
  orgId: string;
  role: Role;
  instanceAdmin: boolean;
  tokenId: string;
  scopes: string[];
  expiresAt: number;
  /** Who issued the token: this server (SLIPWAY_AUTH_URL), or the external issuer (SLIPWAY_EXTERNAL_ISSUER). */
  issuer: string;
}
