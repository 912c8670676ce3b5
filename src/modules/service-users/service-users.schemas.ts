import { Type, type Static } from '@sinclair/typebox';
import { NullableCursor, OrgIdParam, Timestamp } from '../../http/schemas.js';
import { RoleSchema } from '../auth/roles.js';

export const SERVICE_USER_NAME_PATTERN = '^(?!su_[0-9a-hjkmnp-tv-z]{26}$)[A-Za-z0-9](?:[A-Za-z0-9 ._-]{0,98}[A-Za-z0-9._-])?$';
const Name = Type.String({ pattern: SERVICE_USER_NAME_PATTERN, description: 'letters, digits, spaces, dots, dashes and underscores, starting with a letter or digit and not ending with a space; 1-100 characters; not shaped like a service user id (`su_` and 26 characters), which would name another user' });

export const ClientSecretInfo = Type.Object({
  id: Type.String({ examples: ['cs_01jd6xq0m3b8c2v4w5x6y7z8a9'] }),
  hint: Type.String({ description: 'The first characters of the secret, to tell two live secrets apart.' }),
  createdAt: Timestamp,
  lastUsedAt: Type.Union([Timestamp, Type.Null()], { description: 'Last request answered with it: a token, an introspection or a revocation (updated at most once a minute).' }),
});

export const ServiceUserSchema = Type.Object({
  id: Type.String({ examples: ['su_01jd6xq0m3b8c2v4w5x6y7z8a9'] }),
  clientId: Type.String({ description: 'The OAuth client id (the same as the id).' }),
  orgId: Type.String(),
  name: Type.String(),
  description: Type.String(),
  role: RoleSchema,
  instanceAdmin: Type.Boolean({ description: 'May create organizations and acts as owner in every one.' }),
  disabled: Type.Boolean(),
  disabledAt: Type.Union([Timestamp, Type.Null()]),
  environments: Type.Union([Type.Array(Type.Object({ id: Type.String(), name: Type.String() })), Type.Null()], {
    description: 'A runner\'s: the environments whose deployments it may take (and whose secret values it is handed); null: all of the organization\'s. Always null for other roles. Environments deleted since are left out.',
  }),
  secrets: Type.Array(ClientSecretInfo, { description: 'Live client secrets (at most two: rotation without downtime).' }),
  createdAt: Timestamp,
  updatedAt: Timestamp,
});
export type ServiceUser = Static<typeof ServiceUserSchema>;

/** What creating a service user (or bootstrap.json) hands out once: everything a client needs. */
export const Credentials = Type.Object({
  orgId: Type.String(),
  clientId: Type.String(),
  clientSecret: Type.String({ description: 'Shown once; only a keyed hash is stored.' }),
  tokenUrl: Type.String({ format: 'uri' }),
  scope: Type.String({ description: 'The exact scope string to request.' }),
  baseUrl: Type.String({ format: 'uri', description: 'The API\'s base URL (SLIPWAY_BASE_URL): its paths start with /v1.' }),
});
export type CredentialsT = Static<typeof Credentials>;

export const CreatedServiceUser = Type.Intersect([ServiceUserSchema, Credentials]);

/** A runner's environments as a client names them (names or ids); the schema's bounds are those of a claim's. */
const RunnerEnvironments = Type.Array(Type.String({ minLength: 1, maxLength: 100 }), {
  minItems: 1, maxItems: 100, uniqueItems: true,
  description: 'Runners only: the environments (names or ids) whose deployments it may take; it is handed no other. Left out: all of the organization\'s.',
});

export const CreateServiceUserBody = Type.Object({
  name: Name,
  description: Type.Optional(Type.String({ maxLength: 500 })),
  role: RoleSchema,
  environments: Type.Optional(RunnerEnvironments),
}, { additionalProperties: false });

export const UpdateServiceUserBody = Type.Object({
  name: Type.Optional(Name),
  description: Type.Optional(Type.String({ maxLength: 500 })),
  role: Type.Optional(RoleSchema),
  disabled: Type.Optional(Type.Boolean({ description: 'A disabled service user gets no tokens, and its live tokens stop working.' })),
  environments: Type.Optional(Type.Union([RunnerEnvironments, Type.Null()], {
    description: 'Runners only: the environments (names or ids) whose deployments it may take from now on, a claim already waiting included; null: all. A runner whose role changes to another has none kept.',
  })),
}, { additionalProperties: false, minProperties: 1 });

export const ServiceUserParams = Type.Object({ orgId: OrgIdParam, id: Type.String({ maxLength: 100, description: 'Service user id or name.' }) });
export const ClientSecretParams = Type.Object({ orgId: OrgIdParam, id: Type.String({ maxLength: 100 }), secretId: Type.String({ maxLength: 100 }) });

export const NewClientSecret = Type.Intersect([ClientSecretInfo, Type.Object({ clientSecret: Type.String({ description: 'Shown once.' }) })]);

export const ServiceUserList = Type.Object({ serviceUsers: Type.Array(ServiceUserSchema), nextCursor: NullableCursor });
