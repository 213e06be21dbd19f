import { request } from 'node:http';

/** A request unanswered for this long counts as failed (and the socket is dropped). */
export const REQUEST_TIMEOUT_MS = 15_000;

export interface GraphqlResult {
  status: number;
  data?: any;
  errors?: Array<{ message: string; extensions?: { code?: string } }>;
}

/**
 * One GraphQL POST on a connection of its own: pods are killed behind nginx during the soak, and a request
 * written on a pooled connection a pod has just closed could not tell whether the mutation ran.
 */
export function postGraphql(
  baseUrl: string,
  token: string,
  query: string,
  variables: Record<string, unknown>,
  timeoutMs = REQUEST_TIMEOUT_MS,
): Promise<GraphqlResult> {
  const body = JSON.stringify({ query, variables });
  return new Promise((resolve, reject) => {
    const req = request(
      `${baseUrl}/graphql`,
      {
        method: 'POST',
        agent: false,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          authorization: `Bearer ${token}`,
          connection: 'close',
        },
        timeout: timeoutMs,
      },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => {
          text += chunk;
        });
        response.on('end', () => {
          try {
            resolve({ status: response.statusCode ?? 0, ...(JSON.parse(text) as object) });
          } catch {
            resolve({ status: response.statusCode ?? 0, errors: [{ message: `not JSON: ${text.slice(0, 200)}` }] });
          }
        });
        response.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}
