import { readdirSync, readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ErrorCode } from '../../packages/contracts/src/errors.js';

/**
 * The error and close codes a client meets, with what each means and what to do: docs/errors.md is
 * rendered from here (`pnpm docs:config`), and test/docs-errors.test.ts fails when a code used in the
 * code is missing here, or the committed page differs from the rendering.
 */

export interface ErrorCodeEntry {
  /** The HTTP status of an answer carrying it (GraphQL over HTTP), or how it arrives otherwise. */
  http: string;
  meaning: string;
  /** What a client should do. */
  action: string;
}

/** Every `extensions.code` Herald sets, the contract's and the transport's. */
export const ERROR_CODES: Record<string, ErrorCodeEntry> = {
  [ErrorCode.UNAUTHENTICATED]: {
    http: '401 for a bad token (`WWW-Authenticate`); 200 when the operation needs a user and there is none',
    meaning:
      'No valid user: the bearer token is missing where one is needed, malformed, expired or signed with another key.',
    action: 'Get a fresh token and send the operation again. Do not retry with the same token.',
  },
  [ErrorCode.FORBIDDEN]: {
    http: '200',
    meaning:
      'The user is not a member of the organisation the operation names, or lacks the role it needs (`herald:admin`).',
    action: 'Do not retry: ask for access.',
  },
  [ErrorCode.BAD_USER_INPUT]: {
    http: '200',
    meaning:
      'An argument is not acceptable: a value out of range, an unknown event type, a URL the webhook policy refuses, a malformed filter or limit.',
    action: 'Fix the input; the message names the field. Nothing was changed.',
  },
  [ErrorCode.NOT_FOUND]: {
    http: '200',
    meaning: 'No such object, or it belongs to an organisation you are not in (the two are answered alike).',
    action: 'Do not retry.',
  },
  [ErrorCode.INTERNAL_SERVER_ERROR]: {
    http: '200 (500 when the server could not answer at all)',
    meaning:
      'An unexpected failure; the message is masked outside development, the server logged the cause with the request id.',
    action: 'Retry with backoff; report the `x-request-id` if it persists.',
  },
  [ErrorCode.SERVICE_UNAVAILABLE]: {
    http: '503 with `Retry-After`',
    meaning: 'PostgreSQL or Redis is unreachable for now (a failover, a restart, a dropped connection).',
    action: 'Retry the same operation after `Retry-After`. A mutation answered with it did not commit.',
  },
  [ErrorCode.GRAPHQL_PARSE_FAILED]: {
    http: '400',
    meaning: 'The document does not parse, or exceeds a size limit (tokens, nesting).',
    action: 'Fix the document.',
  },
  [ErrorCode.GRAPHQL_VALIDATION_FAILED]: {
    http: '400',
    meaning:
      'The document does not validate against the schema, or exceeds a limit (depth, aliases, cost, directives).',
    action: 'Fix the document.',
  },
  [ErrorCode.WEBSOCKET_REQUIRED]: {
    http: '400',
    meaning: 'A subscription sent over HTTP: subscriptions are served over WebSocket (graphql-ws) only.',
    action: 'Open a WebSocket to the same path and subscribe there.',
  },
  [ErrorCode.AUTH_UNAVAILABLE]: {
    http: '503 with `Retry-After`; over WebSocket, close 1013',
    meaning:
      'The token could not be checked because the key source (JWKS) is unreachable. The token itself may be fine.',
    action: 'Retry later with the same token.',
  },
  [ErrorCode.CURSOR_EXPIRED]: {
    http: 'WebSocket `error` message',
    meaning:
      "A subscription's `after` cursor is malformed, older than the history, or from another organisation: events were missed for good.",
    action:
      'Reconcile with a `posts` query, then subscribe again without `after` (`@herald/client` calls `onCursorExpired`).',
  },
  [ErrorCode.SUBSCRIPTION_INTERRUPTED]: {
    http: 'WebSocket `error` message',
    meaning: 'The server ended a live subscription because its event source failed.',
    action: 'Subscribe again with the last cursor after a backoff (`@herald/client` does).',
  },
  [ErrorCode.HISTORY_UNAVAILABLE]: {
    http: 'WebSocket `error` message',
    meaning:
      'A resuming subscription could not read the history now (Redis unreachable or slow). The cursor is still good.',
    action: 'Subscribe again with the same cursor after a backoff; do not reconcile for it.',
  },
  [ErrorCode.RATE_LIMITED]: {
    http: '429 with `Retry-After`; WebSocket `error` message',
    meaning:
      'An organisation (or user) is over a quota: `extensions.limit` names it (`operationsPerSecond`, `publishesPerSecond`), `extensions.retryAfterMs` says when to try again. A refused mutation committed nothing.',
    action: 'Retry the same operation after `retryAfterMs` (plus jitter).',
  },
  [ErrorCode.SUBSCRIPTION_LIMIT_EXCEEDED]: {
    http: 'WebSocket `error` message (the socket stays open)',
    meaning:
      "A subscribe over a cap: 50 subscriptions per socket, or the organisation's `subscriptions` quota (named in `extensions.limit`).",
    action: 'End another subscription first, or ask for a higher quota.',
  },
  REQUEST_ENTITY_TOO_LARGE: {
    http: '413',
    meaning: 'The request body is over 1 MiB.',
    action: 'Send a smaller request.',
  },
  BAD_REQUEST: {
    http: '400',
    meaning: 'The request is not GraphQL over HTTP Herald can read (a body that is not JSON, a wrong content type).',
    action: 'Fix the request.',
  },
};

