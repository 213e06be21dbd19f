import { useErrorHandler } from '@envelop/core';
import { isDatabaseUnavailableError } from '@herald/db';
import { GraphQLError } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import type { Logger } from '../logger.js';

/**
 * Logs every unexpected error (one that is not a GraphQLError a resolver threw on purpose) with the
 * request's logger, before masking replaces it with INTERNAL_SERVER_ERROR in the response.
 */
export function useErrorLogging(fallback: Logger): Plugin<{ log?: Logger }> {
  return useErrorHandler(({ errors, context }) => {
    const log = (context as { log?: Logger }).log ?? fallback;
    for (const error of errors) {
      const original = error instanceof GraphQLError ? error.originalError : error;
      if (original == null || original instanceof GraphQLError) continue;
      if (isDatabaseUnavailableError(original)) {
        // Expected during a failover; answered 503 SERVICE_UNAVAILABLE (mask-error.ts).
        log.warn(
          { err: original, path: error instanceof GraphQLError ? error.path : undefined },
          'database unavailable',
        );
        continue;
      }
      log.error({ err: original, path: error instanceof GraphQLError ? error.path : undefined }, 'unexpected error');
    }
  }) as Plugin<{ log?: Logger }>;
}
