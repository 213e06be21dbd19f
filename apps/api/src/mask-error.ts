import { isDatabaseUnavailableError } from '@herald/db';
import { GraphQLError } from 'graphql';
import { type MaskError, maskError as yogaMaskError } from 'graphql-yoga';
import { ServiceUnavailableError } from './errors.js';

/**
 * Yoga's masking, plus one rule: an error that means the database is unreachable (failover, restart,
 * dropped connection, acquire timeout) becomes {@link ServiceUnavailableError}, HTTP 503
 * `SERVICE_UNAVAILABLE` with `Retry-After`, instead of a 500 `INTERNAL_SERVER_ERROR` that tells the
 * client nothing about retrying. Everything else is masked exactly as Yoga does.
 */
export const maskError: MaskError = (error, message, isDev) => {
  if (isDatabaseUnavailableError(error)) {
    return new ServiceUnavailableError(error instanceof GraphQLError ? error : undefined);
  }
  return yogaMaskError(error, message, isDev);
};