/** Codes `@herald/client` raises itself, before anything reaches the server. */
export const CLIENT_ERROR_CODES: Record<string, ErrorCodeEntry> = {
  BAD_SUBSCRIPTION_DOCUMENT: {
    http: '`sink.error` at `subscribe` (never sent)',
    meaning:
      'A `postPublished` document the library cannot make resumable: a syntax error, two `postPublished` fields, the field inside a fragment, a cursor that is not a string.',
    action: 'Write `postPublished` once, directly in the subscription.',
  },
};

export interface CloseCodeEntry {
  code: number;
  name: string;
  when: string;
  action: string;
}

/** Every WebSocket close code the server sends. */
export const CLOSE_CODES: CloseCodeEntry[] = [
  {
    code: 1001,
    name: 'Going Away',
    when: 'The server stops after its grace period with sockets still open.',
    action: 'Reconnect (another pod answers) and resume with the last cursor.',
  },
  {
    code: 1009,
    name: 'Message Too Big',
    when: 'A message over 1 MiB (sent by the WebSocket layer itself).',
    action: 'A client bug: send smaller documents and variables; do not retry the same message.',
  },
  {
    code: 1012,
    name: 'Service Restart',
    when: 'A pod drains for a shutdown or a rolling restart, or sheds sockets over its share of the cluster.',
    action: 'Reconnect with jitter and resume with the last cursor.',
  },
  {
    code: 1013,
    name: 'Try Again Later',
    when: 'The consumer is too slow (over 512 KiB waiting to be sent); the key source is unreachable; the user is over `socketsPerUser` (sent after `connection_init`).',
    action: 'Reconnect after a backoff and resume.',
  },
  {
    code: 4400,
    name: 'Bad Request',
    when: 'A message that is not graphql-transport-ws.',
    action: 'A client bug: do not retry the same messages.',
  },
  {
    code: 4401,
    name: 'Unauthorized',
    when: 'A `subscribe` before `connection_ack`.',
    action: 'Wait for `connection_ack` (the graphql-ws client does).',
  },
  {
    code: 4403,
    name: 'Forbidden',
    when: 'The token in `connection_init` is invalid, or the token of a live socket expired (`Forbidden: token expired`).',
    action: 'Reconnect with a fresh token (`@herald/client` asks `token()` again).',
  },
  {
    code: 4406,
    name: 'Subprotocol Not Acceptable',
    when: 'The socket did not ask for the `graphql-transport-ws` sub-protocol (the legacy `graphql-ws` one of subscriptions-transport-ws included).',
    action: 'Use a graphql-transport-ws client (graphql-ws, `@herald/client`).',
  },
  {
    code: 4408,
    name: 'Connection initialisation timeout',
    when: "No `connection_init` within the server's wait.",
    action: 'Send `connection_init` right after the socket opens.',
  },
  {
    code: 4409,
    name: 'Subscriber already exists',
    when: 'A `subscribe` reuses the id of a subscription still running on the socket.',
    action: 'A client bug: use a new id per subscription.',
  },
  {
    code: 4429,
    name: 'Too many initialisation requests',
    when: 'A second `connection_init` on one socket.',
    action: 'A client bug: send `connection_init` once.',
  },
  {
    code: 4500,
    name: 'Internal server error',
    when: 'The server failed to handle the socket (logged with its cause).',
    action: 'Reconnect with backoff and resume.',
  },
];

const cell = (text: string) => text.replaceAll('|', '\\|');

