import { Type, type Static } from '@sinclair/typebox';
import { ForceDeleteQuery, NullableCursor, OrgIdParam, Timestamp } from '../../http/schemas.js';
import { SLUG_PATTERN } from '../orgs/orgs.schemas.js';

export const EnvironmentName = Type.String({
  pattern: SLUG_PATTERN,
  description: 'lowercase letters, digits and inner dashes, 1-63 characters (`production`, `staging`, `pr-42`)',
});

export const EnvironmentSchema = Type.Object({
  id: Type.String({ examples: ['env_01jd6xq0m3b8c2v4w5x6y7z8a9'] }),
  name: Type.String(),
  description: Type.String(),
  protected: Type.Boolean({ description: 'Only admins and owners may deploy to a protected environment.' }),
  createdAt: Timestamp,
  updatedAt: Timestamp,
});
export type Environment = Static<typeof EnvironmentSchema>;

const Description = Type.String({ maxLength: 500 });

export const CreateEnvironmentBody = Type.Object({
  name: EnvironmentName,
  description: Type.Optional(Description),
  protected: Type.Optional(Type.Boolean({ default: false })),
}, { additionalProperties: false });

export const UpdateEnvironmentBody = Type.Object({
  name: Type.Optional(EnvironmentName),
  description: Type.Optional(Description),
  protected: Type.Optional(Type.Boolean()),
}, { additionalProperties: false, minProperties: 1 });

export const EnvironmentParams = Type.Object({
  orgId: OrgIdParam,
  env: Type.String({ minLength: 1, maxLength: 100, description: 'Environment id (`env_…`) or name.' }),
});

export const EnvironmentList = Type.Object({ environments: Type.Array(EnvironmentSchema), nextCursor: NullableCursor });

export const DeleteEnvironmentQuery = ForceDeleteQuery('delete it even while services serve in it (their runners stop them)');
