/**
 * The authenticated caller, as read from a verified JWT (SPEC §4).
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
}

/** Whether the viewer is a member of `orgId`. */
export function isMemberOf(viewer: Viewer | null | undefined, orgId: string): boolean {
  return viewer?.orgs.includes(orgId) ?? false;
}
