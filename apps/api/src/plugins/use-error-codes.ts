import { ErrorCode } from '@herald/contracts';
import type { ExecutionResult } from 'graphql';
import { GraphQLError } from 'graphql';
import { isAsyncIterable, type Plugin } from 'graphql-yoga';

/** Code for a document that does not parse or does not validate against the schema. */
export const GRAPHQL_VALIDATION_FAILED = ErrorCode.GRAPHQL_VALIDATION_FAILED;
/** Code for a document that is not valid GraphQL syntax. */
export const GRAPHQL_PARSE_FAILED = ErrorCode.GRAPHQL_PARSE_FAILED;

/**
 * Makes sure every error a client sees carries `extensions.code`. Resolver errors already
 * do (see errors.ts, and masking adds INTERNAL_SERVER_ERROR); this tags the ones graphql-js raises
 * itself: syntax errors, validation errors and variable values that do not coerce (BAD_USER_INPUT).
 */
export function useErrorCodes(): Plugin {
  return {
    onParse() {
      return ({ result, replaceParseResult }) => {
        if (result instanceof GraphQLError) replaceParseResult(withCode(result, GRAPHQL_PARSE_FAILED));
      };
    },
    onValidate() {
      return ({ result, setResult }) => {
        if (result.length > 0) setResult(result.map((error) => withCode(error, GRAPHQL_VALIDATION_FAILED)));
      };
    },
    onExecute() {
      return {
        onExecuteDone({ result, setResult }) {
          if (isAsyncIterable(result)) return;
          const tagged = tagVariableErrors(result);
          if (tagged !== result) setResult(tagged);
        },
      };
    },
    onSubscribe() {
      return {
        onSubscribeResult({ result, setResult }) {
          if (isAsyncIterable(result)) return;
          const tagged = tagVariableErrors(result);
          if (tagged !== result) setResult(tagged);
        },
      };
    },
  };
}

/**
 * What a transport answers when parsing or validating a document threw (rather than returned errors):
 * the GraphQLError with `code` added when missing, or a generic coded error for anything else, so a
 * refused document never ends a WebSocket with 4500.
 */
export function documentError(error: unknown, code: typeof GRAPHQL_PARSE_FAILED | typeof GRAPHQL_VALIDATION_FAILED) {
  if (error instanceof GraphQLError) return withCode(error, code);
  return new GraphQLError('Document could not be processed', { extensions: { code } });
}

/** Variable coercion errors come back from execute with no path and no code. */
function tagVariableErrors(result: ExecutionResult): ExecutionResult {
  if (!result.errors?.some((error) => error.path === undefined && error.extensions?.code === undefined)) {
    return result;
  }
  return {
    ...result,
    errors: result.errors.map((error) =>
      error.path === undefined && error.extensions?.code === undefined
        ? withCode(error, ErrorCode.BAD_USER_INPUT)
        : error,
    ),
  };
}

function withCode(error: GraphQLError, code: string): GraphQLError {
  if (error.extensions?.code !== undefined) return error;
  return new GraphQLError(error.message, {
    nodes: error.nodes,
    source: error.source,
    positions: error.positions,
    path: error.path,
    originalError: error.originalError,
    extensions: { ...error.extensions, code },
  });
}
