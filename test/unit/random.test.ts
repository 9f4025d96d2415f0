import { describe, expect, it } from 'vitest';
import { randomHex, randomUuid } from '../../src/engine/os/random.js';

describe('the random ids a start makes without node:crypto', () => {
  it('are version 4 UUIDs as crypto.randomUUID makes them, each new', () => {
    const ids = Array.from({ length: 50 }, randomUuid);
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('and hex strings of the bytes asked for', () => {
    expect(randomHex(32)).toMatch(/^[0-9a-f]{64}$/);
    expect(randomHex(32)).not.toBe(randomHex(32));
  });
});
