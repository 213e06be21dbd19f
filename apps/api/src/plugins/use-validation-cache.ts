import type { DocumentNode, GraphQLError, GraphQLSchema, ValidationRule } from 'graphql';
import type { Plugin } from 'graphql-yoga';

type Results = WeakMap<GraphQLSchema, WeakMap<DocumentNode, readonly GraphQLError[]>>;

/**
 * Yoga's validation cache, keyed the same way (the rules' names, the schema, the parsed document,
 * which Yoga's parse cache makes the same object for the same text), minus its per-request cost:
 * Yoga joins the names of the ~40 rules into its key on every request (`Function.prototype.name`
 * getters, ~4 % of a publishPost request's CPU). Here the key is rebuilt only when the rule functions
 * differ from the previous request's, which for Herald's fixed rules is never after the first.
 * Must come after every plugin that adds a validation rule (last in `plugins`), with Yoga's own
 * validation cache off (`parserAndValidationCache: { validationCache: false }`).
 */
export function useValidationCache(): Plugin {
  const byRules = new Map<string, Results>();
  let lastRules: readonly ValidationRule[] = [];
  let lastKey = '';
  const keyOf = (rules: readonly ValidationRule[] | undefined): string => {
    if (!rules) return '';
    if (rules.length !== lastRules.length || rules.some((rule, index) => rule !== lastRules[index])) {
      lastKey = rules.map((rule) => rule.name).join(',');
      lastRules = [...rules];
    }
    return lastKey;
  };
  return {
    onValidate({ params: { schema, documentAST, rules }, setResult }) {
      if (schema == null) return;
      const key = keyOf(rules as readonly ValidationRule[] | undefined);
      let bySchema = byRules.get(key);
      if (!bySchema) {
        bySchema = new WeakMap();
        byRules.set(key, bySchema);
      }
      let byDocument = bySchema.get(schema);
      if (!byDocument) {
        byDocument = new WeakMap();
        bySchema.set(schema, byDocument);
      }
      const cached = byDocument.get(documentAST);
      if (cached) {
        setResult(cached);
        return;
      }
      const results = byDocument;
      return ({ result }) => {
        if (result != null) results.set(documentAST, result as readonly GraphQLError[]);
      };
    },
  };
}
