import { InvalidTokenError, type TokenVerifier, type Viewer } from '@herald/auth';
import { type AuthorLoader, createAuthorLoader, type Database } from '@herald/db';
import type { YogaInitialContext } from 'graphql-yoga';
import type { Kysely } from 'kysely';
import { InvalidCredentialsError } from './errors.js';
import type { Logger } from './logger.js';

/** Length of `Bearer ` (SPEC §4: the 7-character prefix is removed). */
const BEARER_PREFIX = 'bearer ';

/** Everything a resolver may use. Built per HTTP request and per WebSocket operation. */
export interface Context extends YogaInitialContext {
  /** The caller, or null when no credentials were sent. */
  viewer: Viewer | null;
  db: Kysely<Database>;
  /** Batching loaders; fresh per request so no cached row outlives the operation. */
  loaders: { author: AuthorLoader };
  /** Logger bound to this request's id. */
  log: Logger;
}

/** What the transport hands the context builder besides Yoga's own initial context. */
export interface TransportContext {
  /** graphql-ws `connection_init` payload, present for WebSocket operations only. */
  connectionParams?: Record<string, unknown> | undefined;
  /** Request-scoped logger, when a plugin made one. */
  log?: Logger;
}

export interface ContextDeps {
  verifier: TokenVerifier;
  db: Kysely<Database>;
  logger: Logger;
}

/**
 * The single context builder behind HTTP and WebSocket (seed §5.3): it reads the `authorization`
 * header of an HTTP request, or the `authToken`/`authorization` connection parameter of a socket.
 * @throws InvalidCredentialsError (HTTP 401, UNAUTHENTICATED) when credentials are present but not valid
 */
export function createContextBuilder(deps: ContextDeps) {
  return async (initial: YogaInitialContext & TransportContext): Promise<Context> => {
    const token = readToken(initial);
    const viewer = token === undefined ? null : await authenticate(deps.verifier, token);
    return {
      ...initial,
      viewer,
      db: deps.db,
      loaders: { author: createAuthorLoader(deps.db) },
      log: initial.log ?? deps.logger,
    };
  };
}

/** Verifies a token, turning any refusal into the client-facing error. */
export async function authenticate(verifier: TokenVerifier, token: string): Promise<Viewer> {
  try {
    return await verifier.verify(token);
  } catch (error) {
    if (error instanceof InvalidTokenError) {
      throw new InvalidCredentialsError(error.reason === 'expired' ? 'Token expired' : capitalise(error.message));
    }
    throw error;
  }
}

/** @returns the raw JWT, undefined when the caller sent no credentials at all */
export function readToken(initial: YogaInitialContext & TransportContext): string | undefined {
  const params = initial.connectionParams;
  if (params) {
    if (typeof params.authToken === 'string' && params.authToken.length > 0) return params.authToken;
    if (typeof params.authorization === 'string') return stripBearer(params.authorization);
    return undefined;
  }
  const header = initial.request?.headers.get('authorization');
  return header == null ? undefined : stripBearer(header);
}

function stripBearer(value: string): string {
  if (value.slice(0, BEARER_PREFIX.length).toLowerCase() !== BEARER_PREFIX) {
    throw new InvalidCredentialsError('Authorization header must use the Bearer scheme');
  }
  const token = value.slice(BEARER_PREFIX.length).trim();
  if (token.length === 0) throw new InvalidCredentialsError('Bearer token is empty');
  return token;
}

function capitalise(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
