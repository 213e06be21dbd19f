/**
 * Sends one signed test event to a receiver twice, as Herald's dispatcher would on a retry, and
 * prints both answers: the first should be `duplicate: false`, the second `duplicate: true`.
 *
 *   WEBHOOK_SECRET=whsec_… pnpm --filter @herald/webhooks example:send http://127.0.0.1:3000/webhooks
 */
import { randomUUID } from 'node:crypto';
import { signWebhook, type WebhookEvent } from '@herald/webhooks';

const url = process.argv[2] ?? 'http://127.0.0.1:3000/webhooks';
const secret = process.env.WEBHOOK_SECRET;
if (!secret) {
  console.error('Set WEBHOOK_SECRET to one of the receiver’s secrets.');
  process.exit(1);
}

const event: WebhookEvent = {
  id: `evt_${randomUUID().replaceAll('-', '')}`,
  type: 'post.published',
  created: new Date().toISOString(),
  data: { id: 'post-example', orgId: 'demo', title: 'Hello from send-test-event', tags: ['example'] },
};
const rawBody = JSON.stringify(event);

for (const attempt of [1, 2]) {
  // Every attempt is signed afresh, so its timestamp is current.
  const headers = signWebhook({ eventId: event.id, rawBody, secrets: [secret] });
  const response = await fetch(url, { method: 'POST', headers, body: rawBody, redirect: 'manual' });
  console.log(`attempt ${attempt}: ${response.status} ${await response.text()}`);
}
