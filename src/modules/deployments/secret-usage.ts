// Where a secret is used: the services and environments whose configuration names it (their next
// deployments pin its current version), and the deployments queued, running or serving that pinned
// one of its versions. What to look at before changing, deleting or rotating it. Names and version
// numbers only, never a value.
import { Type, type Static } from '@sinclair/typebox';
import type { App } from '../../http/app-types.js';
import { textContains, type Db, type Dialect } from '../../platform/db/database.js';
import { errors } from '../../platform/errors.js';
import type { SecretVersionSource } from '../services/service-spec.js';
import type { SecretReferenceT } from '../services/services.schemas.js';
import { SecretParams } from '../secrets/secrets.schemas.js';
import { DeploymentStateSchema } from './deployments.schemas.js';
import type { Snapshot } from './deployments.service.js';

/** The deployments whose pinned versions matter still: what may run, runs, or serves. */
const LIVE_STATES = ['queued', 'in_progress', 'succeeded'] as const;

const Named = { id: Type.String(), name: Type.String() };
const Keys = Type.Union([Type.Array(Type.String()), Type.Null()], {
  description: 'The keys its references export (a reference by `key`; renamed ones under their `as`: `KEY as NAME`); null: the whole secret.',
});

export const SecretUsage = Type.Object({
  name: Type.String(),
  services: Type.Array(Type.Object({ ...Named, keys: Keys }), { description: 'Services whose spec names it, by name.' }),
  environments: Type.Array(Type.Object({ ...Named, keys: Keys }), { description: 'Environments whose configuration names it, by name.' }),
  deployments: Type.Array(Type.Object({
    id: Type.String(),
    state: DeploymentStateSchema,
    service: Type.Object(Named),
    environment: Type.Object(Named),
    versions: Type.Array(Type.Integer({ minimum: 1 }), { description: 'The versions of it the deployment pinned (two when a promotion carried one over and its environment pinned another).' }),
  }), { description: 'Queued, in-progress and serving (succeeded) deployments that pinned a version of it, newest first; they keep that version whatever happens to the secret, until its versions are destroyed (a permanent delete, or a purge).' }),
}, { additionalProperties: false });
export type SecretUsageT = Static<typeof SecretUsage>;

/** `null` for a whole secret, else the keys the references take (`KEY as NAME` when renamed), in order, once each. */
function keysOf(refs: SecretReferenceT[]): string[] | null {
  if (refs.some((r) => r.key === undefined)) return null;
  return [...new Set(refs.map((r) => (r.as !== undefined ? `${r.key} as ${r.as}` : r.key!)))];
}

function namingIt<T extends { id: string; name: string }>(rows: T[], refsOf: (row: T) => SecretReferenceT[], name: string) {
  return rows.flatMap((row) => {
    const refs = refsOf(row).filter((r) => r.secret === name);
    return refs.length === 0 ? [] : [{ id: row.id, name: row.name, keys: keysOf(refs) }];
  }).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

export function createSecretUsage(deps: { db: Db; dialect: Dialect; secrets: SecretVersionSource }) {
  const { db } = deps;
  return async (orgId: string, name: string): Promise<SecretUsageT> => {
    const current = (await deps.secrets.currentVersions(db, orgId, [name])).get(name);
    if (current === undefined) throw errors.secretNotFound(name);
    const [services, environments, deployments] = await Promise.all([
      db.selectFrom('services').select(['id', 'name', 'spec']).where('org_id', '=', orgId).execute(),
      db.selectFrom('environments').select(['id', 'name', 'secrets']).where('org_id', '=', orgId).execute(),
      // Only the snapshots that name its id somewhere are read (and then exactly): the others are
      // not sent over, nor parsed.
      db.selectFrom('deployments').select(['id', 'state', 'snapshot']).where('org_id', '=', orgId).where('state', 'in', [...LIVE_STATES])
        .where(textContains(deps.dialect, 'snapshot', JSON.stringify(current.secretId))).orderBy('id', 'desc').execute(),
    ]);
    return {
      name,
      services: namingIt(services, (s) => (JSON.parse(s.spec) as { secrets: SecretReferenceT[] }).secrets, name),
      environments: namingIt(environments, (e) => JSON.parse(e.secrets) as SecretReferenceT[], name),
      // By the secret's id: one deleted for good and created again under its name is another.
      deployments: deployments.flatMap((d) => {
        const snapshot = JSON.parse(d.snapshot) as Snapshot;
        const versions = [...new Set(snapshot.spec.secrets.filter((r) => r.secretId === current.secretId).map((r) => r.version))].sort((a, b) => a - b);
        return versions.length === 0 ? [] : [{
          id: d.id, state: d.state as SecretUsageT['deployments'][number]['state'],
          service: { id: snapshot.service.id, name: snapshot.service.name }, environment: { id: snapshot.environment.id, name: snapshot.environment.name }, versions,
        }];
      }),
    };
  };
}

export type SecretUsageReader = ReturnType<typeof createSecretUsage>;

export function secretUsageRoutes(app: App, deps: { usage: SecretUsageReader }): void {
  app.get('/v1/orgs/:orgId/secrets/:name/usage', {
    config: { auth: 'viewer', operation: 'secrets.usage' },
    schema: {
      tags: ['secrets', 'deployments'],
      summary: 'Where a secret is used: services, environments, and the deployments that pinned its versions',
      description: 'What to look at before changing, deleting or rotating a secret: the services and environments whose configuration names it (their next deployments pin its current version, and are refused once it is deleted), and the queued, in-progress and serving deployments that pinned one of its versions (they keep it, and a rollback to them needs it). Names and version numbers only, never a value. A deleted secret, or none of that name, is 404 `secret_not_found`. Not paginated: it lists what the organization has.',
      params: SecretParams,
      response: { 200: SecretUsage },
    },
  }, async (req) => deps.usage(req.org!.id, req.params.name));
}
