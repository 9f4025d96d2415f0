// The sha256 that runs on the thread pool (src/engine/os/sha256.ts): the
// same digest as node:crypto whatever the chunking, backpressure that bounds
// what waits, and a sink whose digest covers everything written to it.
import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import { hashSink, Sha256 } from '../../src/engine/os/sha256.js';

const expected = (...parts: Buffer[]) => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return `sha256:${h.digest('hex')}`;
};

describe('Sha256 on the thread pool', () => {
  it('matches node:crypto, for nothing, one chunk and many', async () => {
    expect(await new Sha256().digest()).toBe(expected());
    const data = randomBytes(5 << 20);
    const one = new Sha256();
    await one.update(data);
    expect(await one.digest()).toBe(expected(data));
    const many = new Sha256();
    // Updates not awaited one by one: they queue, and are hashed in order.
    const pending: Promise<void>[] = [];
    for (let at = 0; at < data.length; at += 77_777) pending.push(many.update(data.subarray(at, at + 77_777)));
    await Promise.all(pending);
    expect(await many.digest()).toBe(expected(data));
  });

  it('makes writers wait once more than a few MiB are queued', async () => {
    const h = new Sha256();
    const states: boolean[] = [];
    for (let i = 0; i < 12; i++) {
      let settled = false;
      void h.update(randomBytes(1 << 20)).then(() => (settled = true));
      await Promise.resolve();
      states.push(settled);
    }
    expect(states.slice(0, 4).every(Boolean)).toBe(true); // room at first
    expect(states.at(-1)).toBe(false); // then it waits for the pool
    await h.digest();
  });

  it('hashSink digests all that was piped into it', async () => {
    const parts = Array.from({ length: 40 }, (_, i) => randomBytes(1000 + i * 5000));
    const sink = hashSink();
    await pipeline(Readable.from(parts), sink);
    expect(await sink.digest()).toBe(expected(...parts));
  });
});
