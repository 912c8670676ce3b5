// Configuration as code: `slipway service apply` and `slipway environment apply` make what a JSON
// file describes true on the server, as a pipeline run from a repository wants: create it when it is
// missing, change it to match when it differs, leave it alone when it does not, and say which of
// those it did and what changed. The file is the whole resource: what it leaves out takes the value
// a create would give it. It names the resource; a file with another name is another resource.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import { parseJsonBody } from '../http/json-body.js';
import { syntaxErrorOffset } from '../http/json-syntax.js';
import { AppError } from '../platform/errors.js';
import type { PatientCall } from './api-client.js';
import { UsageError } from './args.js';

/**
 * A JSON file's object (`-`: standard input); never a quote of the file in a refusal. What `show
 * --json` prints applies as it is: the fields the server keeps itself (`readOnly`: an id, a version,
 * a lock, when it was made and changed) are left out, as they are not the file's to set.
 */
export function readJsonObject(file: string, readOnly: readonly string[], read: (file: string | number) => string = (f) => fs.readFileSync(f, 'utf8')): Record<string, unknown> {
  const where = file === '-' ? 'standard input' : file;
  let text: string;
  try {
    text = read(file === '-' ? 0 : file);
  } catch (error) {
    throw new UsageError(`--file ${file}: cannot read it (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  // A byte order mark, as some editors write one: no part of the JSON.
  text = text.replace(/^\uFEFF/, '');
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    // Only where, never Node's own message: it quotes the text around it.
    const at = syntaxErrorOffset(text);
    const before = text.slice(0, Math.max(at, 0));
    const place = at < 0 ? '' : at >= text.length ? ' (it ends before the value is complete)'
      : ` (line ${before.split('\n').length}, column ${before.length - before.lastIndexOf('\n')})`;
    throw new UsageError(`--file ${where} is not valid JSON${place}; nothing was sent`);
  }
  try {
    // What the API refuses in a body, refused in the file too, before anything is read from it: a
    // name twice in one object (only its last value would count, a "name" too), U+0000, a lone surrogate.
    parseJsonBody(text);
  } catch (error) {
    if (!(error instanceof AppError)) throw error;
    throw new UsageError(`--file ${where}: ${error.detail.replace(/\b([Tt])he body\b/g, '$1he file')} Nothing was sent.`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new UsageError(`--file ${where} must hold one JSON object; nothing was sent`);
  const object = parsed as Record<string, unknown>;
  if (typeof object.name !== 'string' || object.name === '') throw new UsageError(`--file ${where} needs a "name": what it describes is found by it; nothing was sent`);
  return Object.fromEntries(Object.entries(object).filter(([key]) => !readOnly.includes(key)));
}

/** A field that an apply changed, and how; a variable is a field of its own (`variables.DEBUG`). */
export type FieldChange = { field: string; change: 'added' | 'removed' | 'changed' };
/**
 * `replaced`: the fields another client changed between the apply's first read and its write,
 * which the file's values then replaced (their changes are among `changes` too).
 */
export type Applied<T> = { result: 'created' | 'updated' | 'unchanged'; changes: FieldChange[]; replaced: string[]; resource: T; dryRun: boolean };

/** The fields of `before` and `after` that differ, and how; variables one by one, never their values. */
export function fieldChanges(before: Record<string, unknown>, after: Record<string, unknown>): FieldChange[] {
  const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
  const isMap = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
  const how = (field: string, was: unknown, is: unknown): FieldChange => ({ field, change: was === undefined ? 'added' : is === undefined ? 'removed' : 'changed' });
  const changes: FieldChange[] = [];
  for (const field of new Set([...Object.keys(before), ...Object.keys(after)])) {
    const was = before[field];
    const is = after[field];
    if (same(was, is)) continue;
    if (isMap(was) && isMap(is) && field === 'variables') {
      for (const name of [...new Set([...Object.keys(was), ...Object.keys(is)])].sort()) {
        if (!same(was[name], is[name])) changes.push(how(`${field}.${name}`, was[name], is[name]));
      }
    } else changes.push(how(field, was, is));
  }
  return changes;
}

const ATTEMPTS = 5;

/**
 * Creates the `kind` named `name` under `collection` from `create`, or brings the one there to
 * `update(current)` (a PATCH; `headers` may hold its If-Match). Another client's create, change or
 * delete in between (a name just taken, a 412, a 404) makes it read again and go on from what is
 * there, five times at most. What changed is measured on `fields` from the first read to the last
 * answer (a PATCH whose answer was lost and that a retry found done still changed it), and from the
 * read the PATCH was sent after (one that undid a change another client made meanwhile changed
 * that back: said, and named in `replaced`); `revision` (a version) catches what `fields` leave out.
 * `dryRun`: the server checks the create or the change and answers what it would make, writing
 * nothing (`?dryRun=true`), so the result says what the apply would do.
 */
export async function applyResource<T>(call: PatientCall, o: {
  kind: 'service' | 'environment';
  collection: string;
  name: string;
  create: Record<string, unknown>;
  update: (current: T) => { body: Record<string, unknown>; headers?: Record<string, string> };
  fields: (resource: T) => Record<string, unknown>;
  revision?: (resource: T) => string;
  dryRun: boolean;
}): Promise<Applied<T>> {
  const one = `${o.collection}/${encodeURIComponent(o.name)}`;
  const dry = o.dryRun ? '?dryRun=true' : '';
  const raced = (error: unknown, ...codes: string[]) => error instanceof AppError && codes.includes(error.code);
  // What there was when the apply began (null: nothing; undefined: not read yet).
  let first: T | null | undefined;
  for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
    let current: T | null;
    try {
      current = await call<T>('GET', one);
    } catch (error) {
      if (!raced(error, `${o.kind}_not_found`)) throw error;
      current = null;
    }
    if (first === undefined) first = current;
    try {
      if (current === null) {
        // A dry run has nothing to repeat, and takes no key.
        const made = await call<T>('POST', `${o.collection}${dry}`, o.create, o.dryRun ? {} : { 'idempotency-key': randomUUID() });
        return { result: 'created', changes: [], replaced: [], resource: made, dryRun: o.dryRun };
      }
      const { body, headers } = o.update(current);
      const after = await call<T>('PATCH', `${one}${dry}`, body, headers);
      // Created by another client meanwhile: what changed is measured from what it made.
      const before = first ?? current;
      const changes = fieldChanges(o.fields(before), o.fields(after));
      const theirs = fieldChanges(o.fields(before), o.fields(current)).map((c) => c.field);
      const undone = fieldChanges(o.fields(current), o.fields(after)).filter((c) => theirs.includes(c.field));
      for (const c of undone) if (!changes.some((d) => d.field === c.field)) changes.push(c);
      const moved = changes.length > 0 || (o.revision !== undefined && o.revision(before) !== o.revision(after));
      return { result: moved ? 'updated' : 'unchanged', changes, replaced: undone.map((c) => c.field), resource: after, dryRun: o.dryRun };
    } catch (error) {
      if (!raced(error, `${o.kind}_name_taken`, `${o.kind}_not_found`, 'precondition_failed')) throw error;
    }
  }
  throw new Error(`the ${o.kind} ${o.name} was created, changed or deleted by someone else each of the ${ATTEMPTS} times it was read; nothing more was sent: run the apply again`);
}

/**
 * The line a human reads: `service web: updated, version 4 (command changed, variables.DEBUG
 * added)`; a dry run's: `service web: would be updated to version 4 (…); nothing was changed`.
 */
export function appliedLine(kind: string, name: string, applied: Applied<unknown>, version?: number): string {
  const unchanged = applied.result === 'unchanged';
  const at = version === undefined ? '' : unchanged ? `, still version ${version}` : !applied.dryRun ? `, version ${version}` : applied.result === 'created' ? ` as version ${version}` : ` to version ${version}`;
  const changes = applied.changes.map((c) => `${c.field} ${c.change}`).join(', ');
  const result = applied.dryRun && !unchanged ? `would be ${applied.result}` : applied.result;
  const replaced = applied.replaced.length === 0 ? ''
    : `; ${applied.dryRun ? 'would replace' : 'replaced'} what another client changed meanwhile: ${applied.replaced.join(', ')}`;
  return `${kind} ${name}: ${result}${at}${changes !== '' ? ` (${changes})` : ''}${replaced}${applied.dryRun ? '; a dry run: nothing was changed' : ''}`;
}

/**
 * What `--json` prints of an apply: `{result, changes, <kind>}`, `dryRun: true` for a dry run, and
 * `replaced` when it undid another client's change.
 */
export function appliedJson(kind: string, applied: Applied<unknown>): Record<string, unknown> {
  return { result: applied.result, ...(applied.dryRun ? { dryRun: true } : {}), changes: applied.changes, ...(applied.replaced.length > 0 ? { replaced: applied.replaced } : {}), [kind]: applied.resource };
}
