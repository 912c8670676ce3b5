// Request validation. Query strings and path parameters arrive as text, so they are coerced to the
// types their schemas declare (`?limit=10`); bodies are JSON and are taken exactly as sent: a
// number where a string is required (a secret value, say) is refused, never quietly converted.
import { Ajv, type Options } from 'ajv';
import * as addFormatsModule from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';
import { pointerSegment } from '../platform/errors.js';
import { bodySize } from './json-body.js';

// ajv-formats is CommonJS; under NodeNext its function is the module's default export.
const addFormats = addFormatsModule.default as unknown as (ajv: Ajv) => Ajv;

function makeAjv(coerceTypes: Options['coerceTypes'], allErrors = true): Ajv {
  const ajv = new Ajv({ removeAdditional: false, allErrors, verbose: true, useDefaults: true, coerceTypes, strict: false });
  addFormats(ajv);
  // `x-limit` names the setting behind a maxItems/maxLength, so the problem can name it too.
  ajv.addKeyword({ keyword: 'x-limit', schemaType: 'string' });
  return ajv;
}

/**
 * Bodies with more members and items than this are checked up to their first error only. Listing
 * every error costs time in proportion to the errors, and a body of a few MiB can hold hundreds of
 * thousands (a key name refused each time): a second of the event loop for one request. Every
 * body the limits admit stays well under it, or passes either way.
 */
export const ALL_ERRORS_UP_TO = 20_000;

type Validate = ((data: unknown) => boolean) & { errors?: unknown };

const WHOLE_NUMBER = /^-?(?:0|[1-9]\d*)$/;
const DECIMAL_NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?$/;

/**
 * A query's or a path's validator that first reads its numbers as decimal digits only: the
 * validator's coercion alone would take `?limit=0x10` for 16, `%201` for 1 and `/versions/1e3` for
 * version 1000. Each refused one is an error at its parameter, as the validator's own are.
 */
function decimalNumbers(schema: object, validate: Validate): Validate {
  const properties = (schema as { properties?: Record<string, { type?: unknown }> }).properties ?? {};
  const numeric = Object.entries(properties).flatMap(([name, p]) => (p.type === 'integer' || p.type === 'number' ? [{ name, pattern: p.type === 'integer' ? WHOLE_NUMBER : DECIMAL_NUMBER }] : []));
  if (numeric.length === 0) return validate;
  const checked: Validate = (data) => {
    const values = data as Record<string, unknown>;
    const wrong = numeric.flatMap(({ name, pattern }) => {
      const given = values[name];
      if (typeof given !== 'string' || pattern.test(given)) return [];
      const shown = given.length > 40 ? `${given.slice(0, 40)}…` : given;
      return [{ keyword: 'decimal', instancePath: `/${pointerSegment(name)}`, params: {}, message: `must be ${pattern === WHOLE_NUMBER ? 'a whole number' : 'a number'} in decimal digits, got ${JSON.stringify(shown)}` }];
    });
    if (wrong.length > 0) {
      checked.errors = wrong;
      return false;
    }
    const valid = validate(data);
    checked.errors = validate.errors;
    return valid;
  };
  return checked;
}

export function createValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const forBody = makeAjv(false);
  const forLargeBody = makeAjv(false, false);
  const forText = makeAjv('array');
  return ({ schema, httpPart }) => {
    if (httpPart !== 'body') return (httpPart === 'querystring' || httpPart === 'params' ? decimalNumbers(schema as object, forText.compile(schema as object)) : forText.compile(schema as object)) as never;
    const every = forBody.compile(schema as object);
    const first = forLargeBody.compile(schema as object);
    const validate: Validate = (data) => {
      const chosen = bodySize(data) > ALL_ERRORS_UP_TO ? first : every;
      const valid = chosen(data);
      validate.errors = chosen.errors;
      return valid;
    };
    return validate as never;
  };
}
