// HTTP pieces the secret routes share: If-Match and If-None-Match in, ETag out, all documented.
import { ifMatchHeaders, readHeaders, withEtag as withEtagOf } from '../../http/etag-headers.js';

export { preconditionsOf, tagged } from '../../http/etag-headers.js';

export const IfMatchHeaders = ifMatchHeaders('secret');
export const ReadHeaders = readHeaders('secret');

/** The ETag response header, documented. */
export function withEtag<T extends object>(schema: T): T {
  return withEtagOf(schema, 'secret');
}
