import { describe, expect, it } from 'vitest';
import {
  decodeWorkMessage,
  encodeWorkMessage,
  MAX_DELIVERIES_PER_ENTRY,
  toWorkMessages,
  type WorkMessage,
} from './webhook-queue.js';

describe('work messages', () => {
  it('names all of one endpoint and lease in one entry, at most MAX_DELIVERIES_PER_ENTRY each', () => {
    const queued = [
      ...Array.from({ length: MAX_DELIVERIES_PER_ENTRY + 5 }, (_, i) => ({
        deliveryId: `del_a${i}`,
        endpointId: 'we_a',
        lease: 'q:1',
      })),
      { deliveryId: 'del_b0', endpointId: 'we_b', lease: 'q:1' },
      { deliveryId: 'del_b1', endpointId: 'we_b', lease: 'q:2' },
    ];
    const messages = toWorkMessages(queued);
    expect(messages.map((m) => [m.endpointId, m.lease, m.deliveryIds.length])).toEqual([
      ['we_a', 'q:1', MAX_DELIVERIES_PER_ENTRY],
      ['we_a', 'q:1', 5],
      ['we_b', 'q:1', 1],
      ['we_b', 'q:2', 1],
    ]);
    expect(messages.flatMap((m) => m.deliveryIds)).toEqual(queued.map((q) => q.deliveryId));
  });

  it('reads back what it writes, and an entry written before entries named several deliveries', () => {
    const message: WorkMessage = {
      kind: 'delivery',
      deliveryIds: ['del_1', 'del_2'],
      endpointId: 'we_1',
      lease: 'q:x',
    };
    expect(decodeWorkMessage(encodeWorkMessage(message))).toEqual(message);
    expect(decodeWorkMessage({ kind: 'delivery', deliveryId: 'del_old', endpointId: 'we_1', lease: 'q:y' })).toEqual({
      kind: 'delivery',
      deliveryIds: ['del_old'],
      endpointId: 'we_1',
      lease: 'q:y',
    });
    expect(decodeWorkMessage({ kind: 'delivery', deliveryIds: 'del_1,,del_2', endpointId: 'we_1', lease: 'q' })).toBe(
      undefined,
    );
    expect(decodeWorkMessage({ kind: 'delivery', endpointId: 'we_1', lease: 'q' })).toBeUndefined();
  });
});
