// Service shapes. A service's spec says what to run (command or image), where it listens, how to
// check its health, its plain variables and which organization secrets it takes (by reference:
// the values stay in the secret store until a runner claims a deployment).
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { ForceDeleteQuery, NullableCursor, OrgIdParam, Timestamp } from '../../http/schemas.js';
import type { Limits } from '../../platform/config.js';
import { SLUG_PATTERN } from '../orgs/orgs.schemas.js';
import { KEY_NAME_PATTERN, SecretName } from '../secrets/secrets.schemas.js';

/** Bounds of a spec, documented in the schema and enforced by it. */
export const SPEC_LIMITS = { argv: 256, argChars: 8192, variables: 500, secretRefs: 100 } as const;

export const ServiceName = Type.String({ pattern: SLUG_PATTERN, description: 'lowercase letters, digits and inner dashes, 1-63 characters' });

export const VariableName = Type.String({ pattern: KEY_NAME_PATTERN, description: 'an environment-variable name: letters, digits and `_`, not starting with a digit' });

/** Seconds a new process has to become healthy when its health check does not say. */
export const DEFAULT_HEALTH_TIMEOUT_SECONDS = 30;

const healthPath = Type.String({ pattern: '^/[!-~]*$', maxLength: 1024, description: 'HTTP GET path, with a query if need be; any 2xx answer is healthy. Printable ASCII without spaces: percent-encode anything else.' });
const healthTimeout = { minimum: 1, maximum: 3600, description: 'How long a new process has to become healthy.' };

/** A health check as saved and as a runner gets it: the timeout always filled in. */
export const HealthCheck = Type.Object({ path: healthPath, timeoutSeconds: Type.Integer(healthTimeout) }, { additionalProperties: false });

/** A health check as a client writes it. */
const HealthCheckInput = Type.Object({
  path: healthPath,
  timeoutSeconds: Type.Optional(Type.Integer({ ...healthTimeout, description: `${healthTimeout.description} Default ${DEFAULT_HEALTH_TIMEOUT_SECONDS}.` })),
}, { additionalProperties: false });

export const SecretReference = Type.Object({
  secret: SecretName,
  key: Type.Optional({ ...VariableName, description: 'One key of the secret; without it, every key is exported under its own name.' }),
  as: Type.Optional({ ...VariableName, description: 'The variable name for `key` (default: the key itself). Only with `key`.' }),
}, { additionalProperties: false });
export type SecretReferenceT = Static<typeof SecretReference>;

/** Variables: name → value, with the configured value size. */
export function variablesSchema(limits: Pick<Limits, 'valueChars'>, description: string) {
  return Type.Unsafe<Record<string, string>>({
    type: 'object',
    description: `${description} Names match ${KEY_NAME_PATTERN}; at most ${SPEC_LIMITS.variables}, values up to ${limits.valueChars} characters (SLIPWAY_MAX_VALUE_CHARS). Not PORT, which the runner sets (422 \`reserved_variable\`).`,
    maxProperties: SPEC_LIMITS.variables,
    propertyNames: { pattern: KEY_NAME_PATTERN },
    additionalProperties: { type: 'string', maxLength: limits.valueChars, 'x-limit': 'SLIPWAY_MAX_VALUE_CHARS' },
  });
}

const runFields = {
  command: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: SPEC_LIMITS.argChars }), {
    minItems: 1, maxItems: SPEC_LIMITS.argv, description: 'argv: the program and its arguments, run without a shell.',
  })),
  image: Type.Optional(Type.String({ minLength: 1, maxLength: 512, description: 'An image reference, for runners that run images.' })),
  port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535, description: 'The port it listens on; runners that choose ports pass theirs as PORT.' })),
  minReadySeconds: Type.Optional(Type.Integer({
    minimum: 1, maximum: 3600,
    description: 'How long a new process must keep running once healthy (its health check passed, or without one, it ran a second) before its deployment succeeds and the previous process is stopped: one that exits within it fails the deployment, and the previous one keeps serving. Absent: it succeeds once healthy.',
  })),
};

