// What every refusal must look like: an RFC 9457 problem with our extensions.
import assert from 'node:assert/strict';
import type { HttpResult } from './harness.js';

const FIELDS = ['type', 'title', 'status', 'detail', 'instance', 'code', 'requestId'];

/** Asserts `res` is a problem with this status (and code, when given), and returns its body. */
export function assertProblem(res: HttpResult, status: number, code?: string, label = ''): Record<string, unknown> {
  const where = label ? `${label}: ` : '';
  assert.equal(res.status, status, `${where}expected ${status}, got ${res.status} ${res.text.slice(0, 300)}`);
  assert.match(res.headers.get('content-type') ?? '', /^application\/problem\+json/, `${where}content type`);
  const body = res.body as Record<string, unknown>;
  for (const field of FIELDS) assert.ok(field in body, `${where}problem lacks "${field}": ${res.text}`);
  assert.equal(body.status, status, `${where}problem status`);
  assert.equal(body.requestId, res.headers.get('x-request-id'), `${where}problem requestId is the response's X-Request-Id`);
  if (code !== undefined) assert.equal(body.code, code, `${where}problem code: ${String(body.detail)}`);
  return body;
}

/** The same check as a message instead of a throw, for tests that collect every failure first. */
export function problemMismatch(res: HttpResult, status: number, code?: string, label = ''): string | null {
  try {
    assertProblem(res, status, code, label);
    return null;
  } catch (error) {
    return (error as Error).message;
  }
}
