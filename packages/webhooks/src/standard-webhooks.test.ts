import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { Webhook as SvixWebhook } from 'svix';
import nacl from 'tweetnacl';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  STANDARD_WEBHOOK_ID_HEADER,
  STANDARD_WEBHOOK_SIGNATURE_HEADER,
  STANDARD_WEBHOOK_TIMESTAMP_HEADER,
  WEBHOOK_SIGNATURE_HEADER,
} from './headers.js';
import { readRawBody } from './read-raw-body.js';
import { signWebhook } from './sign-webhook.js';
import { generateWebhookSigningKeyPair } from './signing-key-pair.js';
import { verifyWebhook } from './verify-webhook.js';
import { generateWebhookSecret, toStandardWebhookSecret } from './webhook-secret.js';
import { WebhookVerificationError } from './webhook-verification-error.js';

/**
 * Every delivery carries Standard Webhooks headers beside Stripe's, signed with the same
 * secrets, so receivers verify with `standardwebhooks`, `svix`, `stripe` or @herald/webhooks. Each
 * delivery here goes over real HTTP (127.0.0.1) and is verified on the bytes and headers the receiver
 * read off the socket, by all four libraries.
 */
const stripe = new Stripe('sk_test_offline_never_used');
/** How Herald issued secrets before Standard Webhooks: base64url, refused by `standardwebhooks` as is. */
const LEGACY_SECRET = `whsec_${Buffer.alloc(32, 0xfb).toString('base64url')}`;

interface Received {
  rawBody: Buffer;
  headers: IncomingHttpHeaders;
}

let server: Server;
let url: string;
const received: Received[] = [];

