/**
 * One GraphQL request over HTTP for fault tests, bounded so that a hang is a failure, not a stuck test:
 * the answer (status, code of the first error, `Retry-After`) or what went wrong on the wire.
 */
export interface GraphqlAnswer {
  status: number;
  body: { data?: any; errors?: Array<{ message: string; extensions?: { code?: string } }> };
  retryAfter: string | null;
}

/** A request that has not answered in this long counts as hung (a request must never hang). */
export const REQUEST_HANG_MS = 15_000;

export async function postGraphql(
  baseUrl: string,
  token: string,
  query: string,
  variables: Record<string, unknown> = {},
  timeoutMs = REQUEST_HANG_MS,
): Promise<GraphqlAnswer> {
  const response = await fetch(`${baseUrl}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  return {
    status: response.status,
    body: (await response.json()) as GraphqlAnswer['body'],
    retryAfter: response.headers.get('retry-after'),
  };
}

/** True for the two acceptable answers during an outage: success, or 503 SERVICE_UNAVAILABLE. */
export function isOkOrUnavailable(answer: GraphqlAnswer): boolean {
  if (answer.status === 200 && answer.body.errors === undefined) return true;
  return (
    answer.status === 503 &&
    answer.retryAfter !== null &&
    answer.body.errors?.length !== undefined &&
    answer.body.errors.every((error) => error.extensions?.code === 'SERVICE_UNAVAILABLE')
  );
}

/**
 * The `data` of one GraphQL request as `token`'s user, for the steps a test takes itself (not for what it
 * asserts about an answer): any GraphQL error throws, naming the query.
 */
export async function graphqlData(
  baseUrl: string,
  token: string,
  query: string,
  variables: Record<string, unknown> = {},
  timeoutMs = REQUEST_HANG_MS,
): Promise<any> {
  const { body } = await postGraphql(baseUrl, token, query, variables, timeoutMs);
  if (body.errors) throw new Error(`${query} failed: ${JSON.stringify(body.errors)}`);
  return body.data;
}

/** Creates a post titled `title` in `orgId` and publishes it, through {@link graphqlData}. */
export async function publishNewPost(
  baseUrl: string,
  token: string,
  orgId: string,
  title: string,
  timeoutMs = REQUEST_HANG_MS,
): Promise<void> {
  const { createPost } = await graphqlData(
    baseUrl,
    token,
    'mutation($orgId: ID!, $title: String!) { createPost(input: { orgId: $orgId, title: $title }) { id } }',
    { orgId, title },
    timeoutMs,
  );
  await graphqlData(
    baseUrl,
    token,
    'mutation($id: ID!) { publishPost(id: $id) { id } }',
    { id: createPost.id },
    timeoutMs,
  );
}
