import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER } from './headers.js';
import { signWebhook } from './sign-webhook.js';
import { DEFAULT_TOLERANCE_SEC, type VerifyWebhookOptions, verifyWebhook } from './verify-webhook.js';
import type { WebhookEvent } from './webhook-event.js';
import { generateWebhookSecret } from './webhook-secret.js';
import { WebhookVerificationError, type WebhookVerificationFailureReason } from './webhook-verification-error.js';

const NOW_SEC = 1_780_000_000;
const OLD_SECRET = generateWebhookSecret();
const NEW_SECRET = generateWebhookSecret();

const event: WebhookEvent = {
  id: 'evt_01JTESTEVENT',
  type: 'post.published',
  created: '2026-05-28T20:26:40.000Z',
  data: { id: 'post-1', orgId: 'org-a', title: 'Hello, ünïcode ✓', tags: ['news'] },
};

/**
 * A delivery in the Stripe scheme only (as a Herald from before Standard Webhooks sends it:
 * `verifyWebhook` falls back to `X-Webhook-*` when no `webhook-signature` is present), plus the
 * verifier's other options. standard-webhooks.test.ts covers the other scheme.
 */
function delivery(
  options: { body?: string; eventId?: string; secrets?: string[]; timestamp?: number } = {},
): VerifyWebhookOptions & { headers: Record<string, string> } {
  const rawBody = options.body ?? JSON.stringify(event);
  const signed = signWebhook({
    eventId: options.eventId ?? event.id,
    rawBody,
    secrets: options.secrets ?? [OLD_SECRET],
    timestamp: options.timestamp ?? NOW_SEC,
  });
  const headers = Object.fromEntries(Object.entries(signed).filter(([name]) => !name.startsWith('webhook-')));
  return { rawBody, headers, secrets: [OLD_SECRET], now: NOW_SEC };
}

function captureError(run: () => unknown): WebhookVerificationError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(WebhookVerificationError);
    return error as WebhookVerificationError;
  }
  throw new Error('verifyWebhook accepted a delivery it should refuse');
}

function refusal(options: VerifyWebhookOptions): WebhookVerificationFailureReason {
  return captureError(() => verifyWebhook(options)).reason;
}

function without(headers: Record<string, string>, name: string): Record<string, string> {
  const { [name]: _removed, ...rest } = headers;
  return rest;
}

describe('signWebhook', () => {
  it('sends the headers of both schemes: hex HMAC of "<t>.<body>", base64 HMAC of "<id>.<t>.<body>"', () => {
    const rawBody = JSON.stringify(event);
    const headers = signWebhook({ eventId: event.id, rawBody, secrets: [OLD_SECRET], timestamp: NOW_SEC });
    const expected = createHmac('sha256', OLD_SECRET).update(`${NOW_SEC}.${rawBody}`).digest('hex');
    const key = Buffer.from(OLD_SECRET.slice('whsec_'.length), 'base64');
    const standard = createHmac('sha256', key).update(`${event.id}.${NOW_SEC}.${rawBody}`).digest('base64');
    expect(headers).toEqual({
      'Content-Type': 'application/json',
      'X-Webhook-ID': event.id,
      'X-Webhook-Timestamp': String(NOW_SEC),
      'X-Webhook-Signature': `t=${NOW_SEC},v1=${expected}`,
      'webhook-id': event.id,
      'webhook-timestamp': String(NOW_SEC),
      'webhook-signature': `v1,${standard}`,
    });
  });

  it('adds one v1 per secret, in order, during a rotation', () => {
    const headers = signWebhook({ eventId: event.id, rawBody: '{}', secrets: [NEW_SECRET, OLD_SECRET] });
    const entries = headers[WEBHOOK_SIGNATURE_HEADER]!.split(',');
    expect(entries).toHaveLength(3);
    expect(entries[0]).toMatch(/^t=\d+$/);
    expect(entries[1]).toBe(
      `v1=${createHmac('sha256', NEW_SECRET)
        .update(`${entries[0]!.slice(2)}.{}`)
        .digest('hex')}`,
    );
    expect(entries[2]).toBe(
      `v1=${createHmac('sha256', OLD_SECRET)
        .update(`${entries[0]!.slice(2)}.{}`)
        .digest('hex')}`,
    );
  });

  it('signs with the current time by default', () => {
    const headers = signWebhook({ eventId: event.id, rawBody: '{}', secrets: [OLD_SECRET] });
    expect(Math.abs(Number(headers[WEBHOOK_TIMESTAMP_HEADER]) - Date.now() / 1000)).toBeLessThan(5);
  });

  it('refuses to sign without a secret, with a bad id or with a bad timestamp', () => {
    expect(() => signWebhook({ eventId: event.id, rawBody: '{}', secrets: [] })).toThrow(TypeError);
    expect(() => signWebhook({ eventId: event.id, rawBody: '{}', secrets: [''] })).toThrow(TypeError);
    expect(() => signWebhook({ eventId: 'evt\r\nX-Evil: 1', rawBody: '{}', secrets: [OLD_SECRET] })).toThrow(TypeError);
    expect(() => signWebhook({ eventId: event.id, rawBody: '{}', secrets: [OLD_SECRET], timestamp: 1.5 })).toThrow(
      TypeError,
    );
  });
});

