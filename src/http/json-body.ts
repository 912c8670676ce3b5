// Our application/json parser. Fastify's own answers every failure with the same "Body is not
// valid JSON" and drops the reason; a caller needs to know where the syntax broke, or which key was
// refused, to fix the request. Keys that could reach an object's prototype (`__proto__`, and
// `constructor` holding a `prototype`) are refused outright rather than silently dropped.
//
// Bodies are I-JSON (RFC 7493), since what JSON leaves to each parser would otherwise be decided
// quietly for the caller: text that is not UTF-8 would be stored with U+FFFD in place of its bytes,
// a name twice in one object would keep only its last value (a whole batch item lost while the
// answer says 201), and an unpaired surrogate escape would reach a value no process can be given.
import { isUtf8 } from 'node:buffer';
import type { App } from './app-types.js';
import { errors, pointerSegment } from '../platform/errors.js';
import { syntaxErrorOffset } from './json-syntax.js';

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
  if (text.charCodeAt(0) === 0xfeff) {
    return errors.malformedJson('The body is not valid JSON: it begins with a byte order mark (U+FEFF), which JSON sent over a network must not (RFC 8259 §8.1); remove it.');
  }
  const offset = syntaxErrorOffset(text);
  if (offset >= text.length) return errors.malformedJson('The body is not valid JSON: it ends before the value is complete.');
  if (offset < 0) return errors.malformedJson('The body is not valid JSON: it has an unexpected character (every key and string value needs double quotes).');
  // V8's own words where they are only words ("expected double-quoted property name"); its
  // "unexpected token" messages name, or quote around, a character of the body.
  const said = /^(.*?) in JSON at position \d+/.exec(error.message)?.[1];
  const what = /after JSON at position/.test(error.message) ? 'text after the JSON value'
    : said !== undefined && !said.startsWith('Unexpected token') ? said.toLowerCase() : 'an unexpected character';
  const line = text.slice(0, offset).split('\n').length;
  const column = offset - text.lastIndexOf('\n', offset - 1);
  const hint = what === 'an unexpected character' ? ' (every key and string value needs double quotes, and no comma may precede a closing bracket)' : '';
  return errors.malformedJson(`The body is not valid JSON: ${what} at line ${line}, column ${column}${hint}.`);
}

/**
 * RFC 6901 pointer to the first place, depth first, where `offends` holds: of a key and its value,
 * or (key null) of a value itself; undefined where it holds nowhere.
 */
function firstPointer(value: unknown, pointer: string, offends: (key: string | null, value: unknown) => boolean): string | undefined {
  if (offends(null, value)) return pointer;
  if (value === null || typeof value !== 'object') return undefined;
  for (const [key, item] of Object.entries(value)) {
    const here = `${pointer}/${pointerSegment(key)}`;
    const found = offends(key, item) ? here : firstPointer(item, here, offends);
    if (found !== undefined) return found;
  }
  return undefined;
}

const holdsNul = (key: string | null, value: unknown): boolean => (key !== null ? key.includes('\0') : typeof value === 'string' && value.includes('\0'));

