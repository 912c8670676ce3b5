import { Type, type Static } from '@sinclair/typebox';
import { NullableCursor, OrgParams, PageQuery, Timestamp } from '../../http/schemas.js';

export const SLUG_PATTERN = '^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$';

export const Slug = Type.String({ pattern: SLUG_PATTERN, description: 'lowercase letters, digits and inner dashes, 1-63 characters' });
/**
 * A name people read in lists: something visible (a letter, digit, mark of punctuation or symbol),
 * no space at either end, no control or format character (zero-width spaces, bidi marks, overrides
 * and isolates; the zero-width joiner of an emoji sequence excepted), line separator or filler
 * that shows as blank.
 */
export const DISPLAY_NAME_PATTERN = '^(?!\\s)(?!.*\\s$)(?=.*[\\p{L}\\p{N}\\p{P}\\p{S}])(?:[^\\p{Cc}\\p{Cf}\\p{Zl}\\p{Zp}\\u115f\\u1160\\u2800\\u3164\\uffa0]|\\u200d)+$';
export const OrgName = Type.String({ minLength: 1, maxLength: 200, pattern: DISPLAY_NAME_PATTERN, description: 'Something visible, no space at either end, no control or format characters (zero-width spaces, bidirectional marks); up to 200 characters.' });
/** An organization id of the external issuer (a ZITADEL organization id is numeric). */
export const EXTERNAL_ID_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$';
export const ExternalId = Type.String({
  pattern: EXTERNAL_ID_PATTERN,
  description: 'The linked organization of the external issuer (its `urn:zitadel:iam:user:resourceowner:id`); its tokens act in this organization.',
  examples: ['263952365928112131'],
});

export const OrganizationSchema = Type.Object({
  id: Type.String({ examples: ['org_01jd6xq0m3b8c2v4w5x6y7z8a9'] }),
  slug: Slug,
  name: Type.String(),
  externalId: Type.Optional(ExternalId),
  createdAt: Timestamp,
  updatedAt: Timestamp,
});
export type Organization = Static<typeof OrganizationSchema>;

export const CreateOrgBody = Type.Object({ slug: Slug, name: OrgName }, { additionalProperties: false });
export const UpdateOrgBody = Type.Object({ slug: Type.Optional(Slug), name: Type.Optional(OrgName) }, { additionalProperties: false, minProperties: 1 });

export const OrgList = Type.Object({ orgs: Type.Array(OrganizationSchema), nextCursor: NullableCursor });
export { OrgParams, PageQuery };
