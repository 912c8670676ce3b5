// Our application/json parser. Fastify's own answers every failure with the same "Body is not
// valid JSON" and drops the reason; a caller needs to know where the syntax broke, or which key was
// refused, to fix the request. Keys that could reach an object's prototype (`__proto__`, and
// `constructor` holding a `prototype`) are refused outright rather than silently dropped.
import type { App } from './app-types.js';
import { errors, pointerSegment } from '../platform/errors.js';

// Only bodies that could hold a dangerous key (possibly \u-escaped) pay for the reviver pass.
const MAYBE_POISONED = /__proto__|constructor|\\u/;

const isPoisonedKey = (key: string, value: unknown): boolean =>
  key === '__proto__' || (key === 'constructor' && value !== null && typeof value === 'object' && 'prototype' in value);

class PoisonedKey extends Error {
  constructor(readonly key: string) {
    super(key);
  }
}

function refuseProtoKeys(key: string, value: unknown): unknown {
  if (isPoisonedKey(key, value)) throw new PoisonedKey(key);
  return value;
}

/**
 * The refusal of a key that could reach a prototype, pointing at it. A plain JSON.parse keeps
 * `__proto__` as an own property (it defines properties, it does not assign them), so the parsed
 * body can be searched safely for where the key is.
 */
function poisoned(text: string, key: string): Error {
  let pointer: string | undefined;
  try {
    pointer = firstPointer(JSON.parse(text), '', (k, v) => k !== null && isPoisonedKey(k, v));
  } catch {
    // Nested too deeply to search: the detail alone says it.
  }
  // The reviver meets the deepest key first, the search the outermost: name the one pointed at.
  const named = pointer === undefined ? key : pointer.slice(pointer.lastIndexOf('/') + 1);
  const detail = `The body contains the key "${named}", which is refused because it could alter object prototypes; remove or rename it.`;
  return errors.malformedJson(detail, pointer === undefined ? [] : [{ pointer, message: 'could alter object prototypes' }]);
}

/**
 * JSON.parse's complaint in our words, with line and column. Its own message can quote the body
 * around the error, and a body may carry secret values: no character of the body is repeated.
 */
function syntaxError(text: string, error: SyntaxError): Error {
  const at = /^(.*?) in JSON at position (\d+)/.exec(error.message);
  if (at && !at[1]!.startsWith('Unexpected token')) {
    const position = Number(at[2]);
    const line = text.slice(0, position).split('\n').length;
    const column = position - text.lastIndexOf('\n', position - 1);
    return errors.malformedJson(`The body is not valid JSON: ${at[1]!.toLowerCase()} at line ${line}, column ${column}.`);
  }
  if (/end of JSON input/.test(error.message)) return errors.malformedJson('The body is not valid JSON: it ends before the value is complete.');
  return errors.malformedJson('The body is not valid JSON: it has an unexpected character (every key and string value needs double quotes).');
}

/**
 * RFC 6901 pointer to the first place, depth first, where `offends` holds: of a key and its value,
 * or (key null) of a value itself; undefined where it holds nowhere.
 */
function firstPointer(value: unknown, pointer: string, offends: (key: string | null, value: unknown) => boolean): string | undefined {
  if (offends(null, value)) return pointer || '/';
  if (value === null || typeof value !== 'object') return undefined;
  for (const [key, item] of Object.entries(value)) {
    const here = `${pointer}/${pointerSegment(key)}`;
    const found = offends(key, item) ? here : firstPointer(item, here, offends);
    if (found !== undefined) return found;
  }
  return undefined;
}

const holdsNul = (key: string | null, value: unknown): boolean => (key !== null ? key.includes('\0') : typeof value === 'string' && value.includes('\0'));

export function parseJsonBody(text: string): unknown {
  // No body with a JSON content type is the same as no body: bodyless POSTs work from clients that
  // always send the header, and a route that needs a body says so through its schema.
  if (text.trim() === '') return undefined;
  // One scan serves both the reviver pass and the NUL check below: MAYBE_POISONED matches every \u
  // escape, and U+0000 can only be written escaped in JSON text.
  const suspect = MAYBE_POISONED.test(text);
  let value: unknown;
  try {
    value = suspect ? JSON.parse(text, refuseProtoKeys) : JSON.parse(text);
  } catch (error) {
    if (error instanceof PoisonedKey) throw poisoned(text, error.key);
    if (error instanceof SyntaxError) throw syntaxError(text, error);
    // The reviver's pass recurses: a body nested deeper than the stack allows (no API body nests
    // more than a few levels) is refused like any other malformed body.
    if (error instanceof RangeError) throw errors.malformedJson('The body is nested too deeply.');
    throw error;
  }
  if (suspect && text.includes('\\u0000')) {
    const pointer = firstPointer(value, '', holdsNul);
    if (pointer !== undefined) throw errors.nulCharacter('A string in the body', [{ pointer, message: 'contains U+0000' }]);
  }
  return value;
}

export function registerJsonParser(app: App): void {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    try {
      done(null, parseJsonBody(body as string));
    } catch (error) {
      done(error as Error, undefined);
    }
  });
}
