// First start on an empty database: an organization `default` with an owner service user who is
// also an instance administrator, and their credentials in <data dir>/bootstrap.json (0600). The
// log says where the file is, never the secret. Later starts (and other nodes) never do it again.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { cliContext } from '../../platform/context.js';
import { replaceOwnerOnly } from '../../platform/owner-only-file.js';
import type { Db } from '../../platform/db/database.js';
import type { Logger } from '../../platform/logging.js';
import type { OrgsService } from '../orgs/orgs.service.js';
import type { ServiceUsersService } from '../service-users/service-users.service.js';
import { instanceRepo } from './instance.repo.js';

export const BOOTSTRAP_FILE = 'bootstrap.json';

export async function bootstrapIfEmpty(deps: { db: Db; dataDir: string; orgs: OrgsService; serviceUsers: ServiceUsersService; logger: Logger }): Promise<string | null> {
  const existing = await deps.db.selectFrom('organizations').select('id').limit(1).executeTakeFirst();
  if (existing) return null;
  // Whoever stores its token first does the bootstrap; a second node or worker starting at the same moment does not.
  const claim = randomUUID();
  if ((await instanceRepo.setSettingOnce(deps.db, 'bootstrapped_by', claim)) !== claim) return null;

  const ctx = cliContext();
  let owner;
  let org;
  try {
    org = await deps.orgs.create(ctx, { slug: 'default', name: 'Default' });
    owner = await deps.serviceUsers.create(ctx, org.id, { name: 'bootstrap-owner', description: 'Created on first start', role: 'owner', instanceAdmin: true });
  } catch (error) {
    // Give the claim back, so that the next start tries again instead of leaving an empty instance.
    // (An organization made before the failure stays; `slipway service-user create --instance-admin` gives it an owner.)
    await deps.db.deleteFrom('instance_settings').where('key', '=', 'bootstrapped_by').where('value', '=', claim).execute();
    throw error;
  }
  const file = path.join(deps.dataDir, BOOTSTRAP_FILE);
  fs.mkdirSync(deps.dataDir, { recursive: true, mode: 0o700 });
  const body = { orgId: org.id, clientId: owner.clientId, clientSecret: owner.clientSecret, tokenUrl: owner.tokenUrl, scope: owner.scope, baseUrl: owner.baseUrl };
  // Replaced, not written through: neither a looser mode nor a symbolic link at that path carries over.
  replaceOwnerOnly(file, JSON.stringify(body, null, 2) + '\n');
  deps.logger.warn({ file, orgId: org.id, clientId: owner.clientId }, 'first start: created organization "default" and an owner service user; credentials are in the bootstrap file');
  return file;
}
