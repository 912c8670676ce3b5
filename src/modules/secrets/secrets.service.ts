// Organization secrets. Every change makes a new immutable version whose values are sealed under
// the organization's data key; responses and events carry key names, never values. The only ways
// out for values are the audited reveal and a runner's claim (resolveValues).
//
// Lifecycle: a delete is soft (hidden, name kept, restorable for the retention window, then
// purged); a permanent delete destroys every version at once. Only a permanent delete and the
// purge free a name.
import { createSecretChanges } from './secret-changes.js';
import { createSecretReads } from './secret-reads.js';
import { createSecretStore, type SecretsDeps } from './secret-store.js';
import { createSecretWrites } from './secret-writes.js';

export type { SecretsDeps } from './secret-store.js';
export type { SecretInput } from './secret-model.js';
export type { SecretRef } from './secret-reads.js';

export function createSecretsService(deps: SecretsDeps) {
  const store = createSecretStore(deps);
  return {
    ...createSecretWrites(store),
    ...createSecretChanges(store),
    ...createSecretReads(store),
  };
}

export type SecretsService = ReturnType<typeof createSecretsService>;
