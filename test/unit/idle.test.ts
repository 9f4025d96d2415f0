import { describe, expect, it } from 'vitest';
import { idleTrim } from '../../src/idle.js';
import { createLogger } from '../../src/log.js';

const quiet = createLogger('silent', { write: () => undefined });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('idle memory trim', () => {
  it('releases once after a quiet spell, and each touch starts the spell over', async () => {
    let released = 0;
    const idle = idleTrim(() => released++, quiet, 400);
    try {
      for (let i = 0; i < 4; i++) {
        await sleep(100);
        idle.touch(); // requests keep coming: never quiet
      }
      expect(released).toBe(0);
      await sleep(800);
      expect(released).toBe(1);
      await sleep(800);
      expect(released).toBe(1); // once per quiet spell, not on a period
      idle.touch();
      await sleep(800);
      expect(released).toBe(2);
    } finally {
      idle.close();
    }
  });

  it('gives the young generation and the C heap back', async () => {
    // Garbage that grows V8's young generation, as a burst of requests does.
    let keep: unknown[] = [];
    for (let i = 0; i < 200_000; i++) keep.push({ i, s: `x${i}` });
    keep = [];
    const before = process.memoryUsage();
    const idle = idleTrim(() => undefined, quiet, 10);
    try {
      await sleep(1200); // the collection, then the C heap's trim after the sweeper
      expect(process.memoryUsage().heapTotal).toBeLessThan(before.heapTotal);
    } finally {
      idle.close();
    }
    expect(keep).toHaveLength(0);
  });

  it('a failing release is logged, not thrown', async () => {
    const idle = idleTrim(
      () => {
        throw new Error('boom');
      },
      quiet,
      10,
    );
    await sleep(50);
    idle.close();
  });
});
