import v8 from 'node:v8';
import { describe, expect, it } from 'vitest';
import { capYoungGeneration, collectAllGarbage } from '../../src/engine/os/gc.js';

const young = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space')?.space_size ?? 0;
const MiB = 1 << 20;

/** Garbage of which much survives a scavenge or two, as a list of many containers makes: what grows the young generation. */
async function churn() {
  const keep: unknown[][] = [];
  for (let r = 0; r < 300; r++) {
    const a: unknown[] = [];
    for (let i = 0; i < 20_000; i++) a.push({ i, s: `x${i}` });
    keep.push(a.slice(0, 200));
    if (keep.length > 50) keep.shift();
    await new Promise((resolve) => setImmediate(resolve)); // the observer runs between turns, as between requests
  }
  return keep.length;
}

describe('the young generation bound', () => {
  it('keeps the young generation at the bound while garbage that survives grows it, and lets go after', async () => {
    collectAllGarbage(); // shrinks the young generation to its least
    const uncap = capYoungGeneration(8 * MiB);
    try {
      await churn();
      expect(young()).toBeLessThanOrEqual(8 * MiB);
    } finally {
      uncap();
    }
    await churn();
    expect(young()).toBeGreaterThan(8 * MiB); // what V8 does unbounded
  });
});
