import { NoSchemaIntrospectionCustomRule } from 'graphql';
import type { Plugin } from 'graphql-yoga';

/**
 * Refuses introspection (`__schema`, `__type`) on every transport when `enabled` is false, as a
 * validation error (GRAPHQL_VALIDATION_FAILED).
 *
 * Yoga's `useDisableIntrospection` decides per HTTP request (in `onRequestParse`), so operations that
 * reach envelop without an HTTP request (graphql-ws subscribes) bypassed it and returned the schema.
 * This adds the rule unconditionally; Yoga's validation cache keys on the rule names, so documents
 * validated with and without it never share a cached result.
 */
export function useIntrospectionPolicy(enabled: boolean): Plugin {
  if (enabled) return {};
  return {
    onValidate({ addValidationRule }) {
      addValidationRule(NoSchemaIntrospectionCustomRule);
    },
  };
}
