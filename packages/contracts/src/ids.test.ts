import { describe, expect, it } from 'vitest';
import { newDeliveryId, newEventId } from './ids.js';

describe('ids', () => {
  it('are the prefix and 32 hex digits, fresh each time', () => {
    const events = new Set(Array.from({ length: 1_000 }, newEventId));
    expect(events.size).toBe(1_000);
    for (const id of events) expect(id).toMatch(/^evt_[0-9a-f]{32}$/);
    expect(newDeliveryId()).toMatch(/^del_[0-9a-f]{32}$/);
  });
});
