import { describe, expect, it } from 'vitest';
import { checkWebhookUrl, createGuardedLookup, redactUrl, refusalForAddress } from './url-policy.js';

const strict = { allowPrivateUrls: false };
const lenient = { allowPrivateUrls: true };

describe('refusalForAddress', () => {
  it.each([
    '169.254.169.254',
    'fe80::1',
    '::ffff:169.254.169.254',
    '0.0.0.0',
    '::',
    '224.0.0.1',
    '255.255.255.255',
    '192.0.2.1',
    '2002:a9fe:a9fe::1',
    '64:ff9b::a9fe:a9fe',
  ])('always refuses %s', (address) => {
    expect(refusalForAddress(address, strict)).toBeDefined();
    expect(refusalForAddress(address, lenient)).toBeDefined();
  });

  it.each(['127.0.0.1', '::1', '10.0.0.1', '172.16.5.4', '192.168.1.1', '100.64.0.1', 'fd00::1'])(
    'refuses %s unless private URLs are allowed',
    (address) => {
      expect(refusalForAddress(address, strict)).toMatch(/WEBHOOK_ALLOW_PRIVATE_URLS/);
      expect(refusalForAddress(address, lenient)).toBeUndefined();
    },
  );

  it.each(['fd00:ec2::254', '100.100.100.200', '::ffff:100.100.100.200', '192.0.0.192', '168.63.129.16'])(
    'always refuses the private metadata address %s, even when private URLs are allowed',
    (address) => {
      expect(refusalForAddress(address, strict)).toMatch(/metadata/);
      expect(refusalForAddress(address, lenient)).toMatch(/metadata/);
    },
  );

  it.each(['93.184.215.14', '8.8.8.8', '2606:4700::1111'])('allows the public address %s', (address) => {
    expect(refusalForAddress(address, strict)).toBeUndefined();
  });
});

describe('checkWebhookUrl', () => {
  it('judges every address a host resolves to', async () => {
    const resolve = async () => [
      { address: '93.184.215.14', family: 4 },
      { address: '10.0.0.7', family: 4 },
    ];
    expect(await checkWebhookUrl('https://mixed.example/hook', strict, resolve)).toEqual({
      refused: expect.stringMatching(/^host mixed\.example resolves to 10\.0\.0\.7 is a private address/),
    });
    expect(await checkWebhookUrl('https://mixed.example/hook', lenient, resolve)).toEqual({
      url: 'https://mixed.example/hook',
    });
  });

  it('normalises numeric host forms before judging them', async () => {
    expect(await checkWebhookUrl('http://2130706433/', strict)).toEqual({
      refused: expect.stringMatching(/127\.0\.0\.1 is a loopback/),
    });
    expect(await checkWebhookUrl('http://0xa9.0xfe.0xa9.0xfe/', lenient)).toEqual({
      refused: expect.stringMatching(/link-local/),
    });
  });
});

describe('the guarded lookup', () => {
  it('refuses a host resolving to a refused address, in the connection itself', async () => {
    const lookup = createGuardedLookup(strict);
    const error = await new Promise<Error | null>((resolve) =>
      lookup('localhost', { all: true }, (err) => resolve(err)),
    );
    expect(error?.message).toMatch(/host localhost resolves to .* loopback/);
  });

  it('answers in the form the caller asked for', async () => {
    const lookup = createGuardedLookup(lenient);
    const all = await new Promise<unknown>((resolve) =>
      lookup('localhost', { all: true }, (_err, addresses) => resolve(addresses)),
    );
    expect(all).toEqual(expect.arrayContaining([expect.objectContaining({ address: expect.any(String) })]));
    const one = await new Promise<unknown>((resolve) => lookup('localhost', {}, (_err, address) => resolve(address)));
    expect(typeof one).toBe('string');
  });
});

describe('redactUrl', () => {
  it('strips userinfo and query so a receiver URL can be logged', () => {
    expect(redactUrl('https://user:pa55@hooks.example.com/in?token=s3cret#x')).toBe('https://hooks.example.com/in?…');
    expect(redactUrl('https://hooks.example.com/in')).toBe('https://hooks.example.com/in');
    expect(redactUrl('not a url')).toBe('(unparsable URL)');
  });
});
