// Roles and what they rank. `runner` stands apart: it can do the runner protocol and nothing else.
import { Type } from '@sinclair/typebox';

export const ROLES = ['owner', 'admin', 'developer', 'viewer', 'runner'] as const;
export type Role = (typeof ROLES)[number];
export const RoleSchema = Type.Union(ROLES.map((r) => Type.Literal(r)), {
  description: 'owner > admin > developer > viewer; runner only claims and reports deployments.',
});

const RANK: Record<Role, number> = { owner: 4, admin: 3, developer: 2, viewer: 1, runner: 0 };

/**
 * What a route asks of its caller: a minimum human role (`viewer` admits viewer and everything
 * above it, never a runner), a runner, any authenticated caller of the organization, or an
 * instance administrator.
 */
export type Access = 'viewer' | 'developer' | 'admin' | 'owner' | 'runner' | 'member' | 'instance-admin';

export function isRole(value: string): value is Role {
  return (ROLES as readonly string[]).includes(value);
}

/** Instance administrators act as owners in every organization. */
export function effectiveRole(role: Role, instanceAdmin: boolean): Role {
  return instanceAdmin ? 'owner' : role;
}

export function allows(access: Access, role: Role, instanceAdmin: boolean): boolean {
  if (access === 'instance-admin') return instanceAdmin;
  if (access === 'member') return true;
  if (access === 'runner') return role === 'runner';
  const effective = effectiveRole(role, instanceAdmin);
  return effective !== 'runner' && RANK[effective] >= RANK[access];
}

/** An admin may hand out any role up to its own; only an owner makes owners. */
export function canGrant(granter: Role, role: Role): boolean {
  if (role === 'runner') return RANK[granter] >= RANK.admin;
  return granter !== 'runner' && RANK[granter] >= RANK[role];
}
