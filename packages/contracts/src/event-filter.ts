import { webhookEventDefinition } from './event-catalog.js';
import { WEBHOOK_TEST_EVENT } from './webhooks.js';

/*
 * An endpoint's `filter`: a JSON object the event body must contain for the endpoint to get the event,
 * in the sense of PostgreSQL's `jsonb @>` (the fan-out statement evaluates it there, lease-protocol.ts):
 * every member of the filter is in the body with an equal value, recursively; an array in the filter
 * matches a body array holding each of its elements (in any order, among others). So
 * `{"data":{"tags":["urgent"]}}` keeps `post.published` events of posts tagged `urgent`, and
 * `{"data":{"author":{"id":"user_42"}}}` those of one author. No negation, no "or", no ranges: one
 * operator everyone can read, that the database checks in the statement that makes the deliveries.
 *
 * A filter is checked when it is set, against the schema of every event type the endpoint selects
 * (`webhook.test` aside: test sends ignore filters): each member must name a field those events have,
 * with a value of its type, so a typo or a filter that could never match is refused, not silently
 * dropping every event.
 */

/** Longest filter accepted, in UTF-8 bytes of its JSON text. */
export const MAX_WEBHOOK_FILTER_BYTES = 2_048;
/** Deepest nesting of objects and arrays in a filter (the top-level object is 1). */
export const MAX_WEBHOOK_FILTER_DEPTH = 6;

/** The filter as stored: a JSON object. */
export type WebhookEventFilter = { [key: string]: unknown };

/** What {@link parseWebhookEventFilter} found: the filter, or one sentence saying what is wrong. */
export type ParsedWebhookEventFilter = { filter: WebhookEventFilter } | { error: string };

/** A JSON Schema as the catalog's are shaped (objects, arrays, scalars, `anyOf`, `const`). */
interface SchemaNode {
  type?: string;
  const?: unknown;
  enum?: unknown[];
  pattern?: string;
  properties?: Record<string, SchemaNode>;
  items?: SchemaNode;
  anyOf?: SchemaNode[];
}

/**
 * Parses and checks a filter for an endpoint selecting `eventTypes`.
 * @param text the filter's JSON text, as a client sent it
 * @returns the filter, or `error`: a sentence for a BAD_USER_INPUT answer
 */
export function parseWebhookEventFilter(text: string, eventTypes: readonly string[]): ParsedWebhookEventFilter {
  if (Buffer.byteLength(text, 'utf8') > MAX_WEBHOOK_FILTER_BYTES) {
    return { error: `filter must be at most ${MAX_WEBHOOK_FILTER_BYTES} bytes of JSON` };
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { error: 'filter must be a JSON object, e.g. {"data":{"tags":["urgent"]}}' };
  }
  if (!isObject(value)) return { error: 'filter must be a JSON object, e.g. {"data":{"tags":["urgent"]}}' };
  if (Object.keys(value).length === 0) return { error: 'filter {} matches every event: set it to null instead' };
  const depth = depthOf(value);
  if (depth > MAX_WEBHOOK_FILTER_DEPTH) {
    return { error: `filter must nest at most ${MAX_WEBHOOK_FILTER_DEPTH} levels deep (it nests ${depth})` };
  }
  const filtered = eventTypes.filter((type) => type !== WEBHOOK_TEST_EVENT);
  if (filtered.length === 0) return { error: 'filter applies to no event type: webhook.test sends ignore filters' };
  for (const type of filtered) {
    const entry = webhookEventDefinition(type);
    if (!entry) return { error: `filter: unknown event type ${type}` };
    const problem = fits(value, entry.schema as SchemaNode, '');
    if (problem) return { error: `filter could never match ${type} events: ${problem}` };
  }
  return { filter: value };
}

function isObject(value: unknown): value is WebhookEventFilter {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function depthOf(value: unknown): number {
  if (Array.isArray(value)) return 1 + Math.max(0, ...value.map(depthOf));
  if (isObject(value)) return 1 + Math.max(0, ...Object.values(value).map(depthOf));
  return 0;
}

/** Why `value` can never be contained in a body matching `schema` (at `path`); undefined when it can. */
function fits(value: unknown, schema: SchemaNode, path: string): string | undefined {
  const where = path || 'the body';
  if (schema.anyOf) {
    const problems = schema.anyOf.map((branch) => fits(value, branch, path));
    return problems.includes(undefined) ? undefined : problems[0];
  }
  if (schema.const !== undefined && !isObject(value) && !Array.isArray(value)) {
    return value === schema.const ? undefined : `${where} is always ${JSON.stringify(schema.const)}`;
  }
  if (schema.enum && !schema.enum.includes(value)) {
    return `${where} is one of ${schema.enum.map((item) => JSON.stringify(item)).join(', ')}`;
  }
  if (isObject(value)) {
    if (schema.type !== 'object' || !schema.properties) return `${where} is ${describe(schema)}, not an object`;
    const keys = Object.keys(value);
    if (keys.length === 0) return `${where}: an empty object matches everything; leave it out`;
    for (const key of keys) {
      const field = schema.properties[key];
      const at = path ? `${path}.${key}` : key;
      if (!field) {
        return `${at} is not a field (fields there: ${Object.keys(schema.properties).join(', ')})`;
      }
      const problem = fits(value[key], field, at);
      if (problem) return problem;
    }
    return undefined;
  }
  if (Array.isArray(value)) {
    if (schema.type !== 'array' || !schema.items) return `${where} is ${describe(schema)}, not a list`;
    if (value.length === 0) return `${where}: an empty list matches everything; leave it out`;
    for (const [index, item] of value.entries()) {
      const problem = fits(item, schema.items, `${path}[${index}]`);
      if (problem) return problem;
    }
    return undefined;
  }
  if (schema.type === 'array') {
    return `${where} is a list: write [${JSON.stringify(value)}] to match events whose list holds it`;
  }
  const kind = value === null ? 'null' : typeof value;
  const expected = schema.type === 'integer' ? 'number' : schema.type;
  if (kind !== expected) return `${where} is ${describe(schema)}, not ${kind === 'null' ? 'null' : `a ${kind}`}`;
  if (schema.type === 'integer' && !Number.isInteger(value)) return `${where} is an integer`;
  if (schema.pattern && typeof value === 'string' && !new RegExp(schema.pattern).test(value)) {
    return `${where} never looks like ${JSON.stringify(value)}`;
  }
  return undefined;
}

function describe(schema: SchemaNode): string {
  if (schema.type === 'array') return 'a list';
  if (schema.type === 'object') return 'an object';
  if (schema.type === 'integer') return 'an integer';
  return schema.type ? `a ${schema.type}` : 'something else';
}
