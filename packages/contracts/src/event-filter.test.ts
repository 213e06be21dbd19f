import { describe, expect, it } from 'vitest';
import { MAX_WEBHOOK_FILTER_BYTES, parseWebhookEventFilter } from './event-filter.js';

// What a filter may say, checked against the schemas of the endpoint's event types when it is set.
// The fan-out statement evaluates accepted ones (event-filters.test.ts in the webhook engine).

const POST = ['post.published'];

describe('parseWebhookEventFilter', () => {
  it.each([
    ['{"data":{"tags":["urgent"]}}', POST],
    ['{"data":{"author":{"id":"user_42"}},"type":"post.published"}', POST],
    ['{"data":{"tags":["a","b"],"orgId":"org-a"}}', POST],
    ['{"data":{"eventType":"post.published"}}', ['webhook.delivery.dead']],
    ['{"data":{"lastError":null}}', ['webhook.delivery.dead']],
    ['{"data":{"endpointId":"we_1"}}', ['webhook.endpoint.disabled', 'webhook.delivery.dead', 'webhook.test']],
  ])('accepts %s for %j', (text, types) => {
    expect(parseWebhookEventFilter(text, types)).toEqual({ filter: JSON.parse(text) });
  });

  it.each([
    ['not json', POST, /must be a JSON object/],
    ['["urgent"]', POST, /must be a JSON object/],
    ['null', POST, /must be a JSON object/],
    ['{}', POST, /matches every event: set it to null/],
    ['{"data":{"tag":["urgent"]}}', POST, /data\.tag is not a field \(fields there: id, orgId, title, tags/],
    ['{"data":{"tags":"urgent"}}', POST, /data\.tags is a list: write \["urgent"\]/],
    ['{"data":{"tags":[1]}}', POST, /data\.tags\[0\] is a string, not a number/],
    ['{"data":{"tags":[]}}', POST, /empty list matches everything/],
    ['{"data":{"status":"DRAFT"}}', POST, /data\.status is always "PUBLISHED"/],
    ['{"created":"yesterday"}', POST, /created never looks like "yesterday"/],
    [
      '{"type":"post.published"}',
      [...POST, 'webhook.delivery.dead'],
      /never match webhook\.delivery\.dead events: type is always/,
    ],
    [
      '{"data":{"tags":["x"]}}',
      [...POST, 'webhook.endpoint.disabled'],
      /never match webhook\.endpoint\.disabled events: data\.tags is not a field/,
    ],
    ['{"data":{"attempts":1.5}}', ['webhook.delivery.dead'], /data\.attempts is an integer/],
    ['{"data":{"endpointId":"we_1"}}', ['webhook.test'], /applies to no event type/],
    ['{"a":{"b":{"c":{"d":{"e":{"f":{"g":1}}}}}}}', POST, /at most 6 levels deep \(it nests 7\)/],
    [`{"data":{"title":"${'x'.repeat(MAX_WEBHOOK_FILTER_BYTES)}"}}`, POST, /at most 2048 bytes/],
  ])('refuses %s for %j, saying why', (text, types, message) => {
    const parsed = parseWebhookEventFilter(text, types);
    expect(parsed).toHaveProperty('error');
    expect((parsed as { error: string }).error).toMatch(message);
  });
});
