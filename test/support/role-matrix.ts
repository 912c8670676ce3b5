// Typed access to scripts/role-matrix.mjs, the one place that says which roles an operation's
// `x-required-role` admits (the README table is printed from it too).
import type { Role } from '../../src/modules/auth/roles.js';

export interface DocOperation {
  method: string;
  path: string;
  operation: Record<string, any>;
}

export interface RoleMatrix {
  ROLES: Role[];
  ACCESS: string[];
  admits(access: string, role: Role): boolean;
  admitsInstanceAdmin(access: string): boolean;
  operationsOf(doc: unknown): DocOperation[];
  bearerOperations(doc: unknown): Array<DocOperation & { requiredRole: string }>;
  matrixMarkdown(doc: unknown): string;
}

export async function loadRoleMatrix(): Promise<RoleMatrix> {
  // Compiled tests live in <out dir>/test/support; the script stays in the repository's scripts/.
  return (await import(new URL('../../../scripts/role-matrix.mjs', import.meta.url).href)) as RoleMatrix;
}

/** A request path for an operation: `{orgId}` becomes `orgId`, every other parameter `placeholder`. */
export function fillPath(path: string, orgId: string, placeholder = 'no-such-thing'): string {
  return path.replace(/\{([^}]+)\}/g, (_, name: string) => encodeURIComponent(name === 'orgId' ? orgId : placeholder));
}
