// Organization secrets. Every change makes a new immutable version whose values are sealed under
// the organization's data key; responses and events carry key names, never values.
import type { RequestContext } from '../../platform/context.js';
import { isUniqueViolation, type Db } from '../../platform/db/database.js';
import { errors, type FieldError } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { appendEvents } from '../events/event-log.js';
import type { DataKeys } from './data-keys.js';
import { secretsRepo, type SecretRow, type SecretVersionRow } from './secrets.repo.js';
import type { SecretMetadataT } from './secrets.schemas.js';

export interface SecretInput {
  name: string;
  values: Record<string, string>;
}

export function keysOf(values: Record<string, string>): string[] {
  return Object.keys(values).sort();
}

export function toMetadata(row: SecretRow): SecretMetadataT {
  return { name: row.name, version: row.version, keys: JSON.parse(row.keys) as string[], createdAt: row.created_at, updatedAt: row.updated_at };
}

/** Every item whose name occurs more than once in the request, each pointed at. */
export function duplicateNamePointers(items: SecretInput[]): FieldError[] {
  const counts = new Map<string, number>();
  for (const item of items) counts.set(item.name, (counts.get(item.name) ?? 0) + 1);
  return items.flatMap((item, i) => ((counts.get(item.name) ?? 0) > 1 ? [{ pointer: `/secrets/${i}/name`, message: `"${item.name}" appears more than once in this request` }] : []));
}

function existingConflict(items: SecretInput[], existing: string[]) {
  const taken = new Set(existing);
  const conflicts = items.flatMap((item, i) => (taken.has(item.name) ? [{ pointer: `/secrets/${i}/name`, name: item.name }] : []));
  return errors.conflict(
    'secret_exists',
    `${conflicts.length} secret name${conflicts.length === 1 ? '' : 's'} already exist${conflicts.length === 1 ? 's' : ''} in this organization: ${conflicts.slice(0, 10).map((c) => c.name).join(', ')}${conflicts.length > 10 ? ', …' : ''}. Nothing was created; use PUT to create or update.`,
    { conflicts },
  );
}

export function createSecretsService(deps: { db: Db; dataKeys: DataKeys }) {
  const { db, dataKeys } = deps;

  return {
    /**
     * Creates every secret or none: an existing name, or a name twice in the request, fails the
     * whole batch and the problem lists every offending item.
     */
    async bulkCreate(ctx: RequestContext, orgId: string, items: SecretInput[]): Promise<SecretMetadataT[]> {
      if (items.length === 0) throw errors.emptyBatch('secrets');
      const duplicates = duplicateNamePointers(items);
      if (duplicates.length > 0) throw errors.duplicateNames(duplicates);

      const names = items.map((i) => i.name);
      const now = new Date().toISOString();
      try {
        return await db.transaction().execute(async (trx) => {
          const existing = await secretsRepo.existingNames(trx, orgId, names);
          if (existing.length > 0) throw existingConflict(items, existing);
          const dataKey = await dataKeys.current(trx, orgId);
          const secrets: SecretRow[] = [];
          const versions: SecretVersionRow[] = [];
          for (const item of items) {
            const id = newId('secret');
            const keys = JSON.stringify(keysOf(item.values));
            secrets.push({ id, org_id: orgId, name: item.name, version: 1, keys, created_at: now, updated_at: now, created_by: ctx.actor.id, updated_by: ctx.actor.id, deleted_at: null });
            versions.push({ secret_id: id, version: 1, keys, data_key_id: dataKey.id, ciphertext: dataKeys.sealValues(dataKey, orgId, id, 1, item.values), created_at: now, created_by: ctx.actor.id });
          }
          await secretsRepo.insertSecrets(trx, secrets);
          await secretsRepo.insertVersions(trx, versions);
          await appendEvents(trx, ctx, secrets.map((s) => ({
            orgId, type: 'secret.created', subject: { type: 'secret', id: s.id }, data: { name: s.name, version: 1, keys: JSON.parse(s.keys) as string[] },
          })), now);
          return secrets.map(toMetadata);
        });
      } catch (error) {
        // A concurrent batch took a name between our check and our insert: report it like any other.
        if (isUniqueViolation(error)) throw existingConflict(items, await secretsRepo.existingNames(db, orgId, names));
        throw error;
      }
    },
  };
}

export type SecretsService = ReturnType<typeof createSecretsService>;
