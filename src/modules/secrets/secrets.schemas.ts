// Secret request and response shapes. Limits come from configuration, so the schemas are built
// at start-up and the OpenAPI document shows the limits in force.
import { Type, type Static } from '@sinclair/typebox';
import { Timestamp } from '../../http/schemas.js';
import type { Limits } from '../../platform/config.js';

export const SECRET_NAME_PATTERN = '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$';
export const KEY_NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_]{0,255}$';

export const SecretName = Type.String({
  pattern: SECRET_NAME_PATTERN,
  description: 'letters, digits, `_`, `.` and `-`, starting with a letter or digit; 1-128 characters',
});

export function valuesSchema(limits: Limits) {
  return Type.Unsafe<Record<string, string>>({
    type: 'object',
    description: `Key → value. Key names are environment-variable names (${KEY_NAME_PATTERN}); at most ${limits.keysPerSecret} keys, values up to ${limits.valueChars} characters.`,
    minProperties: 1,
    maxProperties: limits.keysPerSecret,
    'x-limit': 'SLIPWAY_MAX_KEYS_PER_SECRET',
    propertyNames: { pattern: KEY_NAME_PATTERN },
    additionalProperties: { type: 'string', maxLength: limits.valueChars, 'x-limit': 'SLIPWAY_MAX_VALUE_CHARS' },
  });
}

export const SecretMetadata = Type.Object({
  name: Type.String(),
  version: Type.Integer({ minimum: 1 }),
  keys: Type.Array(Type.String(), { description: 'Names of the keys, sorted; values are never returned here.' }),
  createdAt: Timestamp,
  updatedAt: Timestamp,
});
export type SecretMetadataT = Static<typeof SecretMetadata>;

export function bulkBodySchema(limits: Limits) {
  return Type.Object({
    secrets: Type.Array(Type.Object({ name: SecretName, values: valuesSchema(limits) }, { additionalProperties: false }), {
      minItems: 1,
      maxItems: limits.secretsPerRequest,
      'x-limit': 'SLIPWAY_MAX_SECRETS_PER_REQUEST',
    }),
  }, { additionalProperties: false });
}
export type BulkBody = Static<ReturnType<typeof bulkBodySchema>>;

export const SecretList = Type.Object({ secrets: Type.Array(SecretMetadata) });
