// What a deployment changes: its frozen spec beside another deployment's, by default the one of the
// same service and environment that succeeded last before it (what it replaces, or replaced). The
// revision, the run fields (command, image, port, health check), each plain variable, and each
// secret reference's pinned version: what a reviewer looks at before a promotion or a rollback goes
// on. Secret values are never compared or shown: versions only.
import { Type, type Static } from '@sinclair/typebox';
import type { App } from '../../http/app-types.js';
import type { Db } from '../../platform/db/database.js';
import { errors } from '../../platform/errors.js';
import { difference, RUN_FIELDS, runFieldChanges } from '../services/service-spec.js';
import type { DeploymentSpecT, PinnedSecretReferenceT } from '../services/services.schemas.js';
import type { DeploymentState } from './deployment-states.js';
import { DeploymentParams, DeploymentStateSchema } from './deployments.schemas.js';
import { loadDeployment, type Snapshot } from './deployments.service.js';
import type { DeploymentRow } from './deployments.repo.js';

const Change = Type.Union([Type.Literal('added'), Type.Literal('removed'), Type.Literal('changed')]);
const Json = Type.Unknown();

export const DeploymentChanges = Type.Object({
  deployment: Type.String(),
  against: Type.Union([Type.Object({
    id: Type.String(),
    state: DeploymentStateSchema,
    revision: Type.Union([Type.String(), Type.Null()]),
    environment: Type.Object({ id: Type.String(), name: Type.String() }),
  }), Type.Null()], { description: 'The deployment compared with; null when there is none (the first of its service in its environment): everything is `added`.' }),
  revision: Type.Union([Type.Object({ from: Type.Union([Type.String(), Type.Null()]), to: Type.Union([Type.String(), Type.Null()]) }), Type.Null()], { description: 'Null when the same.' }),
  spec: Type.Array(Type.Object({
    field: Type.Union(RUN_FIELDS.map((f) => Type.Literal(f))),
    change: Change,
    from: Type.Optional(Json),
    to: Type.Optional(Json),
  }), { description: 'The run fields that differ.' }),
  variables: Type.Array(Type.Object({
    name: Type.String(), change: Change, from: Type.Optional(Type.String()), to: Type.Optional(Type.String()),
  }), { description: 'Plain variables (the resolved ones: service, environment and overrides together) that differ, by name.' }),
  secrets: Type.Array(Type.Object({
    secret: Type.String(),
    key: Type.Optional(Type.String()),
    as: Type.Optional(Type.String()),
    change: Change,
    from: Type.Optional(Type.Integer({ description: 'The version pinned before.' })),
    to: Type.Optional(Type.Integer({ description: 'The version pinned now.' })),
  }), { description: 'Secret references (by secret, key and name; two alike, as a promotion may pin, each beside its counterpart in order) whose pinned version differs, or that one side has and the other not; versions only, never a value. A secret deleted for good and created again under its name is another version line: `changed`.' }),
}, { additionalProperties: false });
export type DeploymentChangesT = Static<typeof DeploymentChanges>;

export const ChangesQuery = Type.Object({
  against: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'Another deployment of the organization (`dep_…`) to compare with: one in another environment, to see what a promotion changes. By default, the last deployment of the same service and environment that succeeded before this one was created.' })),
});

/**
 * References by secret, key and name, and which of those they are: a promotion may pin two
 * references alike (its service's and its environment's, each exporting the whole secret, at two
 * versions with different keys), and each is compared with its counterpart, the first with the first.
 */
function byReference(refs: readonly PinnedSecretReferenceT[]): Map<string, PinnedSecretReferenceT> {
  const seen = new Map<string, number>();
  return new Map(refs.map((r) => {
    const alike = JSON.stringify([r.secret, r.key ?? null, r.as ?? null]);
    const n = seen.get(alike) ?? 0;
    seen.set(alike, n + 1);
    return [`${alike}#${n}`, r];
  }));
}