/** A UTF-16 surrogate without its other half: only a \u escape can write one in UTF-8 text. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const holdsLoneSurrogate = (key: string | null, value: unknown): boolean => LONE_SURROGATE.test(key ?? (typeof value === 'string' ? value : ''));

const isSpace = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/** The index of the quote that closes the string opened at `open`, in valid JSON text. */
function closingQuote(text: string, open: number): number {
  let close = text.indexOf('"', open + 1);
  for (;;) {
    let backslashes = 0;
    while (text.charCodeAt(close - 1 - backslashes) === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return close;
    close = text.indexOf('"', close + 1);
  }
}

/**
 * How many object members valid JSON text writes: the strings a colon follows. Where the parsed
 * value holds fewer, a name was given twice in one object. Strings are found by indexOf, so a
 * bulk body of a thousand secrets costs a fraction of its parse.
 */
function membersWritten(text: string): number {
  let count = 0;
  for (let open = text.indexOf('"'); open !== -1;) {
    let next = closingQuote(text, open) + 1;
    while (isSpace(text.charCodeAt(next))) next++;
    if (text.charCodeAt(next) === 0x3a) count++;
    open = text.indexOf('"', next);
  }
  return count;
}

/** Object members and array items of a parsed value, counted apart. */
function nodesOf(value: unknown): { members: number; items: number } {
  const count = { members: 0, items: 0 };
  const walk = (v: unknown): void => {
    if (v === null || typeof v !== 'object') return;
    if (Array.isArray(v)) {
      count.items += v.length;
      for (const item of v) walk(item);
      return;
    }
    // for…in allocates no list of keys (a parsed object's are all its own, none inherited).
    for (const key in v) {
      count.members++;
      walk((v as Record<string, unknown>)[key]);
    }
  };
  walk(value);
  return count;
}

/** Members and items of each body this parser read, counted once, for the validator to weigh it by. */
const parsedSizes = new WeakMap<object, number>();

/**
 * How many object members and array items a body holds: what listing every error in it could cost.
 * Known without a walk for a body this parser read.
 */
export function bodySize(value: unknown): number {
  if (value === null || typeof value !== 'object') return 0;
  const known = parsedSizes.get(value);
  if (known !== undefined) return known;
  const { members, items } = nodesOf(value);
  return members + items;
}

/** The pointer to the first member whose name its object already holds, in valid JSON text. */
function firstDuplicateMember(text: string): string | undefined {
  let at = 0;
  const skipSpace = () => { while (isSpace(text.charCodeAt(at))) at++; };
  const string = (): string => {
    const open = at;
    at = closingQuote(text, open) + 1;
    return JSON.parse(text.slice(open, at)) as string;
  };
  const value = (pointer: string): string | undefined => {
    skipSpace();
    const c = text[at];
    if (c === '"') {
      string();
      return undefined;
    }
    if (c !== '{' && c !== '[') {
      while (at < text.length && !',]} \t\n\r'.includes(text[at]!)) at++;
      return undefined;
    }
    at++;
    skipSpace();
    if (text[at] === (c === '{' ? '}' : ']')) {
      at++;
      return undefined;
    }
    const names = new Set<string>();
    for (let index = 0; ; index++) {
      let here = `${pointer}/${index}`;
      if (c === '{') {
        skipSpace();
        const name = string();
        here = `${pointer}/${pointerSegment(name)}`;
        if (names.has(name)) return here;
        names.add(name);
        skipSpace();
        at++; // the colon
      }
      const found = value(here);
      if (found !== undefined) return found;
      skipSpace();
      if (text[at++] !== ',') return undefined;
    }
  };
  return value('');
}

/** Where the first byte that cannot be read as UTF-8 is, in bytes isUtf8 refused. */
function firstNonUtf8Byte(bytes: Uint8Array): number {
  for (let at = 0; at < bytes.length;) {
    const lead = bytes[at]!;
    if (lead < 0x80) {
      at++;
      continue;
    }
    // RFC 3629 §4: the lead byte fixes the length and the range of the byte after it (no overlong
    // forms, no surrogates, nothing past U+10FFFF).
    const length = lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0;
    if (length === 0 || at + length > bytes.length) return at;
    const second = bytes[at + 1]!;
    const low = lead === 0xe0 ? 0xa0 : lead === 0xf0 ? 0x90 : 0x80;
    const high = lead === 0xed ? 0x9f : lead === 0xf4 ? 0x8f : 0xbf;
    if (second < low || second > high) return at;
    for (let k = 2; k < length; k++) if ((bytes[at + k]! & 0xc0) !== 0x80) return at;
    at += length;
  }
  return bytes.length;
}

function notUtf8(bytes: Uint8Array): Error {
  const at = firstNonUtf8Byte(bytes);
  return errors.malformedJson(`The body is not valid UTF-8: the byte at offset ${at} (0x${bytes[at]?.toString(16).padStart(2, '0') ?? '??'}) does not begin or continue a UTF-8 character. Send JSON encoded as UTF-8 (RFC 8259 §8.1).`);
}

export function parseJsonBody(body: string | Uint8Array): unknown {
  if (typeof body !== 'string' && !isUtf8(body)) throw notUtf8(body);
  const text = typeof body === 'string' ? body : Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
  // No body with a JSON content type is the same as no body: bodyless POSTs work from clients that
  // always send the header, and a route that needs a body says so through its schema.
  if (text.trim() === '') return undefined;
  // One scan serves the reviver pass and the NUL and surrogate checks below: MAYBE_POISONED
  // matches every \u escape, and U+0000 and unpaired surrogates can only be written escaped.
  const suspect = MAYBE_POISONED.test(text);
  try {
    const value = suspect ? JSON.parse(text, refuseProtoKeys) : JSON.parse(text);
    refuseAmbiguities(text, value, suspect);
    return value;
  } catch (error) {
    if (error instanceof PoisonedKey) throw poisoned(text, error.key);
    if (error instanceof SyntaxError) throw syntaxError(text, error);
    // The reviver's pass and the checks after the parse recurse: a body nested deeper than the
    // stack allows (no API body nests more than a few levels) is refused like any other malformed body.
    if (error instanceof RangeError) throw errors.malformedJson('The body is nested too deeply.');
    throw error;
  }
}

/** What JSON.parse takes but I-JSON refuses, and NUL: a name twice in one object, U+0000, unpaired surrogates. */
function refuseAmbiguities(text: string, value: unknown, escaped: boolean): void {
  const { members, items } = nodesOf(value);
  if (value !== null && typeof value === 'object') parsedSizes.set(value, members + items);
  if (membersWritten(text) !== members) {
    const pointer = firstDuplicateMember(text) ?? '';
    throw errors.malformedJson(`The body has the member ${pointer} twice in one object; names must be unique within an object (RFC 7493 §2.3), and only one of the two values would be read. Remove one.`,
      [{ pointer, message: 'is given twice' }]);
  }
  if (escaped && text.includes('\\u0000')) {
    const pointer = firstPointer(value, '', holdsNul);
    if (pointer !== undefined) throw errors.nulCharacter('A string in the body', [{ pointer, message: 'contains U+0000' }]);
  }
  if (escaped && /\\u[dD][89a-fA-F]/.test(text)) {
    const pointer = firstPointer(value, '', holdsLoneSurrogate);
    if (pointer !== undefined) {
      throw errors.malformedJson('A string in the body holds an unpaired surrogate escape (\\uD800 to \\uDFFF without its other half), which no UTF-8 text, and so no name, key, value or variable, can carry (RFC 7493 §2.1). Escape the whole character, or send it unescaped.',
        [{ pointer, message: 'contains an unpaired surrogate' }]);
    }
  }
}

/** The charset parameter of a Content-Type, lowercased, or undefined when it has none. */
function charsetOf(contentType: string | undefined): string | undefined {
  const match = /;\s*charset\s*=\s*(?:"([^"]*)"|([^;\s]*))/i.exec(contentType ?? '');
  return match === null ? undefined : (match[1] ?? match[2])!.toLowerCase();
}

/**
 * Why a body cannot be read as it was sent, or null when it can: a Content-Encoding other than
 * identity (bodies are not decoded), or a charset other than UTF-8. The JSON and the OAuth form
 * parsers each answer it in their own form.
 */
export function unreadableAsSent(headers: { 'content-encoding'?: string; 'content-type'?: string }): { coding: string } | { charset: string } | null {
  const coding = headers['content-encoding']?.trim().toLowerCase();
  if (coding !== undefined && coding !== '' && coding !== 'identity') return { coding };
  const charset = charsetOf(headers['content-type']);
  return charset !== undefined && charset !== 'utf-8' && charset !== 'utf8' ? { charset } : null;
}

export function registerJsonParser(app: App): void {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, body, done) => {
    try {
      const unreadable = unreadableAsSent(req.headers);
      if (unreadable !== null && 'coding' in unreadable) throw errors.unsupportedContentEncoding(unreadable.coding);
      if (unreadable !== null) throw errors.unsupportedMediaType(req.headers['content-type'], 'application/json in UTF-8 (RFC 8259 §8.1)');
      done(null, parseJsonBody(body as Buffer));
    } catch (error) {
      done(error as Error, undefined);
    }
  });
}