beforeAll(async () => {
  server = createServer(async (req, res) => {
    received.push({ rawBody: await readRawBody(req, 1_048_576), headers: req.headers });
    res.writeHead(204).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
});

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

let sequence = 0;
/** Signs an event with `secrets` as the engine does and POSTs it; returns what the receiver read. */
async function deliver(secrets: string[], timestamp?: number): Promise<Received & { event: unknown }> {
  sequence += 1;
  const event = {
    id: `evt_std_${sequence}`,
    type: 'post.published',
    created: new Date().toISOString(),
    data: { id: `post-${sequence}`, title: 'Grüße ✓ "quoted"', tags: ['news'] },
  };
  const rawBody = JSON.stringify(event);
  const headers = signWebhook({ eventId: event.id, rawBody, secrets, ...(timestamp ? { timestamp } : {}) });
  const before = received.length;
  const response = await fetch(url, { method: 'POST', headers, body: rawBody });
  expect(response.status).toBe(204);
  expect(received).toHaveLength(before + 1);
  return { ...(received.at(-1) as Received), event };
}

/** Node's header record narrowed to the string values the libraries expect. */
function plain(headers: IncomingHttpHeaders): Record<string, string> {
  return Object.fromEntries(
    Object.entries(headers).flatMap(([name, value]) => (typeof value === 'string' ? [[name, value]] : [])),
  );
}

/** Every library's verdict for one received delivery and the secret the receiver holds. */
function verifyWithEveryLibrary(delivery: Received, heldSecret: string): unknown[] {
  const body = delivery.rawBody.toString('utf8');
  const headers = plain(delivery.headers);
  const standardSecret = toStandardWebhookSecret(heldSecret);
  return [
    new StandardWebhook(standardSecret).verify(body, headers),
    new SvixWebhook(standardSecret).verify(body, headers),
    stripe.webhooks.constructEvent(delivery.rawBody, headers[WEBHOOK_SIGNATURE_HEADER.toLowerCase()]!, heldSecret),
    verifyWebhook({ rawBody: delivery.rawBody, headers: delivery.headers, secrets: [heldSecret] }),
    verifyWebhook({ rawBody: delivery.rawBody, headers: delivery.headers, secrets: [heldSecret], scheme: 'stripe' }),
    verifyWebhook({ rawBody: delivery.rawBody, headers: delivery.headers, secrets: [standardSecret] }),
  ];
}

describe('a delivery over HTTP is verified by standardwebhooks, svix, stripe and @herald/webhooks', () => {
  it('with a newly generated secret, pasted unchanged into every library', async () => {
    const secret = generateWebhookSecret();
    const delivery = await deliver([secret]);
    expect(delivery.headers[STANDARD_WEBHOOK_ID_HEADER]).toBe((delivery.event as { id: string }).id);
    expect(delivery.headers[STANDARD_WEBHOOK_TIMESTAMP_HEADER]).toBe(delivery.headers['x-webhook-timestamp']);
    expect(delivery.headers[STANDARD_WEBHOOK_SIGNATURE_HEADER]).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    expect(toStandardWebhookSecret(secret)).toBe(secret);
    expect(verifyWithEveryLibrary(delivery, secret)).toEqual(Array(6).fill(delivery.event));
  });

  it('with a secret issued before Standard Webhooks (base64url): Stripe as is, the standard libraries with its whsec_ base64 form', async () => {
    const delivery = await deliver([LEGACY_SECRET]);
    expect(() => new StandardWebhook(LEGACY_SECRET)).toThrow();
    expect(verifyWithEveryLibrary(delivery, LEGACY_SECRET)).toEqual(Array(6).fill(delivery.event));
  });

  it('during a rotation (two active secrets), a receiver holding only the new or only the old secret accepts', async () => {
    const next = generateWebhookSecret();
    const delivery = await deliver([next, LEGACY_SECRET]);
    const entries = String(delivery.headers[STANDARD_WEBHOOK_SIGNATURE_HEADER]).split(' ');
    expect(entries).toHaveLength(2);
    expect(entries.every((entry) => entry.startsWith('v1,'))).toBe(true);
    expect(verifyWithEveryLibrary(delivery, next)).toEqual(Array(6).fill(delivery.event));
    expect(verifyWithEveryLibrary(delivery, LEGACY_SECRET)).toEqual(Array(6).fill(delivery.event));
  });

  it('is refused by every library when the receiver holds another secret (the checks are real)', async () => {
    const delivery = await deliver([generateWebhookSecret()]);
    const other = generateWebhookSecret();
    const body = delivery.rawBody.toString('utf8');
    const headers = plain(delivery.headers);
    expect(() => new StandardWebhook(other).verify(body, headers)).toThrow(/signature/i);
    expect(() => new SvixWebhook(other).verify(body, headers)).toThrow(/signature/i);
    expect(() => stripe.webhooks.constructEvent(body, headers['x-webhook-signature']!, other)).toThrow(
      Stripe.errors.StripeSignatureVerificationError,
    );
    expect(() => verifyWebhook({ rawBody: body, headers, secrets: [other] })).toThrow(WebhookVerificationError);
  });

  it('is refused by every library when signed outside the 300 s window', async () => {
    const secret = generateWebhookSecret();
    const delivery = await deliver([secret], Math.floor(Date.now() / 1000) - 600);
    const body = delivery.rawBody.toString('utf8');
    const headers = plain(delivery.headers);
    expect(() => new StandardWebhook(secret).verify(body, headers)).toThrow(/too old/i);
    expect(() => new SvixWebhook(secret).verify(body, headers)).toThrow(/too old/i);
    expect(() => stripe.webhooks.constructEvent(body, headers['x-webhook-signature']!, secret)).toThrow(/tolerance/i);
    expect(() => verifyWebhook({ rawBody: body, headers, secrets: [secret] })).toThrow(
      expect.objectContaining({ reason: 'timestamp_outside_tolerance' }),
    );
  });
});

describe('verifyWebhook, Standard Webhooks scheme', () => {
  const secret = generateWebhookSecret();
  const event = { id: 'evt_std_unit', type: 'webhook.test', created: '2026-11-23T11:00:00.000Z', data: {} };
  const rawBody = JSON.stringify(event);
  const NOW_SEC = 1_790_000_000;
  const signed = signWebhook({ eventId: event.id, rawBody, secrets: [secret], timestamp: NOW_SEC });
  const reason = (headers: Record<string, string>, extra: { scheme?: 'standard' | 'stripe' } = {}) => {
    try {
      verifyWebhook({ rawBody, headers, secrets: [secret], now: NOW_SEC, ...extra });
    } catch (error) {
      return (error as WebhookVerificationError).reason;
    }
    return 'accepted';
  };

  it('accepts a delivery that carries only the webhook-* headers (as svix-style senders send)', () => {
    const only = Object.fromEntries(Object.entries(signed).filter(([name]) => name.startsWith('webhook-')));
    expect(reason(only)).toBe('accepted');
    expect(reason(only, { scheme: 'stripe' })).toBe('missing_header');
  });

  it('checks the standard signature when present, even if the X-Webhook-Signature would pass', () => {
    const tampered = { ...signed, [STANDARD_WEBHOOK_ID_HEADER]: 'evt_other' };
    expect(reason(tampered)).toBe('no_matching_signature');
    expect(reason(tampered, { scheme: 'stripe' })).toBe('accepted');
  });

  it.each([
    ['no v1 entry', 'v1a,abc'],
    ['an entry without a comma', 'garbage'],
    ['a v1 that is not base64 of 32 bytes', 'v1,AAAA'],
  ])('refuses a webhook-signature with %s as malformed_header', (_case, value) => {
    expect(reason({ ...signed, [STANDARD_WEBHOOK_SIGNATURE_HEADER]: value })).toBe('malformed_header');
  });

  it('refuses a non-numeric webhook-timestamp, a missing webhook-id and an id that differs from the body', () => {
    expect(reason({ ...signed, [STANDARD_WEBHOOK_TIMESTAMP_HEADER]: 'soon' })).toBe('malformed_header');
    const { [STANDARD_WEBHOOK_ID_HEADER]: _id, ...noId } = signed;
    expect(reason(noId)).toBe('missing_header');
    const otherId = signWebhook({ eventId: 'evt_other', rawBody, secrets: [secret], timestamp: NOW_SEC });
    expect(reason(otherId)).toBe('id_mismatch');
  });

  it('skips entries it has no key for (v1a without public keys) and unknown versions, next to a matching v1', () => {
    const value = `v1a,${'A'.repeat(86)}== v2,whatever ${signed[STANDARD_WEBHOOK_SIGNATURE_HEADER]}`;
    expect(reason({ ...signed, [STANDARD_WEBHOOK_SIGNATURE_HEADER]: value })).toBe('accepted');
  });
});

describe('asymmetric v1a (ed25519) signatures, for endpoints that ask for them', () => {
  /** What a v1a entry signs: `<webhook-id>.<webhook-timestamp>.<raw body>`. */
  function signedContent(delivery: Received) {
    return Buffer.concat([
      Buffer.from(`${delivery.headers['webhook-id']}.${delivery.headers['webhook-timestamp']}.`),
      delivery.rawBody,
    ]);
  }

  /** A check through WebCrypto, importing the raw public key (OpenSSL underneath, like the signer). */
  async function webCryptoVerifies(publicKey: string, delivery: Received, entry: string): Promise<boolean> {
    const key = await crypto.subtle.importKey(
      'raw',
      Buffer.from(publicKey.slice('whpk_'.length), 'base64'),
      { name: 'Ed25519' },
      false,
      ['verify'],
    );
    const signature = Buffer.from(entry.slice('v1a,'.length), 'base64');
    return crypto.subtle.verify({ name: 'Ed25519' }, key, signature, signedContent(delivery));
  }

  /** An independent check: TweetNaCl's own Ed25519 and SHA-512 in JavaScript, nothing of OpenSSL. */
  function tweetNaClVerifies(publicKey: string, delivery: Received, entry: string): boolean {
    return nacl.sign.detached.verify(
      signedContent(delivery),
      Buffer.from(entry.slice('v1a,'.length), 'base64'),
      Buffer.from(publicKey.slice('whpk_'.length), 'base64'),
    );
  }

  it('signs with the whsk_ key, so a receiver holding only the whpk_ public key verifies; no X-Webhook-Signature', async () => {
    const pair = generateWebhookSigningKeyPair();
    expect(pair.signingKey).toMatch(/^whsk_[A-Za-z0-9+/]{43}=$/);
    expect(pair.publicKey).toMatch(/^whpk_[A-Za-z0-9+/]{43}=$/);
    const delivery = await deliver([pair.signingKey]);
    const entry = String(delivery.headers[STANDARD_WEBHOOK_SIGNATURE_HEADER]);
    expect(entry).toMatch(/^v1a,[A-Za-z0-9+/]{86}==$/);
    expect(delivery.headers[WEBHOOK_SIGNATURE_HEADER.toLowerCase()]).toBeUndefined();
    expect(await webCryptoVerifies(pair.publicKey, delivery, entry)).toBe(true);
    expect(tweetNaClVerifies(pair.publicKey, delivery, entry)).toBe(true);
    // The same check refuses another key and a changed body.
    expect(tweetNaClVerifies(generateWebhookSigningKeyPair().publicKey, delivery, entry)).toBe(false);
    expect(
      tweetNaClVerifies(
        pair.publicKey,
        { ...delivery, rawBody: Buffer.concat([delivery.rawBody, Buffer.from(' ')]) },
        entry,
      ),
    ).toBe(false);
    expect(
      verifyWebhook({ rawBody: delivery.rawBody, headers: delivery.headers, publicKeys: [pair.publicKey] }),
    ).toEqual(delivery.event);
    // A receiver keeping one list of keys (as createWebhookHandler's `secrets`) may put the public key there.
    expect(verifyWebhook({ rawBody: delivery.rawBody, headers: delivery.headers, secrets: [pair.publicKey] })).toEqual(
      delivery.event,
    );
    expect(() =>
      verifyWebhook({
        rawBody: delivery.rawBody,
        headers: delivery.headers,
        publicKeys: [generateWebhookSigningKeyPair().publicKey],
      }),
    ).toThrow(expect.objectContaining({ reason: 'no_matching_signature' }));
    const tampered = Buffer.from(delivery.rawBody.toString('utf8').replace('Grüße', 'Grüsse'));
    expect(() => verifyWebhook({ rawBody: tampered, headers: delivery.headers, publicKeys: [pair.publicKey] })).toThrow(
      expect.objectContaining({ reason: 'no_matching_signature' }),
    );
  });

  it('during a switch from an HMAC secret to a key pair, both kinds of receiver verify', async () => {
    const secret = generateWebhookSecret();
    const pair = generateWebhookSigningKeyPair();
    const delivery = await deliver([pair.signingKey, secret]);
    const entries = String(delivery.headers[STANDARD_WEBHOOK_SIGNATURE_HEADER]).split(' ');
    expect(entries.map((entry) => entry.split(',')[0])).toEqual(['v1', 'v1a']);
    const headers = plain(delivery.headers);
    expect(new StandardWebhook(secret).verify(delivery.rawBody.toString('utf8'), headers)).toEqual(delivery.event);
    expect(stripe.webhooks.constructEvent(delivery.rawBody, headers['x-webhook-signature']!, secret)).toEqual(
      delivery.event,
    );
    expect(
      verifyWebhook({ rawBody: delivery.rawBody, headers: delivery.headers, publicKeys: [pair.publicKey] }),
    ).toEqual(delivery.event);
  });
});
