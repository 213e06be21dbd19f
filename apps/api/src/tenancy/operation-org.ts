import { type DocumentNode, Kind, type OperationDefinitionNode, type SelectionSetNode, type ValueNode } from 'graphql';

/** The argument naming an organisation, on a root field or inside its `input` object. */
const ORG_ARGUMENT = 'orgId';
const INPUT_ARGUMENT = 'input';
/** Fragment spreads followed at the root before giving up (a document may spread fragments in fragments). */
const MAX_FRAGMENT_DEPTH = 4;

/**
 * The organisation an operation names in its arguments: the first root field's `orgId` argument, or
 * `orgId` of its `input` object (literal or variable), in document order. Undefined when no root field
 * names one (`me`, `publishPost(id)`, …): the operation then counts against its caller.
 */
export function namedOrganization(
  document: DocumentNode,
  operationName: string | null | undefined,
  variables: Readonly<Record<string, unknown>> | null | undefined,
): string | undefined {
  const operation = selectedOperation(document, operationName);
  if (!operation) return undefined;
  return inSelections(document, operation.selectionSet, variables ?? undefined, 0);
}

/** The operation that runs: the named one, or the only one. */
export function selectedOperation(
  document: DocumentNode,
  operationName: string | null | undefined,
): OperationDefinitionNode | undefined {
  let found: OperationDefinitionNode | undefined;
  for (const definition of document.definitions) {
    if (definition.kind !== Kind.OPERATION_DEFINITION) continue;
    if (operationName == null) {
      if (found) return undefined;
      found = definition;
    } else if (definition.name?.value === operationName) return definition;
  }
  return found;
}

function inSelections(
  document: DocumentNode,
  selectionSet: SelectionSetNode,
  variables: Readonly<Record<string, unknown>> | undefined,
  depth: number,
): string | undefined {
  for (const selection of selectionSet.selections) {
    let found: string | undefined;
    if (selection.kind === Kind.FIELD) {
      for (const argument of selection.arguments ?? []) {
        if (argument.name.value === ORG_ARGUMENT) found = asId(argumentValue(argument.value, variables));
        else if (argument.name.value === INPUT_ARGUMENT) found = orgOfInput(argument.value, variables);
        if (found !== undefined) return found;
      }
    } else if (depth < MAX_FRAGMENT_DEPTH) {
      const set =
        selection.kind === Kind.INLINE_FRAGMENT ? selection.selectionSet : fragment(document, selection.name.value);
      if (set) found = inSelections(document, set, variables, depth + 1);
      if (found !== undefined) return found;
    }
  }
  return undefined;
}

function fragment(document: DocumentNode, name: string): SelectionSetNode | undefined {
  for (const definition of document.definitions) {
    if (definition.kind === Kind.FRAGMENT_DEFINITION && definition.name.value === name) return definition.selectionSet;
  }
  return undefined;
}

function orgOfInput(value: ValueNode, variables: Readonly<Record<string, unknown>> | undefined): string | undefined {
  if (value.kind === Kind.OBJECT) {
    const field = value.fields.find((candidate) => candidate.name.value === ORG_ARGUMENT);
    return field ? asId(argumentValue(field.value, variables)) : undefined;
  }
  const input = argumentValue(value, variables);
  return input !== null && typeof input === 'object'
    ? asId((input as Record<string, unknown>)[ORG_ARGUMENT])
    : undefined;
}

function argumentValue(value: ValueNode, variables: Readonly<Record<string, unknown>> | undefined): unknown {
  if (value.kind === Kind.VARIABLE) return variables?.[value.name.value];
  if (value.kind === Kind.STRING || value.kind === Kind.INT) return value.value;
  return undefined;
}

function asId(value: unknown): string | undefined {
  if (typeof value === 'string' && value.length > 0) return value;
  if (typeof value === 'number' && Number.isInteger(value)) return String(value);
  return undefined;
}
