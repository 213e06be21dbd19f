import {
  type ArgumentNode,
  type DocumentNode,
  type FieldNode,
  GraphQLError,
  Kind,
  type OperationDefinitionNode,
  parse,
  print,
  type ValueNode,
  type VariableDefinitionNode,
} from 'graphql';

/** The one subscription field whose events carry a cursor, and its resume argument. */
const RESUMABLE_FIELD = 'postPublished';
const AFTER_ARGUMENT = 'after';
const ORG_ARGUMENT = 'orgId';
/** The variable the library adds when the document declares none for `after`. */
export const AFTER_VARIABLE = 'after';

/** A subscription request made resumable: the document, and the variables it reads. */
export interface ResumableRequest {
  /** The document to send: the caller's own text when it already passed `after` as a variable. */
  query: string;
  /** The caller's variables, plus any value the rewrite moved out of the document. */
  variables: Record<string, unknown>;
  /** The variable that carries the cursor, or undefined for a document without `postPublished`. */
  cursorVariable: string | undefined;
  /** The organisation the subscription reads, when the document or the variables name it. */
  orgId: unknown;
}

/**
 * Makes `postPublished` resumable whatever document the application wrote:
 *
 * - `postPublished(orgId: $orgId, after: $cursor)`: used as it is; the library keeps `$cursor` current.
 * - no `after` argument: the library declares `$after: String` and passes it to the field.
 * - `after: "<literal>"`: the literal becomes the variable's first value.
 *
 * A document that is not a subscription, or has no `postPublished` field, is sent unchanged (nothing
 * to resume). One the library can't make resumable (a syntax error, two `postPublished` fields, the
 * field inside a fragment) is refused here, at subscribe, with a GraphQL error that says why: it must
 * never be sent and later resubscribed without the cursor the library holds.
 */
export function resumableRequest(
  query: string,
  variables: Record<string, unknown> | undefined,
  operationName: string | undefined,
): ResumableRequest {
  const values: Record<string, unknown> = { ...variables };
  const unchanged = { query, variables: values, cursorVariable: undefined, orgId: values[ORG_ARGUMENT] };
  let document: DocumentNode;
  try {
    document = parse(query, { noLocation: true });
  } catch (error) {
    throw refusal(`the subscription document does not parse: ${(error as Error).message}`);
  }
  const operation = pickOperation(document, operationName);
  if (operation?.operation !== 'subscription') return unchanged;
  const fields = operation.selectionSet.selections.filter(
    (selection): selection is FieldNode => selection.kind === Kind.FIELD && selection.name.value === RESUMABLE_FIELD,
  );
  if (fields.length === 0) {
    if (operation.selectionSet.selections.some((selection) => selection.kind !== Kind.FIELD)) {
      throw refusal(`write ${RESUMABLE_FIELD} directly in the subscription, not in a fragment, so it can be resumed`);
    }
    return unchanged;
  }
  if (fields.length > 1) {
    throw refusal(`one ${RESUMABLE_FIELD} field per subscription: each carries its own cursor`);
  }
  const field = fields[0] as FieldNode;
  const orgId = argumentValue(field, ORG_ARGUMENT, values);
  const after = field.arguments?.find((argument) => argument.name.value === AFTER_ARGUMENT);
  if (after?.value.kind === Kind.VARIABLE) {
    return { query, variables: values, cursorVariable: after.value.name.value, orgId };
  }
  if (after && after.value.kind !== Kind.STRING && after.value.kind !== Kind.NULL) {
    throw refusal(`${RESUMABLE_FIELD}(${AFTER_ARGUMENT}:) takes a cursor string`);
  }

  // Declare a variable (named `after` unless the document uses that name already) and pass it.
  const declared = new Set(operation.variableDefinitions?.map((definition) => definition.variable.name.value));
  let name = AFTER_VARIABLE;
  for (let suffix = 2; declared.has(name); suffix++) name = `${AFTER_VARIABLE}${suffix}`;
  if (after?.value.kind === Kind.STRING) values[name] = after.value.value;
  const variable = { kind: Kind.VARIABLE, name: { kind: Kind.NAME, value: name } } as const;
  const definition: VariableDefinitionNode = {
    kind: Kind.VARIABLE_DEFINITION,
    variable,
    type: { kind: Kind.NAMED_TYPE, name: { kind: Kind.NAME, value: 'String' } },
  };
  const argument: ArgumentNode = {
    kind: Kind.ARGUMENT,
    name: { kind: Kind.NAME, value: AFTER_ARGUMENT },
    value: variable,
  };
  const rewrittenField: FieldNode = {
    ...field,
    arguments: [...(field.arguments ?? []).filter((each) => each !== after), argument],
  };
  const rewrittenOperation: OperationDefinitionNode = {
    ...operation,
    variableDefinitions: [...(operation.variableDefinitions ?? []), definition],
    selectionSet: {
      ...operation.selectionSet,
      selections: operation.selectionSet.selections.map((selection) =>
        selection === field ? rewrittenField : selection,
      ),
    },
  };
  const rewritten: DocumentNode = {
    ...document,
    definitions: document.definitions.map((each) => (each === operation ? rewrittenOperation : each)),
  };
  return { query: print(rewritten), variables: values, cursorVariable: name, orgId };
}

/** The operation graphql-ws will run: the named one, or the only one. */
function pickOperation(document: DocumentNode, operationName: string | undefined): OperationDefinitionNode | undefined {
  const operations = document.definitions.filter(
    (definition): definition is OperationDefinitionNode => definition.kind === Kind.OPERATION_DEFINITION,
  );
  if (operationName === undefined) return operations.length === 1 ? operations[0] : undefined;
  return operations.find((operation) => operation.name?.value === operationName);
}

/** An argument's value: a literal from the document, or the variable's value. */
function argumentValue(field: FieldNode, name: string, variables: Record<string, unknown>): unknown {
  const value: ValueNode | undefined = field.arguments?.find((argument) => argument.name.value === name)?.value;
  if (value === undefined) return undefined;
  if (value.kind === Kind.VARIABLE) return variables[value.name.value];
  if (value.kind === Kind.STRING || value.kind === Kind.INT) return value.value;
  return undefined;
}

/** The error `sink.error` receives for a document the library refuses (an array, as graphql-ws gives). */
function refusal(message: string): GraphQLError[] {
  return [new GraphQLError(`@herald/client: ${message}`, { extensions: { code: 'BAD_SUBSCRIPTION_DOCUMENT' } })];
}
