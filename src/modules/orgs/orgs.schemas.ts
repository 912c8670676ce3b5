import { Type, type Static } from '@sinclair/typebox';
import { NullableCursor, OrgParams, PageQuery, Timestamp } from '../../http/schemas.js';

export const SLUG_PATTERN = '^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$';

export const Slug = Type.String({ pattern: SLUG_PATTERN, description: 'lowercase letters, digits and inner dashes, 1-63 characters' });
/**
 * A name people read in lists: not blank, no space at either end, no control character and none of
 * the marks that reorder text unseen (bidi overrides and isolates) or break lines.
 */
export const DISPLAY_NAME_PATTERN = '^(?!\\s)(?!.*\\s$)[^\\p{Cc}\\u2028\\u2029\\u202a-\\u202e\\u2066-\\u2069]+$';
export const OrgName = Type.String({ minLength: 1, maxLength: 200, pattern: DISPLAY_NAME_PATTERN, description: 'Not blank, no space at either end, no control characters or bidirectional overrides; up to 200 characters.' });
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