/** `from` (null: nothing before) against `to`. */
export function specChanges(from: DeploymentSpecT | null, to: DeploymentSpecT): Pick<DeploymentChangesT, 'spec' | 'variables' | 'secrets'> {
  const spec: DeploymentChangesT['spec'] = runFieldChanges(from, to);
  const variables: DeploymentChangesT['variables'] = [];
  const before = from?.variables ?? {};
  for (const name of [...new Set([...Object.keys(before), ...Object.keys(to.variables)])].sort()) {
    const was = Object.hasOwn(before, name) ? before[name] : undefined;
    const is = Object.hasOwn(to.variables, name) ? to.variables[name] : undefined;
    if (was === is) continue;
    variables.push({ name, ...difference(was, is) });
  }
  const secrets: DeploymentChangesT['secrets'] = [];
  const earlier = byReference(from?.secrets ?? []);
  const later = byReference(to.secrets);
  for (const key of [...new Set([...earlier.keys(), ...later.keys()])]) {
    const was = earlier.get(key);
    const is = later.get(key);
    if (was !== undefined && is !== undefined && was.secretId === is.secretId && was.version === is.version) continue;
    const ref = (is ?? was)!;
    secrets.push({
      secret: ref.secret, ...(ref.key !== undefined ? { key: ref.key } : {}), ...(ref.as !== undefined ? { as: ref.as } : {}),
      ...difference(was?.version, is?.version),
    });
  }
  return { spec, variables, secrets };
}

export function createDeploymentChanges(deps: { db: Db }) {
  const { db } = deps;
  /**
   * What succeeded last, before `row` was made, of its service in its environment: the newer of the
   * last succeeded and the last superseded one, each one seek of the pair's index.
   */
  const replaced = async (row: DeploymentRow): Promise<DeploymentRow | undefined> => {
    const last = (state: string) => db.selectFrom('deployments').selectAll()
      .where('service_id', '=', row.service_id).where('environment_id', '=', row.environment_id)
      .where('state', '=', state).where('id', '<', row.id)
      .orderBy('id', 'desc').limit(1).executeTakeFirst();
    const found = [await last('succeeded'), await last('superseded')].filter((r): r is DeploymentRow => r !== undefined);
    return found.sort((a, b) => (a.id < b.id ? 1 : -1))[0];
  };

  return async (orgId: string, id: string, against?: string): Promise<DeploymentChangesT> => {
    const row = await loadDeployment(db, orgId, id);
    let other: DeploymentRow | undefined;
    if (against !== undefined) {
      other = await db.selectFrom('deployments').selectAll().where('id', '=', against).where('org_id', '=', orgId).executeTakeFirst();
      if (other === undefined) throw errors.notFound('deployment', against, '/query/against');
    } else {
      other = await replaced(row);
    }
    const snapshot = JSON.parse(row.snapshot) as Snapshot;
    const earlier = other !== undefined ? JSON.parse(other.snapshot) as Snapshot : null;
    return {
      deployment: row.id,
      against: other === undefined || earlier === null ? null : {
        id: other.id, state: other.state as DeploymentState, revision: other.revision, environment: { id: earlier.environment.id, name: earlier.environment.name },
      },
      revision: (other?.revision ?? null) === row.revision ? null : { from: other?.revision ?? null, to: row.revision },
      ...specChanges(earlier?.spec ?? null, snapshot.spec),
    };
  };
}

export type DeploymentChangesReader = ReturnType<typeof createDeploymentChanges>;

export function deploymentChangesRoutes(app: App, deps: { changes: DeploymentChangesReader }): void {
  app.get('/v1/orgs/:orgId/deployments/:id/changes', {
    config: { auth: 'viewer', operation: 'deployments.changes' },
    schema: {
      tags: ['deployments'],
      summary: 'What a deployment changes: its frozen spec beside the one it replaces, or another deployment\'s',
      description: 'By default against the last deployment of the same service and environment that succeeded before this one was created (what it replaces, or replaced); `against` names another deployment of the organization, such as what serves in the next environment before a promotion. The revision, the run fields, each plain variable (with its values: they are in the spec already) and each secret reference\'s pinned version (never a value).',
      params: DeploymentParams,
      querystring: ChangesQuery,
      response: { 200: DeploymentChanges },
    },
  }, async (req) => deps.changes(req.org!.id, req.params.id, req.query.against));
}
