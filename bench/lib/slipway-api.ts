// The set-up a probe does through Slipway's API before it loads an endpoint, outside any
// measured window: organizations, secrets, environments, services and runner service users. Every call checks
// its status and fails the row with Slipway's answer otherwise. Types come from the server's own
// schemas, so a changed contract breaks the build here rather than the run.

import type { Static } from '@sinclair/typebox';
import type { Environment } from '../../src/modules/environments/environments.schemas.js';
import type { Organization } from '../../src/modules/orgs/orgs.schemas.js';
import type { SecretPage } from '../../src/modules/secrets/secrets.schemas.js';
import type { CredentialsT } from '../../src/modules/service-users/service-users.schemas.js';
import type { Service, ServiceSpecInput } from '../../src/modules/services/services.schemas.js';
import { ProbeError } from './harness.js';
import { requestToken, type SlipwayServer } from './slipway.js';

export interface SecretInput {
  name: string;
  values: Record<string, string>;
}

export interface SlipwayApi {
  orgId: string;
  /** `/v1/orgs/{orgId}` */
  orgPath: string;
  /** POST a body that is already JSON; resolves with the answer's text. */
  post(path: string, json: string, expectStatus: number): Promise<string>;
  createSecrets(secrets: SecretInput[]): Promise<void>;
  /** Sum of the current versions of the live secrets whose names start with `prefix`. */
  versionsUnder(prefix: string): Promise<number>;
  createEnvironment(name: string): Promise<Environment>;
  createService(name: string, spec: ServiceSpecInput): Promise<Service>;
  /** A new service user with the `runner` role, and an access token for it. */
  createRunner(name: string): Promise<string>;
  /** A new organization (the token's owner must be an instance administrator), and its API with the same token. */
  createOrg(slug: string): Promise<SlipwayApi>;
}

/** The API of one organization (by default the bootstrap one) as the holder of `token`. */
export function slipwayApi(server: SlipwayServer, token: string, orgId = server.bootstrap.orgId): SlipwayApi {
  const orgPath = `/v1/orgs/${encodeURIComponent(orgId)}`;

  async function call(method: string, path: string, json: string | undefined, expectStatus: number): Promise<string> {
    const res = await fetch(new URL(path, server.baseUrl), {
      method,
      headers: { authorization: `Bearer ${token}`, ...(json !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(json !== undefined ? { body: json } : {}),
      signal: AbortSignal.timeout(60_000),
    });
    const text = await res.text();
    if (res.status !== expectStatus) {
      throw new ProbeError(`set-up ${method} ${path} → HTTP ${res.status}, expected ${expectStatus}; body: ${text.slice(0, 300)}`);
    }
    return text;
  }

  const create = async <T>(path: string, body: unknown): Promise<T> => JSON.parse(await call('POST', path, JSON.stringify(body), 201)) as T;

  return {
    orgId,
    orgPath,
    post: (path, json, expectStatus) => call('POST', path, json, expectStatus),

    async createSecrets(secrets) {
      await create(`${orgPath}/secrets`, { secrets });
    },

    async versionsUnder(prefix) {
      let total = 0;
      let cursor: string | null = null;
      do {
        const query = new URLSearchParams({ prefix, limit: '100', ...(cursor ? { cursor } : {}) });
        const page = JSON.parse(await call('GET', `${orgPath}/secrets?${query}`, undefined, 200)) as Static<typeof SecretPage>;
        for (const s of page.secrets) total += s.version;
        cursor = page.nextCursor;
      } while (cursor);
      return total;
    },

    createEnvironment: (name) => create<Environment>(`${orgPath}/environments`, { name }),

    createService: (name, spec) => create<Service>(`${orgPath}/services`, { name, spec }),

    async createRunner(name) {
      const credentials = await create<CredentialsT>(`${orgPath}/service-users`, { name, role: 'runner' });
      const tokenUrl = new URL(credentials.tokenUrl, server.baseUrl).toString();
      const { access_token } = await requestToken(tokenUrl, credentials.clientId, credentials.clientSecret, credentials.scope);
      return access_token;
    },

    async createOrg(slug) {
      const org = await create<Organization>('/v1/orgs', { slug, name: slug });
      return slipwayApi(server, token, org.id);
    },
  };
}
