import { Type, type Static } from '@sinclair/typebox';
import { ForceDeleteQuery, NullableCursor, OrgIdParam, Timestamp } from '../../http/schemas.js';
import type { Limits } from '../../platform/config.js';
import { SLUG_PATTERN } from '../orgs/orgs.schemas.js';
import { SecretReference, SPEC_LIMITS, variablesSchema } from '../services/services.schemas.js';

export const EnvironmentName = Type.String({
  pattern: SLUG_PATTERN,
  description: 'lowercase letters, digits and inner dashes, 1-63 characters (`production`, `staging`, `pr-42`)',
});

export const EnvironmentLockSchema = Type.Object({
  reason: Type.String({ description: 'Why, as the one who locked it said.' }),
  lockedBy: Type.Union([Type.String(), Type.Null()], { description: 'Who locked it: the id of the service user that asked.' }),
  lockedAt: Timestamp,
}, { additionalProperties: false });

export const LockEnvironmentBody = Type.Object({
  reason: Type.String({ minLength: 1, maxLength: 500, pattern: '[^\\s\\p{Cf}]', description: 'Why it is locked (not blank: something to read besides spaces and invisible marks): shown to everyone who is refused a deployment into it.' }),
}, { additionalProperties: false });

export const EnvironmentSchema = Type.Object({
  id: Type.String({ examples: ['env_01jd6xq0m3b8c2v4w5x6y7z8a9'] }),
  name: Type.String(),
  description: Type.String(),
  protected: Type.Boolean({ description: 'Only admins and owners may deploy to a protected environment.' }),
  variables: Type.Record(Type.String(), Type.String(), { description: 'Plain variables every deployment into it gets, over its service\'s plain variables of the same name.' }),
  secrets: Type.Array(SecretReference, { description: 'Secret references every deployment into it gets, besides its service\'s.' }),
  lock: Type.Union([EnvironmentLockSchema, Type.Null()], { description: 'Set while it is locked (a deploy freeze): no deployment into it is created, rolled back to or promoted into (409 `environment_locked`). Null while it is not.' }),
  version: Type.Integer({ minimum: 1, description: 'Up by one with each change: its name, description, protection, variables or secrets, and a lock or an unlock. Its ETag names it.' }),
  createdAt: Timestamp,
  updatedAt: Timestamp,
});
export type Environment = Static<typeof EnvironmentSchema>;

const Description = Type.String({ maxLength: 500 });

/** An environment's configuration as a client writes it: the same shapes and bounds as a service spec's. */
function configurationFields(limits: Pick<Limits, 'valueChars' | 'specBytes'>) {
  return {
    variables: Type.Optional(variablesSchema(limits, 'Plain variables every deployment into this environment gets: they replace its service\'s plain variables of the same name, and a deployment\'s own `variables` replace them. One that a secret reference exports too (the service\'s or the environment\'s) is refused (422 `variable_conflict`) when a deployment is created.')),
    secrets: Type.Optional(Type.Array(SecretReference, {
      maxItems: SPEC_LIMITS.secretRefs,
      description: `Organization secrets every deployment into this environment exports as variables, besides its service's (at most ${SPEC_LIMITS.secretRefs}); their versions are pinned when a deployment is created. Checked when saved: an unknown secret or key is a 422. A variable both these and the service's references export is refused when a deployment is created (422 \`variable_conflict\`): keep a secret that differs per environment out of the service and here.`,
    })),
  };
}

export function createEnvironmentBody(limits: Pick<Limits, 'valueChars' | 'specBytes'>) {
  return Type.Object({
    name: EnvironmentName,
    description: Type.Optional(Description),
    protected: Type.Optional(Type.Boolean({ default: false })),
    ...configurationFields(limits),
  }, { additionalProperties: false, description: `\`variables\` and \`secrets\` together take at most ${limits.specBytes} bytes as JSON (SLIPWAY_MAX_SPEC_BYTES).` });
}

export function updateEnvironmentBody(limits: Pick<Limits, 'valueChars' | 'specBytes'>) {
  return Type.Object({
    name: Type.Optional(EnvironmentName),
    description: Type.Optional(Description),
    protected: Type.Optional(Type.Boolean()),
    ...configurationFields(limits),
  }, { additionalProperties: false, minProperties: 1, description: `\`variables\` and \`secrets\`, when given, each replace the whole of what the environment had; together at most ${limits.specBytes} bytes as JSON (SLIPWAY_MAX_SPEC_BYTES).` });
}

export const EnvironmentParams = Type.Object({
  orgId: OrgIdParam,
  env: Type.String({ minLength: 1, maxLength: 100, description: 'Environment id (`env_…`) or name.' }),
});

export const EnvironmentList = Type.Object({ environments: Type.Array(EnvironmentSchema), nextCursor: NullableCursor });

export const DeleteEnvironmentQuery = ForceDeleteQuery('delete it even while services serve in it (their runners stop them)');
