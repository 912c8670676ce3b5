// First start on an empty database: an organization `default` with an owner service user who is
// also an instance administrator, and their credentials in <data dir>/bootstrap.json (0600). The
// log says where the file is, never the secret. Later starts (and other nodes) never do it again.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { ConfigError } from '../../platform/config.js';
import { cliContext } from '../../platform/context.js';
import { replaceOwnerOnly } from '../../platform/owner-only-file.js';
import type { Db } from '../../platform/db/database.js';
import type { Logger } from '../../platform/logging.js';
import type { OrgsService } from '../orgs/orgs.service.js';
import type { ServiceUsersService } from '../service-users/service-users.service.js';
import { instanceRepo } from './instance.repo.js';
import { nowMs, nowIso } from '../../platform/clock.js';

export const BOOTSTRAP_FILE = 'bootstrap.json';

/** A claim this old with no organization made is a start that died in between (it takes well under a second). */
const CLAIM_ABANDONED_AFTER_MS = 60_000;

export async function bootstrapIfEmpty(deps: { db: Db; dataDir: string; orgs: OrgsService; serviceUsers: ServiceUsersService; logger: Logger }): Promise<string | null> {
  const existing = await deps.db.selectFrom('organizations').select('id').limit(1).executeTakeFirst();
  if (existing) return null;
  const file = path.join(deps.dataDir, BOOTSTRAP_FILE);
  // Before anything is made: credentials that cannot be written would be lost with the owner made.
  assertWritable(file);
  // Whoever stores its token first does the bootstrap; a second node or worker starting at the same moment does not.
  const claim = `${randomUUID()} ${nowIso()}`;
  const holder = await instanceRepo.setSettingOnce(deps.db, 'bootstrapped_by', claim);
  if (holder !== claim) {
    // A claim without an organization long after it was made is one whose start died in between
    // (killed, out of memory): taken over, else no start would ever bootstrap. A claim from before
    // claims carried their time is as old as that.
    const claimedAt = Date.parse(holder.split(' ')[1] ?? '');
    if (nowMs() - claimedAt < CLAIM_ABANDONED_AFTER_MS) return null;
    if (!(await instanceRepo.replaceSetting(deps.db, 'bootstrapped_by', holder, claim))) return null;
    deps.logger.warn({ claimedAt: Number.isNaN(claimedAt) ? null : new Date(claimedAt).toISOString() }, 'first start: an earlier start claimed the bootstrap and made nothing; bootstrapping now');
  }

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
  const body = { orgId: org.id, clientId: owner.clientId, clientSecret: owner.clientSecret, tokenUrl: owner.tokenUrl, scope: owner.scope, baseUrl: owner.baseUrl };
  // Replaced, not written through: neither a looser mode nor a symbolic link at that path carries over.
  replaceOwnerOnly(file, JSON.stringify(body, null, 2) + '\n');
  deps.logger.warn({ file, orgId: org.id, clientId: owner.clientId }, 'first start: created organization "default" and an owner service user; credentials are in the bootstrap file');
  return file;
}

/** The data directory takes a new file beside `file`, and nothing but a file is at `file`. */
function assertWritable(file: string): void {
  const probe = `${file}.${process.pid}.${randomUUID()}.probe`;
  try {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    const at = fs.lstatSync(file, { throwIfNoEntry: false });
    if (at !== undefined && at.isDirectory()) throw Object.assign(new Error('a directory is in its place'), { code: 'EISDIR' });
    fs.writeFileSync(probe, '', { flag: 'wx', mode: 0o600 });
    fs.rmSync(probe);
  } catch (error) {
    const { code, message } = error as NodeJS.ErrnoException;
    throw new ConfigError(`the first start writes the owner's credentials to ${file}, and cannot (${code ?? message}): make the data directory (SLIPWAY_DATA_DIR) writable, then start again; nothing was created`);
  }
}
