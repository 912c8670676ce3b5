// Request validation. Query strings and path parameters arrive as text, so they are coerced to the
// types their schemas declare (`?limit=10`); bodies are JSON and are taken exactly as sent: a
// number where a string is required (a secret value, say) is refused, never quietly converted.
import { Ajv, type Options } from 'ajv';
import * as addFormatsModule from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';

// ajv-formats is CommonJS; under NodeNext its function is the module's default export.
const addFormats = addFormatsModule.default as unknown as (ajv: Ajv) => Ajv;

function makeAjv(coerceTypes: Options['coerceTypes']): Ajv {
  const ajv = new Ajv({ removeAdditional: false, allErrors: true, verbose: true, useDefaults: true, coerceTypes, strict: false });
  addFormats(ajv);
  // `x-limit` names the setting behind a maxItems/maxLength, so the problem can name it too.
  ajv.addKeyword({ keyword: 'x-limit', schemaType: 'string' });
  return ajv;
}

export function createValidatorCompiler(): FastifySchemaCompiler<unknown> {
  const forBody = makeAjv(false);
  const forText = makeAjv('array');
  return ({ schema, httpPart }) => (httpPart === 'body' ? forBody : forText).compile(schema as object) as never;
}