describe('verifyWebhook accepts', () => {
  it('what signWebhook signed, and returns the parsed event', () => {
    expect(verifyWebhook(delivery())).toEqual(event);
  });

  it('node-style lower-cased headers, a WHATWG Headers and a byte body', () => {
    const signed = delivery();
    const lower = Object.fromEntries(
      Object.entries(signed.headers).map(([name, value]) => [name.toLowerCase(), value]),
    );
    expect(verifyWebhook({ ...signed, headers: lower })).toEqual(event);
    expect(verifyWebhook({ ...signed, headers: new Headers(signed.headers) })).toEqual(event);
    expect(verifyWebhook({ ...signed, rawBody: new TextEncoder().encode(signed.rawBody as string) })).toEqual(event);
  });

  it('a node header given as a one-element array', () => {
    const signed = delivery();
    const headers = { ...signed.headers, [WEBHOOK_ID_HEADER]: [event.id] };
    expect(verifyWebhook({ ...signed, headers })).toEqual(event);
  });

  it('timestamps up to the tolerance either way (300 s by default)', () => {
    expect(DEFAULT_TOLERANCE_SEC).toBe(300);
    expect(verifyWebhook({ ...delivery({ timestamp: NOW_SEC - 300 }) })).toEqual(event);
    expect(verifyWebhook({ ...delivery({ timestamp: NOW_SEC + 300 }) })).toEqual(event);
    expect(verifyWebhook({ ...delivery({ timestamp: NOW_SEC - 3_600 }), toleranceSec: 3_600 })).toEqual(event);
  });

  it('signature entries of other schemes next to v1, and spaces after commas', () => {
    const signed = delivery();
    const signature = signed.headers[WEBHOOK_SIGNATURE_HEADER]!.replace(',', `, v0=${'0'.repeat(64)}, `);
    expect(verifyWebhook({ ...signed, headers: { ...signed.headers, [WEBHOOK_SIGNATURE_HEADER]: signature } })).toEqual(
      event,
    );
  });
});

describe('during a secret rotation (two v1 entries)', () => {
  const rotated = () => delivery({ secrets: [NEW_SECRET, OLD_SECRET] });

  it('a receiver holding only the old secret accepts', () => {
    expect(verifyWebhook({ ...rotated(), secrets: [OLD_SECRET] })).toEqual(event);
  });

  it('a receiver holding only the new secret accepts', () => {
    expect(verifyWebhook({ ...rotated(), secrets: [NEW_SECRET] })).toEqual(event);
  });

  it('a receiver holding both accepts, as does one holding both while the sender has moved on', () => {
    expect(verifyWebhook({ ...rotated(), secrets: [NEW_SECRET, OLD_SECRET] })).toEqual(event);
    expect(verifyWebhook({ ...delivery({ secrets: [NEW_SECRET] }), secrets: [OLD_SECRET, NEW_SECRET] })).toEqual(event);
  });

  it('a receiver holding neither refuses', () => {
    expect(refusal({ ...rotated(), secrets: [generateWebhookSecret()] })).toBe('no_matching_signature');
  });
});

