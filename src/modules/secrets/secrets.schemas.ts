// Secret request and response shapes. Limits come from configuration, so the schemas are built
// at start-up and the OpenAPI document shows the limits in force.
import { Type, type Static } from '@sinclair/typebox';
import { NullableCursor, OrgIdParam, PageQuery, SequenceNumber, Timestamp } from '../../http/schemas.js';
import { KEYS_PER_SECRET_CEILING, type Limits } from '../../platform/config.js';

export const SECRET_NAME_PATTERN = '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$';
export const KEY_NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_]{0,255}$';

export const SecretName = Type.String({
  pattern: SECRET_NAME_PATTERN,
  description: 'letters, digits, `_`, `.` and `-`, starting with a letter or digit; 1-128 characters',
});

const KeyName = Type.String({ pattern: KEY_NAME_PATTERN, description: 'an environment-variable name: letters, digits and `_`, not starting with a digit; 1-256 characters' });

/** Key → value maps; `minKeys` 0 for a patch's `set`, which may be empty when `unset` says what to do. */
export function valuesSchema(limits: Limits, minKeys = 1) {
  return Type.Unsafe<Record<string, string>>({
    type: 'object',
    description: `Key → value. Key names are environment-variable names (${KEY_NAME_PATTERN}); at most ${limits.keysPerSecret} keys (SLIPWAY_MAX_KEYS_PER_SECRET), values up to ${limits.valueChars} characters (SLIPWAY_MAX_VALUE_CHARS).`,
    minProperties: minKeys,
    maxProperties: limits.keysPerSecret,
    'x-limit': 'SLIPWAY_MAX_KEYS_PER_SECRET',
    propertyNames: { pattern: KEY_NAME_PATTERN },
    additionalProperties: { type: 'string', maxLength: limits.valueChars, 'x-limit': 'SLIPWAY_MAX_VALUE_CHARS' },
  });
}

export const SecretMetadata = Type.Object({
  name: Type.String(),
  version: Type.Integer({ minimum: 1, description: 'The current version: 1 on creation, one more on every change.' }),
  keys: Type.Array(Type.String(), { description: 'Names of the keys, sorted; values are never returned here.' }),
  createdAt: Timestamp,
  updatedAt: Timestamp,
});

/** A secret in a list: a deleted one (`deleted=true`) also says when it was deleted and until when it can be restored. */
export const ListedSecret = Type.Composite([SecretMetadata, Type.Object({
  deletedAt: Type.Optional(Timestamp),
  restorableUntil: Type.Optional({ ...Timestamp, description: 'Deleted secrets only: until when `POST …/restore` can bring it back; it is purged after.' }),
})]);
export type SecretMetadataT = Static<typeof ListedSecret>;

export function bulkBodySchema(limits: Limits) {
  return Type.Object({
    secrets: Type.Array(Type.Object({ name: SecretName, values: valuesSchema(limits) }, { additionalProperties: false }), {
      minItems: 1,
      maxItems: limits.secretsPerRequest,
      'x-limit': 'SLIPWAY_MAX_SECRETS_PER_REQUEST',
      description: `At most ${limits.secretsPerRequest} secrets (SLIPWAY_MAX_SECRETS_PER_REQUEST), each name once.`,
    }),
  }, { additionalProperties: false });
}

export const SecretList = Type.Object({ secrets: Type.Array(SecretMetadata) });

export const SecretPage = Type.Object({ secrets: Type.Array(ListedSecret), nextCursor: NullableCursor });

export const SecretListQuery = Type.Composite([PageQuery, Type.Object({
  prefix: Type.Optional(Type.String({ maxLength: 128, description: 'Only secrets whose name starts with this (case-sensitive).' })),
  deleted: Type.Optional(Type.Boolean({ default: false, description: 'true: list the deleted secrets that can still be restored, instead of the live ones.' })),
})]);

/** `unchanged`: the values were already these; no version was made and `version` is the current one. */
const ChangeResult = Type.Union([Type.Literal('updated'), Type.Literal('unchanged')]);
const UpsertResult = Type.Union([Type.Literal('created'), Type.Literal('updated'), Type.Literal('unchanged')]);

const CHANGED = '`updated`: a new version was made. `unchanged`: the values were already these, so no version was made (the metadata is the current one).';

/** What a new version changed, by key name (never a value). */
const KeyChanges = Type.Object({
  added: Type.Array(Type.String()), removed: Type.Array(Type.String()), changed: Type.Array(Type.String({ description: 'A key whose value differs.' })),
}, { description: 'With `updated`: the keys the new version added, removed and gave another value, by name only.' });

export const SecretChange = Type.Composite([SecretMetadata, Type.Object({ result: Type.Union(ChangeResult.anyOf, { description: CHANGED }), keyChanges: Type.Optional(KeyChanges) })]);

/** What a restore answers: a version brought back (as a change) or a deleted secret brought back whole. */
export const SecretRestore = Type.Composite([SecretMetadata, Type.Object({
  result: Type.Union([...ChangeResult.anyOf, Type.Literal('restored')], { description: `${CHANGED} \`restored\`: a deleted secret was brought back as it was.` }),
  keyChanges: Type.Optional(KeyChanges),
})]);
export type SecretChangeT = Static<typeof SecretChange>;
export type SecretRestoreT = Static<typeof SecretRestore>;

export const UpsertList = Type.Object({
  secrets: Type.Array(Type.Composite([SecretMetadata, Type.Object({ result: UpsertResult, keyChanges: Type.Optional(KeyChanges) })]), { description: 'In request order.' }),
});
export type UpsertItemT = Static<typeof UpsertList>['secrets'][number];

export const SecretParams = Type.Object({ orgId: OrgIdParam, name: SecretName });
export const SecretVersionParams = Type.Object({ orgId: OrgIdParam, name: SecretName, version: SequenceNumber({ minimum: 1 }) });

export function replaceBodySchema(limits: Limits) {
  return Type.Object({ values: valuesSchema(limits) }, { additionalProperties: false });
}

export function patchBodySchema(limits: Limits) {
  return Type.Object({
    set: Type.Optional(valuesSchema(limits, 0)),
    // As many as a secret can have under the highest limit: one made under a higher limit than
    // now's may lose more keys than the limit at once.
    unset: Type.Optional(Type.Array(KeyName, { maxItems: KEYS_PER_SECRET_CEILING, uniqueItems: true })),
  }, { additionalProperties: false });
}

export const DeleteQuery = Type.Object({
  permanent: Type.Optional(Type.Boolean({ default: false, description: 'true (admin or owner): destroy every version now instead of a restorable delete.' })),
});

export const VersionBody = Type.Object({
  version: Type.Optional(SequenceNumber({ minimum: 1 })),
}, { additionalProperties: false });

export const SecretVersion = Type.Object({
  version: Type.Integer({ minimum: 1 }),
  keys: Type.Array(Type.String(), { description: 'Names of the keys this version holds.' }),
  createdAt: Timestamp,
  createdBy: Type.Union([Type.String(), Type.Null()], { description: 'Who made it: a service user id, or `cli`.' }),
});
export type SecretVersionT = Static<typeof SecretVersion>;

export const SecretVersionPage = Type.Object({ versions: Type.Array(SecretVersion, { description: 'Newest first.' }), nextCursor: NullableCursor });

export const RevealedSecret = Type.Object({
  name: Type.String(),
  version: Type.Integer({ minimum: 1 }),
  values: Type.Record(Type.String(), Type.String()),
});
export type RevealedSecretT = Static<typeof RevealedSecret>;
