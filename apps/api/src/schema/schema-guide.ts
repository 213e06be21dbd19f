import {
  buildSchema,
  type GraphQLArgument,
  type GraphQLField,
  type GraphQLInputField,
  type GraphQLNamedType,
  type GraphQLSchema,
  isEnumType,
  isInputObjectType,
  isInterfaceType,
  isObjectType,
  isScalarType,
  isSpecifiedScalarType,
  isUnionType,
} from 'graphql';

/**
 * docs/graphql.md: the GraphQL API as a reference a reader can follow, rendered from the committed
 * schema.graphql (which a test keeps equal to what the code builds), so the reference cannot drift from
 * the schema. Each operation with its arguments, result and description, then every type the operations
 * reach, alphabetically. `pnpm docs:config` writes it; test/docs-graphql.test.ts checks it.
 */
export function renderSchemaGuide(sdl: string): string {
  const schema = buildSchema(sdl);
  const lines = [
    '# GraphQL API reference',
    '',
    '<!-- Generated from apps/api/schema.graphql by `pnpm docs:config` (apps/api/src/schema/schema-guide.ts). Do not edit. -->',
    '',
    'Every query, mutation and subscription Herald serves, and every type they use, with the descriptions the',
    'schema carries. How to call them: queries and mutations over HTTP (`POST /graphql`; see',
    '[api.md](api.md)), subscriptions over WebSockets ([subscriptions.md](subscriptions.md)). What each error',
    "code means: [errors.md](errors.md). An organisation's quotas: [tenancy.md](tenancy.md). Webhook",
    'endpoints and what they receive: [webhooks.md](webhooks.md), [webhook-events.md](webhook-events.md).',
    '',
  ];
  for (const [title, root] of [
    ['Queries', schema.getQueryType()],
    ['Mutations', schema.getMutationType()],
    ['Subscriptions', schema.getSubscriptionType()],
  ] as const) {
    if (!root) continue;
    lines.push(`## ${title}`, '');
    for (const field of Object.values(root.getFields())) lines.push(...operation(field));
  }
  lines.push('## Types', '');
  for (const type of namedTypes(schema)) lines.push(...typeSection(type));
  return `${lines.join('\n').trimEnd()}\n`;
}

function operation(field: GraphQLField<unknown, unknown>): string[] {
  const args = field.args.length > 0 ? `(${field.args.map(argumentSignature).join(', ')})` : '';
  const lines = [`### \`${field.name}\``, '', '```graphql', `${field.name}${args}: ${field.type}`, '```', ''];
  if (field.description) lines.push(paragraph(field.description), '');
  const described = field.args.filter((arg) => arg.description);
  if (described.length > 0) {
    for (const arg of described) lines.push(`- \`${arg.name}\`: ${oneLine(arg.description!)}`);
    lines.push('');
  }
  if (field.deprecationReason) lines.push(`Deprecated: ${oneLine(field.deprecationReason)}`, '');
  return lines;
}

function argumentSignature(arg: GraphQLArgument): string {
  return `${arg.name}: ${arg.type}`;
}

/** Every type of the schema but the root types, GraphQL's own and its introspection types, by name. */
function namedTypes(schema: GraphQLSchema): GraphQLNamedType[] {
  const roots = new Set([schema.getQueryType(), schema.getMutationType(), schema.getSubscriptionType()]);
  return Object.values(schema.getTypeMap())
    .filter((type) => !type.name.startsWith('__') && !roots.has(type as never))
    .filter((type) => !(isScalarType(type) && isSpecifiedScalarType(type)))
    .sort((a, b) => a.name.localeCompare(b.name));
}

function typeSection(type: GraphQLNamedType): string[] {
  const lines = [`### \`${type.name}\` (${kindOf(type)})`, ''];
  if (type.description) lines.push(paragraph(type.description), '');
  if (isObjectType(type) || isInterfaceType(type) || isInputObjectType(type)) {
    lines.push('| field | type | description |', '|---|---|---|');
    for (const field of Object.values(type.getFields())) lines.push(fieldRow(field));
    lines.push('');
  } else if (isEnumType(type)) {
    lines.push('| value | description |', '|---|---|');
    for (const value of type.getValues()) lines.push(`| \`${value.name}\` | ${cell(value.description ?? '')} |`);
    lines.push('');
  } else if (isUnionType(type)) {
    lines.push(
      `One of: ${type
        .getTypes()
        .map((member) => `\`${member.name}\``)
        .join(', ')}.`,
      '',
    );
  }
  return lines;
}

function fieldRow(field: GraphQLField<unknown, unknown> | GraphQLInputField): string {
  const args = 'args' in field && field.args.length > 0 ? `(${field.args.map(argumentSignature).join(', ')})` : '';
  return `| \`${field.name}${args}\` | \`${field.type}\` | ${cell(field.description ?? '')} |`;
}

function kindOf(type: GraphQLNamedType): string {
  if (isObjectType(type)) return 'object';
  if (isInterfaceType(type)) return 'interface';
  if (isInputObjectType(type)) return 'input';
  if (isEnumType(type)) return 'enum';
  if (isUnionType(type)) return 'union';
  return 'scalar';
}

const oneLine = (text: string) => text.replace(/\s*\n\s*/g, ' ').trim();
const paragraph = (text: string) => text.trim();
/** A description inside a table cell: one line, pipes escaped. */
const cell = (text: string) => oneLine(text).replaceAll('|', '\\|');