describe('verifyWebhook refuses', () => {
  it('a tampered body', () => {
    const signed = delivery();
    const tampered = (signed.rawBody as string).replace('Hello', 'Hellp');
    expect(refusal({ ...signed, rawBody: tampered })).toBe('no_matching_signature');
  });

  it('a tampered timestamp (t re-written to now)', () => {
    const signed = delivery({ timestamp: NOW_SEC - 10_000 });
    const headers = {
      ...signed.headers,
      [WEBHOOK_TIMESTAMP_HEADER]: String(NOW_SEC),
      [WEBHOOK_SIGNATURE_HEADER]: signed.headers[WEBHOOK_SIGNATURE_HEADER]!.replace(/^t=\d+/, `t=${NOW_SEC}`),
    };
    expect(refusal({ ...signed, headers })).toBe('no_matching_signature');
  });

  it('a signature made with another secret', () => {
    expect(refusal({ ...delivery({ secrets: [generateWebhookSecret()] }) })).toBe('no_matching_signature');
  });

  it('an old timestamp (a replay) and one too far in the future', () => {
    expect(refusal(delivery({ timestamp: NOW_SEC - 301 }))).toBe('timestamp_outside_tolerance');
    expect(refusal(delivery({ timestamp: NOW_SEC - 86_400 }))).toBe('timestamp_outside_tolerance');
    expect(refusal(delivery({ timestamp: NOW_SEC + 301 }))).toBe('timestamp_outside_tolerance');
    expect(refusal({ ...delivery({ timestamp: NOW_SEC - 61 }), toleranceSec: 60 })).toBe('timestamp_outside_tolerance');
  });

  it.each([WEBHOOK_ID_HEADER, WEBHOOK_TIMESTAMP_HEADER, WEBHOOK_SIGNATURE_HEADER])('a missing %s', (name) => {
    const signed = delivery();
    expect(refusal({ ...signed, headers: without(signed.headers, name) })).toBe('missing_header');
    expect(refusal({ ...signed, headers: { ...signed.headers, [name]: '' } })).toBe('missing_header');
  });

  it.each([
    ['no t', (value: string) => value.replace(/^t=\d+,/, '')],
    ['no v1', (value: string) => value.replace(/,v1=.*$/, '')],
    ['a second t', (value: string) => `${value},t=1`],
    ['a non-numeric t', (value: string) => value.replace(/^t=\d+/, 't=soon')],
    ['a negative t', (value: string) => value.replace(/^t=/, 't=-')],
    ['a v1 that is not 64 hex digits', (value: string) => value.replace(/v1=[0-9a-f]{4}/, 'v1=zz')],
    ['a truncated v1', (value: string) => value.slice(0, -2)],
    ['an entry without "="', (value: string) => `${value},garbage`],
    ['plain garbage', () => 'sha256=deadbeef'],
  ])('a signature header with %s', (_case, garble) => {
    const signed = delivery();
    const headers = {
      ...signed.headers,
      [WEBHOOK_SIGNATURE_HEADER]: garble(signed.headers[WEBHOOK_SIGNATURE_HEADER]!),
    };
    expect(refusal({ ...signed, headers })).toBe('malformed_header');
  });

  it('a timestamp header that is not Unix seconds or disagrees with the signed t', () => {
    const signed = delivery();
    for (const value of ['later', '1e9', String(NOW_SEC + 1)]) {
      expect(refusal({ ...signed, headers: { ...signed.headers, [WEBHOOK_TIMESTAMP_HEADER]: value } })).toBe(
        'malformed_header',
      );
    }
  });

  it('a repeated header (node array of two values)', () => {
    const signed = delivery();
    const headers = { ...signed.headers, [WEBHOOK_ID_HEADER]: [event.id, 'evt_other'] };
    expect(refusal({ ...signed, headers })).toBe('malformed_header');
  });

  it('an X-Webhook-ID that differs from the body id', () => {
    expect(refusal(delivery({ eventId: 'evt_somebody_else' }))).toBe('id_mismatch');
  });

  it.each([
    ['not JSON', 'not json'],
    ['a JSON array', '[1,2]'],
    ['null', 'null'],
    ['an object without id', JSON.stringify({ type: 't', created: event.created, data: {} })],
    ['an object without data', JSON.stringify({ id: event.id, type: 't', created: event.created })],
    ['an empty type', JSON.stringify({ ...event, type: '' })],
    ['a created that is no date', JSON.stringify({ ...event, created: 'yesterday' })],
  ])('a correctly signed body that is %s', (_case, body) => {
    expect(refusal(delivery({ body }))).toBe('invalid_body');
  });

  it('a correctly signed byte body that is not UTF-8', () => {
    const rawBody = new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]);
    // signWebhook takes the string it will send; sign these exact bytes by hand.
    const v1 = createHmac('sha256', OLD_SECRET).update(`${NOW_SEC}.`).update(rawBody).digest('hex');
    const headers = {
      [WEBHOOK_ID_HEADER]: event.id,
      [WEBHOOK_TIMESTAMP_HEADER]: String(NOW_SEC),
      [WEBHOOK_SIGNATURE_HEADER]: `t=${NOW_SEC},v1=${v1}`,
    };
    expect(refusal({ rawBody, headers, secrets: [OLD_SECRET], now: NOW_SEC })).toBe('invalid_body');
  });

  it('without putting a secret or the expected signature in the message', () => {
    const signed = delivery({ secrets: [generateWebhookSecret()] });
    const error = captureError(() => verifyWebhook(signed));
    const expected = createHmac('sha256', OLD_SECRET).update(`${NOW_SEC}.${signed.rawBody}`).digest('hex');
    expect(error.message).not.toContain(OLD_SECRET);
    expect(error.message).not.toContain(expected);
  });
});

describe('verifyWebhook caller errors', () => {
  it('throws a TypeError for an empty secret list or a bad tolerance', () => {
    expect(() => verifyWebhook({ ...delivery(), secrets: [] })).toThrow(TypeError);
    expect(() => verifyWebhook({ ...delivery(), toleranceSec: -1 })).toThrow(TypeError);
    expect(() => verifyWebhook({ ...delivery(), toleranceSec: Number.NaN })).toThrow(TypeError);
  });
});
