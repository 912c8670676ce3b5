// The usage lines of each command: what `slipway --help` lists, kept apart from the commands so that
// help and usage errors answer without loading them.

export const ORG_USAGE = [
  'slipway org create --slug S --name N [--external-id ID] [--json]',
  'slipway org list [--json]',
  'slipway org link --org ORG --external-id ID [--json]',
  'slipway org unlink --org ORG [--json]',
  'slipway org delete --org ORG --confirm SLUG [--json]',
];

export const SERVICE_USER_USAGE = [
  'slipway service-user create --org ORG --name N --role ROLE [--description D] [--environment ENV]… [--instance-admin] [--json]',
  'slipway service-user list --org ORG [--json]',
  'slipway service-user show --org ORG --user ID|NAME [--json]',
  'slipway service-user update --org ORG --user ID|NAME [--name N] [--role ROLE] [--description D] [--environment ENV…|--all-environments] [--json]',
  'slipway service-user delete --org ORG --user ID|NAME [--json]',
  'slipway service-user rotate-secret --org ORG --user ID|NAME [--keep-old] [--json]',
  'slipway service-user remove-secret --org ORG --user ID|NAME --secret CS_ID [--json]',
  'slipway service-user disable|enable --org ORG --user ID|NAME [--json]',
];

export const RUNNER_USAGE = [
  'slipway runner [--org ORG] [--environment ENV]… [--credentials FILE] [--url URL] [--concurrency N]   (slipway runner --help)',
];

export const RUNNERS_USAGE = [
  'slipway runners [--environment ENV] [--state online|offline] [--json]   (the runners and whether they are up)',
];

export const DEPLOY_USAGE = [
  'slipway deploy --service S --environment ENV [--from ENV] [--revision R] [--var K=V]… [--wait [--timeout S]] [--json]   (slipway deploy --help)',
];

export const DEPLOYMENT_USAGE = [
  'slipway deployment list [--service S] [--environment ENV] [--state STATE]… [--limit N] [--cursor C] [--json]',
  'slipway deployment show --id DEP [--json]',
  'slipway deployment active --environment ENV [--json]',
  'slipway deployment changes --id DEP [--against DEP] [--json]',
  'slipway deployment logs --id DEP [--tail N] [--follow [--timeout S]] [--json]',
  'slipway deployment cancel --id DEP [--reason R] [--json]',
  'slipway deployment wait --id DEP [--timeout S] [--json]',
  'slipway deployment rollback (--service S --environment ENV | --to DEP) [--description D] [--wait [--timeout S]] [--json]   (slipway deployment --help)',
];

export const EVENTS_USAGE = [
  'slipway events [--type T] [--subject ID] [--actor ID] [--since TIME] [--until TIME] [--limit N] [--follow] [--json]   (the audit log; slipway events --help)',
];

export const ENVIRONMENT_USAGE = [
  'slipway environment list [--json]',
  'slipway environment show --environment ENV [--json]',
  'slipway environment apply --file FILE|- [--dry-run] [--json]',
  'slipway environment delete --environment ENV [--force] [--ignore-not-found] [--json]',
  'slipway environment lock --environment ENV --reason R [--json]',
  'slipway environment unlock --environment ENV [--json]   (slipway environment --help)',
];

export const SERVICE_USAGE = [
  'slipway service list [--json]',
  'slipway service show --service S [--json]',
  'slipway service apply --file FILE|- [--dry-run] [--json]',
  'slipway service delete --service S [--force] [--ignore-not-found] [--json]   (slipway service --help)',
];

export const SECRET_USAGE = [
  'slipway secret list [--prefix P] [--deleted] [--json]',
  'slipway secret show|versions|usage --name N [--json]',
  'slipway secret import --name N --from-file FILE|- [--force] [--dry-run] [--json]',
  'slipway secret set --name N [--set K=V]… [--unset K]… [--from-file FILE|-] [--force] [--json]',
  'slipway secret reveal --name N [--version V] [--format env|json] [--json]',
  'slipway secret delete --name N [--permanent] [--ignore-not-found] [--force] [--json]',
  'slipway secret restore --name N [--version V] [--json]   (slipway secret --help)',
];

export const BACKUP_USAGE = [
  'slipway backup --to FILE [--json]   (SQLite: a consistent copy while servers keep serving)',
];

export const RESTORE_USAGE = [
  'slipway restore --from FILE [--json]   (SQLite: a checked backup in place of the database, every server stopped; the one replaced kept beside it)',
];

/** `--help` anywhere after the command prints its usage instead of running it. */
export function wantsHelp(argv: string[], usage: string[]): boolean {
  // `slipway org help` as `slipway keys help` and `slipway help`.
  if (!argv.includes('--help') && !argv.includes('-h') && argv[0] !== 'help') return false;
  process.stdout.write(`usage:\n${usage.map((line) => `  ${line}\n`).join('')}`);
  return true;
}