export function renderErrorReference(): string {
  const codeRows = (codes: Record<string, ErrorCodeEntry>) =>
    Object.entries(codes).map(
      ([code, entry]) => `| \`${code}\` | ${cell(entry.http)} | ${cell(entry.meaning)} | ${cell(entry.action)} |`,
    );
  return [
    '# Error codes and close codes',
    '',
    '<!-- Generated by `pnpm docs:config` from docs/build/error-reference.ts; test/docs-errors.test.ts fails when',
    '     a code used in the code is missing there, or when this page is not what it renders. -->',
    '',
    'Every GraphQL error Herald returns carries a code in `extensions.code`; clients switch on the code, never',
    'on the message. Codes are never renamed. Over HTTP the status says whether to retry at all; over a',
    'WebSocket an error arrives as an `error` message for one subscription, and the socket stays open unless',
    'a close code below ends it.',
    '',
    '## GraphQL error codes',
    '',
    '| code | arrives as | meaning | what to do |',
    '|---|---|---|---|',
    ...codeRows(ERROR_CODES),
    '',
    '## Raised by `@herald/client`',
    '',
    '| code | arrives as | meaning | what to do |',
    '|---|---|---|---|',
    ...codeRows(CLIENT_ERROR_CODES),
    '',
    '## WebSocket close codes',
    '',
    "Codes 1001–1013 are the WebSocket standard's; 44xx and 4500 are graphql-transport-ws's. A client that",
    'reconnects on every code except 4400, 4401, 4409 and 4429 (client bugs) and resumes from its last cursor',
    'loses nothing; `@herald/client` does exactly that.',
    '',
    '| code | name | when the server sends it | what to do |',
    '|---:|---|---|---|',
    ...CLOSE_CODES.map((entry) => `| ${entry.code} | ${entry.name} | ${cell(entry.when)} | ${cell(entry.action)} |`),
    '',
  ].join('\n');
}

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** Source files of the apps and packages, tests and fixtures left out. */
function sourceFiles(dir: string): string[] {
  const files: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === 'node_modules' || entry.name === 'dist' || entry.name === 'testing') continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) files.push(...sourceFiles(path));
    else if (/\.ts$/.test(entry.name) && !/\.test\.ts$/.test(entry.name)) files.push(path);
  }
  return files;
}

/** The `extensions.code` values the code sets: every `ErrorCode` member and every literal `code: 'X'`. */
export function errorCodesInSource(): string[] {
  const found = new Set<string>(Object.values(ErrorCode));
  for (const file of [...sourceFiles(join(ROOT, 'apps/api/src')), ...sourceFiles(join(ROOT, 'packages'))]) {
    for (const match of readFileSync(file, 'utf8').matchAll(/\bcode: '([A-Z][A-Z_]+)'/g)) {
      // A system error's code (`ENOTFOUND` from a resolver) is not a GraphQL error code.
      if (!(match[1]! in constants.errno) && match[1] !== 'ENOTFOUND') found.add(match[1]!);
    }
  }
  return [...found].sort();
}

/** graphql-ws's close code names, as the server code uses them (`CloseCode.Forbidden`). */
const GRAPHQL_WS_CLOSE_CODES: Record<string, number> = {
  InternalServerError: 4500,
  InternalClientError: 4005,
  BadRequest: 4400,
  BadResponse: 4004,
  Unauthorized: 4401,
  Forbidden: 4403,
  SubprotocolNotAcceptable: 4406,
  ConnectionInitialisationTimeout: 4408,
  ConnectionAcknowledgementTimeout: 4504,
  SubscriberAlreadyExists: 4409,
  TooManyInitialisationRequests: 4429,
};

/**
 * The close codes the API's sockets can get: numbers and `CloseCode` names passed to `close(`, the
 * `…_CLOSE_CODE` constants (those the WebSocket layer sends itself included), and the `CloseCode` names
 * listed as graphql-ws's own (`GRAPHQL_WS_SENT_CLOSE_CODES`).
 */
export function closeCodesInSource(): number[] {
  const found = new Set<number>();
  for (const file of sourceFiles(join(ROOT, 'apps/api/src'))) {
    const text = readFileSync(file, 'utf8');
    for (const match of text.matchAll(/\.close\((\d{4})\b/g)) found.add(Number(match[1]));
    for (const match of text.matchAll(/_CLOSE_CODE = (\d{4})\b/g)) found.add(Number(match[1]));
    for (const match of text.matchAll(/\bCloseCode\.([A-Za-z]+)/g)) {
      const code = GRAPHQL_WS_CLOSE_CODES[match[1]!];
      if (code === undefined) throw new Error(`unknown graphql-ws close code CloseCode.${match[1]} in ${file}`);
      found.add(code);
    }
  }
  return [...found].sort((a, b) => a - b);
}
