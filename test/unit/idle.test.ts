import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { collectAllGarbage } from '../../src/engine/os/gc.js';
import { releaseFileMappedPages, releaseFreeCHeap } from '../../src/engine/os/memory.js';
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

  it("returns the C heap's free pages on a thread of its own", async () => {
    // 64 KiB blocks (a socket read's size) kept apart by small ones still in use: free pages in the middle of the
    // arena, which only malloc_trim returns.
    let blocks: Buffer[] = [];
    const pins: Buffer[] = [];
    for (let i = 0; i < 512; i++) {
      blocks.push(Buffer.allocUnsafeSlow(64 << 10).fill(1));
      pins.push(Buffer.allocUnsafeSlow(64).fill(2));
    }
    blocks = [];
    collectAllGarbage();
    await sleep(100); // ArrayBuffers' memory is freed by a sweeper after the collection
    const trimmed = releaseFreeCHeap();
    expect(trimmed).toBeInstanceOf(Promise);
    expect(await trimmed).toBe(true);
    expect(blocks).toHaveLength(0);
    expect(pins.every((p) => p[0] === 2)).toBe(true);
  });

  it('unmaps the unchanged pages of the node binary, and leaves the pages it changed alone', () => {
    // Each mapping of the node binary: its permissions, resident and private (changed) KiB.
    const mapsOfNode = () => {
      const out: { perms: string; rss: number; anon: number }[] = [];
      let cur: { perms: string; rss: number; anon: number } | undefined;
      for (const line of readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
        const h = /^[0-9a-f]+-[0-9a-f]+ (\S{4}) \S+ \S+ \d+\s*(.*)$/.exec(line);
        if (h) {
          cur = h[2] === process.execPath ? { perms: h[1] as string, rss: 0, anon: 0 } : undefined;
          if (cur) out.push(cur);
          continue;
        }
        const f = /^(Rss|Anonymous):\s+(\d+) kB/.exec(line);
        if (f && cur) cur[f[1] === 'Rss' ? 'rss' : 'anon'] = Number(f[2]);
      }
      return out;
    };
    const code = (ms: ReturnType<typeof mapsOfNode>) =>
      ms.filter((m) => m.perms === 'r-xp').reduce((a, m) => a + m.rss, 0);
    const before = mapsOfNode();
    expect(code(before)).toBeGreaterThan(1024);
    // What was resident in the mappings it released: the node binary's code among them.
    expect(releaseFileMappedPages()).toBeGreaterThan(code(before) / 2);
    // Private copies in read-only mappings (the relocated RELRO segment) are still there, page for page.
    const changed = (ms: ReturnType<typeof mapsOfNode>) => ms.filter((m) => !m.perms.includes('w')).map((m) => m.anon);
    expect(changed(mapsOfNode())).toEqual(changed(before));
    expect(changed(before).some((kib) => kib > 0)).toBe(true);
    // And the code runs on, mapped again as it is touched.
    expect(createHash('sha256').update('berth').digest('hex')).toHaveLength(64);
    expect(JSON.parse(JSON.stringify({ a: [1, 2] }))).toEqual({ a: [1, 2] });
  });
});
