import { EnvelopArmorPlugin } from '@escape.tech/graphql-armor';
import { ErrorCode } from '@herald/contracts';
import { GraphQLError, type ValidationContext } from 'graphql';
import type { Plugin } from 'graphql-yoga';

/** Which limit refused a document, in `extensions.limit`. */
export type DocumentLimit = 'tokens' | 'depth' | 'aliases' | 'cost' | 'directives' | 'nesting';

export interface DocumentLimitOptions {
  /** Selection depth (MAX_QUERY_DEPTH). */
  maxDepth: number;
  /** Aliases per document (MAX_QUERY_ALIASES). */
  maxAliases: number;
  /** Lexical tokens per document (MAX_QUERY_TOKENS); counted while parsing, so a huge document stops early. */
  maxTokens: number;
  /** Cost per document in graphql-armor's model (MAX_QUERY_COST); `first: 2147483647` is refused here. */
  maxCost: number;
  /** Directives per document (MAX_QUERY_DIRECTIVES); `@include` ×1000 is refused here. */
  maxDirectives: number;
  /** When false, field suggestions ("did you mean …") are removed: they would leak the schema. */
  introspection: boolean;
}

/**
 * Every limit on a document's size and shape, each refusal a GraphQL error with
 * `extensions.code` and `extensions.limit`, on HTTP and WebSocket alike:
 * - tokens are counted by the parser and refuse with GRAPHQL_PARSE_FAILED before the document is built;
 * - depth, aliases, cost and directives are validation errors (GRAPHQL_VALIDATION_FAILED);
 * - a document nested deeper than the parser's or validator's recursion can take (possible only with a
 *   raised token limit) is refused as `nesting` instead of a `RangeError` becoming a 500.
 *
 * graphql-armor throws its refusals by default, which Yoga answers without a code and graphql-ws turns
 * into a 4500 close; here each one is reported (validation) or thrown already coded (parse).
 */
export function useDocumentLimits(options: DocumentLimitOptions): Plugin[] {
  return [
    EnvelopArmorPlugin({
      maxTokens: { n: options.maxTokens, ...refuseAs('tokens') },
      maxDepth: { n: options.maxDepth, ...refuseAs('depth') },
      maxAliases: { n: options.maxAliases, ...refuseAs('aliases') },
      costLimit: { maxCost: options.maxCost, ...refuseAs('cost') },
      maxDirectives: { n: options.maxDirectives, ...refuseAs('directives') },
      blockFieldSuggestion: { enabled: !options.introspection },
    }) as Plugin,
    useRecursionGuard(),
  ];
}

function refuseAs(limit: DocumentLimit) {
  return {
    propagateOnRejection: false,
    onReject: [
      (context: ValidationContext | null, error: GraphQLError) => {
        // The token limit runs inside the parser, where there is no validation context to report to.
        if (context === null) throw limitError(error.message, limit, ErrorCode.GRAPHQL_PARSE_FAILED);
        context.reportError(limitError(error.message, limit, ErrorCode.GRAPHQL_VALIDATION_FAILED));
      },
    ],
  };
}

function limitError(armorMessage: string, limit: DocumentLimit, code: string): GraphQLError {
  // armor prefixes every refusal with "Syntax Error: ", even the cost of a well-formed document.
  const message = limit === 'tokens' ? armorMessage : armorMessage.replace(/^Syntax Error: /, '');
  return new GraphQLError(message, { extensions: { code, limit } });
}

const NESTING_MESSAGE = 'Document nested too deeply to process';

/** Turns a stack overflow while parsing or validating into a coded refusal. */
function useRecursionGuard(): Plugin {
  return {
    onParse() {
      return ({ result, replaceParseResult }) => {
        if (result instanceof RangeError) {
          replaceParseResult(
            new GraphQLError(NESTING_MESSAGE, {
              extensions: { code: ErrorCode.GRAPHQL_PARSE_FAILED, limit: 'nesting' },
            }),
          );
        }
      };
    },
    onValidate({ validateFn, setValidationFn }) {
      setValidationFn((...args) => {
        try {
          return validateFn(...args);
        } catch (error) {
          if (!(error instanceof RangeError)) throw error;
          return [
            new GraphQLError(NESTING_MESSAGE, {
              extensions: { code: ErrorCode.GRAPHQL_VALIDATION_FAILED, limit: 'nesting' },
            }),
          ];
        }
      });
    },
  };
}
