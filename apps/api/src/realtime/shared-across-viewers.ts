import type { DocumentNode, GraphQLSchema } from 'graphql';
import { getNamedType, isObjectType, TypeInfo, visit, visitWithTypeInfo } from 'graphql';

/**
 * Which subscriptions may share one execution: those whose every selected field is declared
 * viewer-independent with the `sharedAcrossViewers` extension (on the root field, or on the parent type
 * of any other field; see schema/post.ts). subscription-groups.ts asks once per parsed document.
 */

/** Extension flag on an object type or field: its resolution doesn't depend on who is asking. */
export const SHARED_ACROSS_VIEWERS = 'sharedAcrossViewers';

/**
 * True when every field the subscription selects is declared viewer-independent: the root field by its
 * own `sharedAcrossViewers` extension, every other field by its parent type's.
 */
export function selectionIsViewerIndependent(schema: GraphQLSchema, document: DocumentNode): boolean {
  const operations = document.definitions.filter((definition) => definition.kind === 'OperationDefinition');
  if (operations.length !== 1 || operations[0]?.operation !== 'subscription') return false;
  const subscriptionType = schema.getSubscriptionType();
  const typeInfo = new TypeInfo(schema);
  let independent = true;
  visit(
    document,
    visitWithTypeInfo(typeInfo, {
      Field() {
        const parent = typeInfo.getParentType();
        const field = typeInfo.getFieldDef();
        if (!parent || !field) {
          independent = false;
          return;
        }
        if (field.name === '__typename') return;
        const flagged =
          parent === subscriptionType
            ? field.extensions?.[SHARED_ACROSS_VIEWERS] === true
            : isObjectType(getNamedType(parent)) && parent.extensions?.[SHARED_ACROSS_VIEWERS] === true;
        if (!flagged) independent = false;
      },
    }),
  );
  return independent;
}