/** The spec as a client writes it: a command or an image (or both), the rest optional. */
export function serviceSpecSchema(limits: Pick<Limits, 'valueChars' | 'specBytes'>) {
  return Type.Object({
    ...runFields,
    healthCheck: Type.Optional(HealthCheckInput),
    variables: Type.Optional(variablesSchema(limits, 'Plain (non-secret) environment variables.')),
    secrets: Type.Optional(Type.Array(SecretReference, {
      maxItems: SPEC_LIMITS.secretRefs,
      description: `Organization secrets to export as variables (at most ${SPEC_LIMITS.secretRefs}). Checked when the service is saved: an unknown secret or key is a 422.`,
    })),
  }, {
    additionalProperties: false,
    description: `Needs \`command\` or \`image\`. At most ${limits.specBytes} bytes as JSON, as saved with its defaults filled in (SLIPWAY_MAX_SPEC_BYTES; 400 \`limit_exceeded\` above).`,
  });
}

/** Output schemas are plain: limits matter on the way in. */
function specView<S extends TSchema>(secretItem: S) {
  return Type.Object({
    ...runFields,
    healthCheck: Type.Optional(HealthCheck),
    variables: Type.Record(Type.String(), Type.String()),
    secrets: Type.Array(secretItem),
  });
}

export const ServiceSpecView = specView(SecretReference);
export type ServiceSpec = Static<typeof ServiceSpecView>;

export const ServiceSchema = Type.Object({
  id: Type.String({ examples: ['svc_01jd6xq0m3b8c2v4w5x6y7z8a9'] }),
  name: Type.String(),
  description: Type.String(),
  version: Type.Integer({ minimum: 1, description: '1 on creation, one more on every change; deployments record the version they took.' }),
  spec: ServiceSpecView,
  createdAt: Timestamp,
  updatedAt: Timestamp,
});
export type Service = Static<typeof ServiceSchema>;

const Description = Type.String({ maxLength: 500 });

export function createServiceBody(limits: Pick<Limits, 'valueChars' | 'specBytes'>) {
  return Type.Object({ name: ServiceName, description: Type.Optional(Description), spec: serviceSpecSchema(limits) }, { additionalProperties: false });
}

export function updateServiceBody(limits: Pick<Limits, 'valueChars' | 'specBytes'>) {
  const spec = serviceSpecSchema(limits);
  return Type.Object({
    name: Type.Optional(ServiceName),
    description: Type.Optional(Description),
    spec: Type.Optional({ ...spec, description: `Replaces the whole spec. ${spec.description}` }),
  }, { additionalProperties: false, minProperties: 1 });
}

export type ServiceSpecInput = Static<ReturnType<typeof serviceSpecSchema>>;

export const ServiceParams = Type.Object({
  orgId: OrgIdParam,
  svc: Type.String({ minLength: 1, maxLength: 100, description: 'Service id (`svc_…`) or name.' }),
});

export const ServiceList = Type.Object({ services: Type.Array(ServiceSchema), nextCursor: NullableCursor });

/** A secret reference pinned to the version a deployment uses. */
export const PinnedSecretReference = Type.Object({
  secret: Type.String({ description: 'The secret\'s name when the deployment was created (for display).' }),
  secretId: Type.String({ description: 'The exact secret pinned: a secret deleted for good and created again under the same name is another secret.' }),
  key: Type.Optional(Type.String()),
  as: Type.Optional(Type.String()),
  version: Type.Integer({ minimum: 1, description: 'The secret version this deployment uses, whatever happens to the secret later.' }),
});
export type PinnedSecretReferenceT = Static<typeof PinnedSecretReference>;

/** The spec a deployment froze at creation: variables merged with its overrides, secret versions pinned. */
export const DeploymentSpec = specView(PinnedSecretReference);
export type DeploymentSpecT = Static<typeof DeploymentSpec>;

export const DeleteServiceQuery = ForceDeleteQuery('delete it even while it serves (its runners stop its processes)');
