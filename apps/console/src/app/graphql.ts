/** Everything the console asks goes here: the public GraphQL endpoint, with the signed-in user's token. */

/** GraphQL errors that come back as data, with their `extensions.code`. */
export class GraphQLRequestError extends Error {
  override name = 'GraphQLRequestError';
  constructor(
    message: string,
    /** `UNAUTHENTICATED`, `FORBIDDEN`, `NOT_FOUND`, `BAD_USER_INPUT`, … or `NETWORK` when no answer came. */
    readonly code: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

/** How long one request may take before the console reports the API as unreachable. */
const REQUEST_TIMEOUT_MS = 15_000;

/** `/graphql` beside the console's own path (`/console/` → `/graphql`), so it works behind a proxy too. */
export const GRAPHQL_URL = new URL('../graphql', document.baseURI).href;

export type Request = <T>(query: string, variables?: Record<string, unknown>) => Promise<T>;

/**
 * A request function bound to one token. Rejects with {@link GraphQLRequestError}; when the API refuses
 * the token itself (expired, revoked key: `UNAUTHENTICATED`), `onUnauthenticated` runs too, so the
 * console can ask for a new one instead of showing the same error in every view.
 */
export function createRequest(
  token: string,
  onUnauthenticated?: (message: string) => void,
  url: string = GRAPHQL_URL,
): Request {
  return async <T>(query: string, variables: Record<string, unknown> = {}) => {
    let response: Response;
    try {
      response = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({ query, variables }),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
    } catch (error) {
      throw new GraphQLRequestError(`Herald did not answer: ${(error as Error).message}`, 'NETWORK');
    }
    let body: { data?: T; errors?: { message: string; extensions?: { code?: string } }[] };
    try {
      body = await response.json();
    } catch {
      throw new GraphQLRequestError(`Herald answered HTTP ${response.status} without JSON`, 'NETWORK', response.status);
    }
    const [first] = body.errors ?? [];
    if (first) {
      if (first.extensions?.code === 'UNAUTHENTICATED') onUnauthenticated?.(first.message);
      throw new GraphQLRequestError(first.message, first.extensions?.code ?? 'INTERNAL_SERVER_ERROR', response.status);
    }
    if (body.data === undefined) throw new GraphQLRequestError('Herald answered without data', 'NETWORK');
    return body.data;
  };
}
