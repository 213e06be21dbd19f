/**
 * The authenticated caller, as read from a verified JWT (docs/api.md, "Auth and tenancy").
 * `orgs` is the only source of tenancy: a viewer may act on an organisation only when its id is listed.
 */
export interface Viewer {
  /** `sub` claim: the user id. */
  id: string;
  /** `name` claim; falls back to the user id when the token carries none. */
  name: string;
  /** `orgs` claim: ids of the organisations the user belongs to. */
  orgs: readonly string[];
  /** `exp` claim in Unix seconds, when the token has one; a WebSocket is closed at this moment. */
  expiresAt: number | undefined;
  /** `roles` claim: platform roles, e.g. {@link PLATFORM_ADMIN_ROLE}; empty when the token carries none. */
  roles: readonly string[];
}

/** The `roles` entry of a platform administrator: sets and reads any organisation's limits. */
export const PLATFORM_ADMIN_ROLE = 'herald:admin';

/** Whether the viewer is a platform administrator (`roles` contains {@link PLATFORM_ADMIN_ROLE}). */
export function isPlatformAdmin(viewer: Viewer | null | undefined): boolean {
  return viewer?.roles.includes(PLATFORM_ADMIN_ROLE) ?? false;
}

/** Whether the viewer is a member of `orgId`. */
export function isMemberOf(viewer: Viewer | null | undefined, orgId: string): boolean {
  return viewer?.orgs.includes(orgId) ?? false;
}
