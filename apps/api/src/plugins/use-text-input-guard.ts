import { ErrorCode } from '@herald/contracts';
import { GraphQLError, type ValidationRule } from 'graphql';
import type { Plugin } from 'graphql-yoga';

/**
 * A NUL character, or a UTF-16 surrogate that is not half of a pair (with the `u` flag a paired
 * surrogate is one code point, so only lone ones match). PostgreSQL cannot store either in text
 * ("invalid byte sequence for encoding UTF8: 0x00"), and neither is ever meaningful text.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching NUL is the point
const INVALID_TEXT = /[\u0000\uD800-\uDFFF]/u;

export const INVALID_TEXT_MESSAGE = 'Text must not contain NUL characters or invalid UTF-16 (unpaired surrogates)';

/** Whether `text` holds a character no text argument may carry. */
export function isInvalidText(text: string): boolean {
  return INVALID_TEXT.test(text);
}

/**
 * Refuses every operation whose text inputs hold a NUL or an unpaired surrogate with BAD_USER_INPUT,
 * before anything executes, on HTTP and WebSocket alike: one place for every String, ID and
 * custom-scalar argument, in variables (checked at execute/subscribe, with the variable path in
 * `extensions.variable`) and in document literals (a validation rule, so Yoga's validation cache
 * keeps the check off the hot path for repeated documents).
 */
export function useTextInputGuard(): Plugin {
  const refuse = (variables: unknown) => {
    const path = findInvalidTextVariable(variables);
    return path === undefined
      ? undefined
      : {
          errors: [
            new GraphQLError(`${INVALID_TEXT_MESSAGE}: $${path}`, {
              extensions: { code: ErrorCode.BAD_USER_INPUT, variable: path },
            }),
          ],
        };
  };
  return {
    onValidate({ addValidationRule }) {
      addValidationRule(NoInvalidTextLiteralRule);
    },
    onExecute({ args, setResultAndStopExecution }) {
      const refusal = refuse(args.variableValues);
      if (refusal) setResultAndStopExecution(refusal);
    },
    onSubscribe({ args, setResultAndStopExecution }) {
      const refusal = refuse(args.variableValues);
      if (refusal) setResultAndStopExecution(refusal);
    },
  };
}

const NoInvalidTextLiteralRule: ValidationRule = function NoInvalidTextLiteralRule(context) {
  return {
    StringValue(node) {
      if (isInvalidText(node.value)) {
        context.reportError(
          new GraphQLError(INVALID_TEXT_MESSAGE, { nodes: node, extensions: { code: ErrorCode.BAD_USER_INPUT } }),
        );
      }
    },
  };
};

/**
 * The path of the first variable (string or object key, at any depth) holding invalid text, or undefined:
 * what this guard refuses an operation for. The HTTP fast path asks it before running anything itself.
 */
export function findInvalidTextVariable(variables: unknown): string | undefined {
  return findInvalidText(variables, '');
}

/** The dotted path of the first string (or object key) holding invalid text, or undefined. */
function findInvalidText(value: unknown, path: string): string | undefined {
  if (typeof value === 'string') return isInvalidText(value) ? path : undefined;
  if (value === null || typeof value !== 'object') return undefined;
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) {
      const found = findInvalidText(value[index], `${path}.${index}`);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    const itemPath = path === '' ? key : `${path}.${key}`;
    if (isInvalidText(key)) return itemPath;
    const found = findInvalidText(item, itemPath);
    if (found !== undefined) return found;
  }
  return undefined;
}
