// `slipway service`: an organization's services through the API, as a service user (viewer to list
// and show, developer to apply, admin or owner to delete), for a shell or a pipeline that keeps its
// services' specs in a repository and applies them.
import { etagOf } from '../platform/etags.js';
import { unknownVariables, unknownVariableWarning } from '../platform/unknown-variables.js';
import type { Service } from '../modules/services/services.schemas.js';
import { API_CLIENT_FLAGS, API_CLIENT_VARIABLES, apiClientFlagHelp, apiClientSettings, deleteResource, everyItem, patientCaller, subcommandFlags } from './api-client.js';
import { appliedJson, appliedLine, applyResource, readJsonObject } from './apply.js';
import { printWarning, requiredFlagText, UsageError } from './args.js';
import { flagTable, printable, printFields, printJson, printTable } from './output.js';
import { SERVICE_USAGE } from './usage.js';

const RETRY_MS = 60_000;

const COMMON = { ...API_CLIENT_FLAGS, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } } as const;
const SUBCOMMANDS = {
  list: COMMON,
  show: { ...COMMON, service: { type: 'string' } },
  apply: { ...COMMON, file: { type: 'string' }, 'dry-run': { type: 'boolean' } },
  delete: { ...COMMON, service: { type: 'string' }, force: { type: 'boolean' }, 'ignore-not-found': { type: 'boolean' } },
} as const;

export const SERVICE_HELP = `usage:
${SERVICE_USAGE.map((line) => `  ${line}\n`).join('')}
An organization's services through the API, as a service user.

  list     every service, oldest first (viewer and above)
  show     one, by name or id, with its spec: what it runs, its health check, its variables and
           the secrets it takes, by name (viewer and above)
  apply    makes the service the file describes exist as it says (developer and above): created
           when no service has its name, changed to match when it differs (a new version), left
           alone when it does not ("unchanged"); says what changed. The file is one JSON object,
           the body of POST /v1/orgs/{orgId}/services: {"name", "description", "spec"}. It is the
           whole service: a description it leaves out is emptied, and the spec replaces the one
           there. A change made by someone else meanwhile is read and applied over (If-Match),
           and the apply names what it replaced. What show --json prints applies as it is (its id, version and times are left out).
           --file - reads standard input. --dry-run: the server checks it all and says what
           would be created or changed, and the version it would make; nothing is changed
  delete   deletes it and its finished deployments (admin, owner); refused while a deployment of
           it is queued or running, and while it serves unless --force (its runners then stop it).
           --ignore-not-found: none by that name is no refusal (exit 0, "nothing to delete")

Deployments already made keep the spec they took; apply changes what the next one takes.

Exit status: 0 done; 1 refused by the server or unreachable (tried again for ${RETRY_MS / 1000} s); 2 a usage
error. Credentials come from flags, SLIPWAY_* variables or a credentials file, in that order:

${flagTable(apiClientFlagHelp('calling').map(([flag, arg, text]) => [`--${flag} ${arg}`, flag in API_CLIENT_VARIABLES ? API_CLIENT_VARIABLES[flag as keyof typeof API_CLIENT_VARIABLES] : '', text]))}`;

/** What a service runs, in a few words. */
function runs(service: Service): string {
  const { command, image } = service.spec;
  return command !== undefined ? command.join(' ') : image ?? '';
}

export async function serviceCommand(argv: string[], env: Record<string, string | undefined>): Promise<number> {
  const asked = subcommandFlags(argv, SUBCOMMANDS, SERVICE_HELP, 'service');
  if (asked === null) return 0;
  const { sub } = asked;
  const flags = asked.flags as Partial<Record<string, string | boolean>>;
  const json = flags.json === true;
  for (const variable of unknownVariables(env)) printWarning(json, unknownVariableWarning(variable));

  // Everything the command line can get wrong is refused before a token is asked for.
  const name = sub === 'show' || sub === 'delete' ? requiredFlagText(flags, 'service', 'the service, by name or id') : '';
  const file = sub === 'apply' ? readJsonObject(requiredFlagText(flags, 'file', 'the JSON file describing the service (- for standard input)'), ['id', 'version', 'createdAt', 'updatedAt']) : undefined;
  if (file !== undefined && (file.spec === null || typeof file.spec !== 'object' || Array.isArray(file.spec))) {
    throw new UsageError(`--file ${String(flags.file)} needs a "spec" object: an apply gives the whole service; nothing was sent`);
  }

  const settings = apiClientSettings(flags, env);
  const call = patientCaller(settings, { json, retryMs: RETRY_MS, unanswered: 'check with slipway service show whether the change was made' });
  const services = `/v1/orgs/${encodeURIComponent(settings.orgId)}/services`;

  switch (sub) {
    case 'list': {
      const all = await everyItem<Service>(call, services, new URLSearchParams(), 'services');
      if (json) printJson({ services: all });
      else printTable(all.map((s) => ({ name: s.name, version: s.version, runs: runs(s), updated: s.updatedAt })), ['name', 'version', 'runs', 'updated']);
      return 0;
    }
    case 'show': {
      const service = await call<Service>('GET', `${services}/${encodeURIComponent(name)}`);
      if (json) printJson(service);
      else {
        const { spec } = service;
        printFields({
          name: service.name, id: service.id, version: service.version, description: service.description,
          ...(spec.command !== undefined ? { command: JSON.stringify(spec.command) } : {}),
          ...(spec.image !== undefined ? { image: spec.image } : {}),
          ...(spec.port !== undefined ? { port: spec.port } : {}),
          health: `${spec.healthCheck === undefined ? 'none (running is healthy)' : `GET ${spec.healthCheck.path} within ${spec.healthCheck.timeoutSeconds} s`}${spec.minReadySeconds !== undefined ? `, then running for ${spec.minReadySeconds} s` : ''}`,
          variables: Object.keys(spec.variables).join(' '),
          secrets: spec.secrets.map((r) => (r.key === undefined ? r.secret : `${r.secret}.${r.key}${r.as !== undefined ? ` as ${r.as}` : ''}`)).join(' '),
          updated: service.updatedAt,
        });
      }
      return 0;
    }
    case 'apply': {
      const applied = await applyResource<Service>(call, {
        kind: 'service',
        collection: services,
        name: file!.name as string,
        create: file!,
        // The whole service: its description too, emptied when the file has none.
        update: (current) => ({ body: { description: '', ...file! }, headers: { 'if-match': etagOf(current.version, current.createdAt) } }),
        // In this order, whatever order the server's answer has its spec in.
        fields: ({ description, spec }) => ({ description, command: spec.command, image: spec.image, port: spec.port, healthCheck: spec.healthCheck, minReadySeconds: spec.minReadySeconds, variables: spec.variables, secrets: spec.secrets }),
        revision: (s) => etagOf(s.version, s.createdAt),
        dryRun: flags['dry-run'] === true,
      });
      if (json) printJson(appliedJson('service', applied));
      else process.stdout.write(`${printable(appliedLine('service', applied.resource.name, applied, applied.resource.version))}\n`);
      return 0;
    }
    case 'delete': {
      const deleted = await deleteResource(call, `${services}/${encodeURIComponent(name)}${flags.force === true ? '?force=true' : ''}`, { ignoreNotFound: flags['ignore-not-found'] === true, gone: ['service_not_found'] });
      if (json) printJson({ service: name, deleted });
      else process.stdout.write(`${printable(deleted ? `service ${name}: deleted, with its finished deployments` : `service ${name}: not found; nothing to delete`)}\n`);
      return 0;
    }
  }
}
