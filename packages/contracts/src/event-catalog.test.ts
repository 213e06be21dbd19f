import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { checkWebhookEventBody, WEBHOOK_EVENT_CATALOG } from './event-catalog.js';
import { WEBHOOK_EVENT_TYPES } from './webhooks.js';

// The catalog's own consistency: one entry per event type, examples that pass their schema, and
// published schemas that a stock JSON Schema validator (Ajv, what receivers reach for) reads the same
// way as the compiled check Herald runs before recording an event.

const published = WEBHOOK_EVENT_CATALOG.map((entry) => ({
  entry,
  schema: JSON.parse(JSON.stringify(entry.schema)) as Record<string, unknown>,
}));

describe('the event catalog', () => {
  it('has exactly one entry per event type an endpoint may select, in the same order', () => {
    expect(WEBHOOK_EVENT_CATALOG.map((entry) => entry.type)).toEqual([...WEBHOOK_EVENT_TYPES]);
    for (const entry of WEBHOOK_EVENT_CATALOG) expect(entry.description.length).toBeGreaterThan(20);
  });

  it.each(WEBHOOK_EVENT_CATALOG.map((entry) => [entry.type, entry] as const))(
    'the %s example passes the compiled check, as an object and as JSON text',
    (type, entry) => {
      expect(checkWebhookEventBody(type, entry.example)).toBeUndefined();
      expect(checkWebhookEventBody(type, JSON.stringify(entry.example))).toBeUndefined();
    },
  );

  it.each(published.map(({ entry, schema }) => [entry.type, entry, schema] as const))(
    'the published %s schema is plain JSON Schema that Ajv compiles and that accepts the example',
    (_type, entry, schema) => {
      const validate = new Ajv({ strict: true, allErrors: true }).compile(schema);
      expect(validate(entry.example), JSON.stringify(validate.errors)).toBe(true);
      expect(schema).toMatchObject({
        type: 'object',
        additionalProperties: false,
        required: ['id', 'type', 'created', 'data'],
      });
    },
  );

  it('refuses a body that does not match, naming where, as Ajv does', () => {
    const [entry] = published;
    const example = entry!.entry.example as { data: Record<string, unknown> };
    const bad = [
      { ...example, id: 'not-an-event-id' },
      { ...example, created: 'yesterday' },
      { ...example, data: { ...example.data, tags: 'urgent' } },
      { ...example, data: { ...example.data, status: 'DRAFT' } },
      { ...example, data: { ...example.data, extra: 1 } },
      { ...example, type: 'webhook.test' },
    ];
    const ajv = new Ajv({ strict: true }).compile(entry!.schema);
    for (const body of bad) {
      const problems = checkWebhookEventBody(entry!.entry.type, body);
      expect(problems, JSON.stringify(body)).toBeDefined();
      expect(problems!.length).toBeLessThanOrEqual(5);
      expect(ajv(body), JSON.stringify(body)).toBe(false);
    }
    expect(checkWebhookEventBody('post.published', bad[2])?.[0]).toMatch(/^\/data\/tags: /);
  });

  it('refuses an unknown type and text that is not JSON', () => {
    expect(checkWebhookEventBody('post.deleted', {})?.[0]).toMatch(/unknown event type "post.deleted"/);
    expect(checkWebhookEventBody('post.published', '{"id":')).toEqual(['the body is not JSON']);
  });
});
