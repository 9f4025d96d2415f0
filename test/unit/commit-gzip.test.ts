// ParallelGzip: valid gzip that gunzip and gzip(1) read back, the same bytes
// whatever the input chunking and parallelism, stored blocks for random data.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import zlib from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { ParallelGzip } from '../../src/engine/layers/compress.js';

async function gzip(chunks: Buffer[], opts: { level?: number; parallelism?: number } = {}): Promise<Buffer> {
  const out: Buffer[] = [];
  for await (const c of Readable.from(chunks).pipe(
    new ParallelGzip({ level: opts.level ?? 1, ...(opts.parallelism ? { parallelism: opts.parallelism } : {}) }),
  ))
    out.push(c as Buffer);
  return Buffer.concat(out);
}

const split = (b: Buffer, size: number) =>
  Array.from({ length: Math.ceil(b.length / size) }, (_, i) => b.subarray(i * size, (i + 1) * size));

/** Text-like bytes with long-range repeats (so a dictionary across blocks matters). */
function compressible(size: number): Buffer {
  const words = ['layer', 'commit', 'overlay', 'berth', 'container', '\n', ' ', 'tar'];
  let s = '';
  for (let i = 0; s.length < size; i++) s += words[(i * 7919) % words.length];
  return Buffer.from(s.slice(0, size));
}

describe('ParallelGzip', () => {
  const mixed = Buffer.concat([compressible(3 << 20), randomBytes(2.5 * (1 << 20)), compressible(700_000)]);

  it('round-trips through gunzip and gzip(1), empty input included', async () => {
    for (const input of [Buffer.alloc(0), Buffer.from('x'), compressible(5000), mixed]) {
      const gz = await gzip([input]);
      expect(gz.subarray(0, 10)).toEqual(Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3]));
      expect(zlib.gunzipSync(gz).equals(input)).toBe(true);
      expect(execFileSync('gzip', ['-dc'], { input: gz, maxBuffer: 64 << 20 }).equals(input)).toBe(true);
    }
  });

  it('gives the same bytes whatever the chunking and parallelism', async () => {
    const whole = await gzip([mixed]);
    expect((await gzip(split(mixed, 4096))).equals(whole)).toBe(true);
    expect((await gzip(split(mixed, 77_777), { parallelism: 1 })).equals(whole)).toBe(true);
    expect((await gzip(split(mixed, 3 << 20), { parallelism: 8 })).equals(whole)).toBe(true);
  });

  it('compresses text close to one zlib stream, and stores random blocks', async () => {
    const text = compressible(4 << 20);
    const ours = (await gzip([text])).length;
    const zlibs = zlib.gzipSync(text, { level: 1 }).length;
    expect(ours).toBeLessThan(zlibs * 1.05);
    const random = randomBytes(4 << 20);
    const stored = await gzip([random]);
    // Stored blocks cost 5 bytes per 64 KiB, plus header, trailer and the (deflated) last block.
    expect(stored.length).toBeLessThan(random.length * 1.001 + 1024);
    expect(zlib.gunzipSync(stored).equals(random)).toBe(true);
  });
});
