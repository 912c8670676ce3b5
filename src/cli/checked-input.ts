// What a command that writes to the database itself (not through the API) is about to create or
// change, checked against the API's own schema. A module of its own: the validator it compiles
// with is loaded by those commands only, not by every start of the CLI.
import type { TSchema } from '@sinclair/typebox';
import { validationProblem, type AjvError } from '../http/error-handler.js';
import { createValidatorCompiler } from '../http/validators.js';
import type { FieldError } from '../platform/errors.js';
import { UsageError } from './args.js';

const compileBody = createValidatorCompiler();

/**
 * Checks what a command is about to create or change against the schema the API checks the same
 * request with, so that the CLI never writes what the API would refuse (a slug the API could not
 * address, say). A refusal names the flag, as the API names the field.
 */
export function checkedInput<T>(schema: TSchema, input: T): T {
  const validate = compileBody({ schema, httpPart: 'body', method: 'POST', url: '' }) as unknown as ((value: unknown) => boolean) & { errors?: AjvError[] | null };
  if (validate(input)) return input;
  const problem = validationProblem(validate.errors ?? [], 'body');
  const fields = (problem.extras.errors as FieldError[] | undefined) ?? [];
  const toFlag = (pointer: string) => `--${pointer.slice(1).split('/')[0]!.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
  throw new UsageError(fields.length > 0 ? fields.map((f) => `${toFlag(f.pointer)} ${f.message}`).join('; ') : problem.detail);
}
