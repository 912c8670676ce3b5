// Request validation. Query strings and path parameters arrive as text, so they are coerced to the
// types their schemas declare (`?limit=10`); bodies are JSON and are taken exactly as sent: a
// number where a string is required (a secret value, say) is refused, never quietly converted.
import { Ajv, type Options } from 'ajv';
import * as addFormatsModule from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';
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

export function createValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const forBody = makeAjv(false);
  const forLargeBody = makeAjv(false, false);
  const forText = makeAjv('array');
  return ({ schema, httpPart }) => {
    if (httpPart !== 'body') return forText.compile(schema as object) as never;
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
