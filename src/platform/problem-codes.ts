// Every `code` a refusal can carry, with its status and what it means: the catalogue the OpenAPI
// document and the README publish. A problem's `type` is PROBLEM_TYPE_BASE and its code, with `-`
// for `_`. The CLI's `--json` errors carry the same codes (the `keys` commands' own ones included).

export const PROBLEM_TYPE_BASE = 'https://slipway.dev/problems/';

export function problemType(code: string): string {
  return PROBLEM_TYPE_BASE + code.replace(/_/g, '-');
}

export interface ProblemCode {
  status: number;
  meaning: string;
}

export const PROBLEM_CODES: Readonly<Record<string, ProblemCode>> = {
  // 400
  invalid_request: { status: 400, meaning: 'A field, parameter or header is missing or invalid; `errors` points at each.' },
  malformed_json: { status: 400, meaning: 'The body is not I-JSON: not JSON, not UTF-8, a name twice in one object, an unpaired surrogate.' },
  malformed_http: { status: 400, meaning: 'Not valid HTTP/1.1 (the parser\'s code is in `detail`); the connection is closed.' },
  malformed_path: { status: 400, meaning: 'A percent-encoding in the path that is not UTF-8.' },
  malformed_query: { status: 400, meaning: 'A percent-encoding in the query that is not UTF-8.' },
  invalid_cursor: { status: 400, meaning: 'A cursor this API did not return, or returned for other filters.' },
  limit_exceeded: { status: 400, meaning: 'A configured limit; `limit` names the setting and its value.' },
  duplicate_names: { status: 400, meaning: 'A name given twice in one bulk request.' },
  external_token: { status: 400, meaning: '`DELETE /v1/token` with an external issuer\'s token (`issuer`): revoke it at that issuer.' },
  // 401
  unauthenticated: { status: 401, meaning: 'No bearer token.' },
  invalid_token: { status: 401, meaning: 'A token that is malformed, expired, revoked, for another audience, or whose service user is disabled or gone.' },
  // 403
  forbidden: { status: 403, meaning: 'The caller\'s role is too low (`requiredRole`).' },
  environment_protected: { status: 403, meaning: 'A protected environment takes deployments from admins and owners only.' },
  org_not_linked: { status: 403, meaning: 'An external issuer\'s organization that no organization here is linked to.' },
  role_not_granted: { status: 403, meaning: 'An external issuer\'s token that grants none of Slipway\'s roles.' },
  // 404
  route_not_found: { status: 404, meaning: 'No such path.' },
  organization_not_found: { status: 404, meaning: 'No such organization, or one the caller does not belong to.' },
  service_user_not_found: { status: 404, meaning: 'No such service user in the organization.' },
  client_secret_not_found: { status: 404, meaning: 'No such client secret of the service user.' },
  secret_not_found: { status: 404, meaning: 'No such secret in the organization.' },
  secret_deleted: { status: 404, meaning: 'The secret is deleted (restorable until `restorableUntil`); as 409, a bulk create names a deleted secret.' },
  secret_version_not_found: { status: 404, meaning: 'No such version of the secret, or it was purged.' },
  secret_key_not_found: { status: 404, meaning: 'A pinned secret version does not hold a key the deployment\'s spec names.' },
  environment_not_found: { status: 404, meaning: 'No such environment in the organization.' },
  service_not_found: { status: 404, meaning: 'No such service in the organization.' },
  deployment_not_found: { status: 404, meaning: 'No such deployment in the organization.' },
  webhook_not_found: { status: 404, meaning: 'No such webhook in the organization.' },
  signing_key_not_found: { status: 404, meaning: 'CLI `keys revoke-signing`: no such signing key.' },
  // 405, 408, 417
  method_not_allowed: { status: 405, meaning: 'The path does not answer this method (`allowed`, and the Allow header).' },
  request_timeout: { status: 408, meaning: 'The request did not arrive in full in time.' },
  expectation_failed: { status: 417, meaning: 'An `Expect` other than `100-continue`, which the server does not meet; nothing was done.' },
  // 409
  org_slug_taken: { status: 409, meaning: 'Another organization has this slug, or had it (a slug given up, or that of a deleted organization, stays reserved to its organization).' },
  deleted_meanwhile: { status: 409, meaning: 'Something the request names was deleted by another request at the same moment; nothing was written (Retry-After: 1).' },
  organization_in_use: { status: 409, meaning: 'The organization has deployments queued, in progress or serving, or runners online; `conflicts` lists them (cancel the deployments, delete its services or environments with `?force=true`, and stop the runners).' },
  organization_has_instance_admins: { status: 409, meaning: 'The organization holds instance administrators, which deleting it would delete; `conflicts` lists them.' },
  org_external_id_taken: { status: 409, meaning: 'Another organization is linked to this external organization.' },
  service_user_name_taken: { status: 409, meaning: 'Another service user of the organization has this name.' },
  environment_name_taken: { status: 409, meaning: 'Another environment of the organization has this name.' },
  service_name_taken: { status: 409, meaning: 'Another service of the organization has this name.' },
  last_owner: { status: 409, meaning: 'The change would leave the organization without an enabled owner.' },
  last_client_secret: { status: 409, meaning: 'A service user keeps at least one client secret.' },
  too_many_client_secrets: { status: 409, meaning: 'The service user holds as many live client secrets as it may; `conflicts` lists them.' },
  secret_exists: { status: 409, meaning: 'A bulk create names secrets that exist; `conflicts` lists them.' },
  secret_not_deleted: { status: 409, meaning: 'Restoring a secret that is not deleted.' },
  secret_changed: { status: 409, meaning: 'Another request changed the secret at the same moment; nothing was written (Retry-After).' },
  environment_in_use: { status: 409, meaning: 'The environment has deployments queued or in progress, or serving (then `?force=true`); `conflicts` lists them.' },
  service_in_use: { status: 409, meaning: 'The service has deployments queued or in progress, or serving (then `?force=true`); `conflicts` lists them.' },
  invalid_transition: { status: 409, meaning: 'A deployment state change the state graph does not have (`state`, `requested`, `allowedTransitions`).' },
  not_rollbackable: { status: 409, meaning: 'Only a succeeded or superseded deployment can be rolled back to.' },
  environment_locked: { status: 409, meaning: 'The environment is locked (a deploy freeze): no deployment into it until it is unlocked; `lock` says why, by whom and since when.' },
  not_promotable: { status: 409, meaning: 'Only a succeeded or superseded deployment, made by a Slipway that records its spec\'s sources, can be promoted.' },
  concurrent_change: { status: 409, meaning: 'The secret or deployment changed at the same moment; nothing was written (Retry-After).' },
  lease_lost: { status: 409, meaning: 'The runner no longer holds the deployment\'s lease: stop and claim again.' },
  deployment_cancelled: { status: 409, meaning: 'The deployment was cancelled: the runner stops working on it.' },
  deployment_finished: { status: 409, meaning: 'The deployment is finished and takes no more reports.' },
  write_conflict: { status: 409, meaning: 'PostgreSQL stopped this write for a concurrent one; nothing was written (Retry-After).' },
  idempotency_request_in_progress: { status: 409, meaning: 'The first request with this Idempotency-Key is still running (Retry-After).' },
  idempotency_response_lost: { status: 409, meaning: 'The first request with this Idempotency-Key made its change, but its response was lost (`changed`).' },
  signing_key_active: { status: 409, meaning: 'CLI `keys revoke-signing`: the active signing key cannot be revoked.' },
  master_key_in_use: { status: 409, meaning: 'CLI `keys rotate-master`: the new key is the current one.' },
  master_key_not_in_use: { status: 409, meaning: 'CLI `keys rotate-signing`: its master key wraps no row, so the servers may not hold it.' },
  master_key_unavailable: { status: 409, meaning: 'CLI `keys rotate-master`: data is wrapped under a key that is not configured.' },
  rotation_running: { status: 409, meaning: 'CLI `keys`: another rotation is running on this data directory.' },
  rotation_unfinished: { status: 409, meaning: 'CLI `keys`: an interrupted rotation must be finished first.' },
  rotation_not_converging: { status: 409, meaning: 'CLI `keys rotate-master`: rows keep appearing under the old key.' },
  // 412, 413, 414, 415
  precondition_failed: { status: 412, meaning: 'An If-Match or If-None-Match that does not hold (`currentVersion` for a secret or a service).' },
  payload_too_large: { status: 413, meaning: 'The body is larger than SLIPWAY_BODY_LIMIT_BYTES (`limit`).' },
  uri_too_long: { status: 414, meaning: 'A path segment longer than any name or id.' },
  unsupported_media_type: { status: 415, meaning: 'Not application/json (or the operation\'s form), a charset other than UTF-8, or a Content-Encoding.' },
  // 422
  unknown_secrets: { status: 422, meaning: 'Secrets a service or a deployment names do not exist (`missing`).' },
  unknown_secret_reference: { status: 422, meaning: 'A spec refers to secrets or keys that do not exist; `errors` points at each.' },
  secret_versions_gone: { status: 422, meaning: 'Pinned secret versions were deleted permanently or purged (`missing`).' },
  reserved_variable: { status: 422, meaning: 'PORT is the runner\'s to set.' },
  variable_conflict: { status: 422, meaning: 'One environment variable from two places.' },
  idempotency_key_reused: { status: 422, meaning: 'The Idempotency-Key was used for another request.' },
  // 429, 431, 5xx
  rate_limited: { status: 429, meaning: 'Too many requests (Retry-After, RateLimit).' },
  headers_too_large: { status: 431, meaning: 'The request\'s URL and headers together are over 16 KiB.' },
  internal: { status: 500, meaning: 'A fault on the server\'s side; quote `requestId`.' },
  unavailable: { status: 503, meaning: 'Overloaded, shutting down, or the database is out of reach (Retry-After).' },
  master_key_missing: { status: 503, meaning: 'Data the request needs is wrapped under a master key the server is not configured with (`masterKeyId`): an operator must add it.' },
};
