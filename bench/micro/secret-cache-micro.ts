/**
 * What sealed signing secrets cost the signing path: µs of CPU per AES-256-GCM open of one secret
 * (what every delivery would pay without the cache), per cached lookup (what it pays), and per
 * `signWebhook` of a 1 KB body (what signing costs anyway), for an endpoint with one and with two
 * secrets (a rotation's grace period). Same process, no I/O:
 *   node --import tsx bench/micro/secret-cache-micro.ts [iterations=200000]
 */
import { openSecret, sealSecret } from '@herald/db';
import { createSecretCache } from '@herald/webhook-engine';
import { generateWebhookSecret, signWebhook } from '@herald/webhooks';

const iterations = Number(process.argv[2] ?? 200_000);
const keyring = [{ id: 'k1', key: Buffer.alloc(32, 7) }] as const;
const endpointId = 'we_0123456789abcdef0123456789abcdef';
const body = JSON.stringify({ id: 'evt_x', type: 'post.published', data: { title: 'x'.repeat(1_000) } });

function measure(name: string, one: (i: number) => unknown): number {
  for (let i = 0; i < Math.min(iterations, 10_000); i++) one(i); // warm-up: let V8 optimise first
  const c0 = process.cpuUsage();
  let sink = 0;
  for (let i = 0; i < iterations; i++) sink += (one(i) as { length: number }).length;
  const cpu = process.cpuUsage(c0);
  const us = (cpu.user + cpu.system) / iterations;
  console.log(`${name.padEnd(46)} ${us.toFixed(3).padStart(8)} µs CPU each${sink < 0 ? '!' : ''}`);
  return us;
}

for (const count of [1, 2]) {
  const plaintexts = Array.from({ length: count }, () => generateWebhookSecret());
  const sealed = plaintexts.map((secret) => sealSecret(keyring, endpointId, secret));
  const cache = createSecretCache({ keyring });
  console.log(`${count} secret(s) per endpoint, ${iterations} iterations`);
  const open = measure('  open (decrypt) every time', () => sealed.map((s) => openSecret(keyring, endpointId, s)));
  const hit = measure('  cached lookup (createSecretCache().open)', () => cache.open(endpointId, sealed));
  const sign = measure('  signWebhook, 1 KB body', () =>
    Object.keys(signWebhook({ eventId: 'evt_x', rawBody: body, secrets: plaintexts })),
  );
  console.log(
    `  cache saves ${(open - hit).toFixed(2)} µs per delivery; a hit is ${((hit / sign) * 100).toFixed(1)} % of signing\n`,
  );
}
