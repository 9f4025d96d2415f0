// The extraction threads (src/engine/layers/extractor.ts) with the built
// worker script: trees made off the loop, digests, errors that keep their
// kind, abandonment and a dying thread, and threads that stop when idle.
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { gzipSync } from 'node:zlib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Extractor, sharedBuffer, WORKER_SCRIPT } from '../../src/engine/layers/extractor.js';
import { isEngineError } from '../../src/errors.js';
import { tarOf, type TarEntry as Entry } from '../harness/tar.js';

const sha256 = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
const TAR = 'application/vnd.oci.image.layer.v1.tar';
const GZIP = 'application/vnd.oci.image.layer.v1.tar+gzip';

let base: string;
let extractor: Extractor;
let n = 0;
const freshDir = async () => {
  const dir = path.join(base, `tree-${n++}`);
  await mkdir(dir);
  return dir;
};

beforeAll(async () => {
  if (!existsSync(WORKER_SCRIPT)) throw new Error(`${WORKER_SCRIPT} is missing: build first (npm run build)`);
  base = await mkdtemp(path.join(tmpdir(), 'berth-extractor-'));
});
afterEach(async () => {
  await extractor?.close();
});
afterAll(async () => {
  await rm(base, { recursive: true, force: true });
});

describe('Extractor', () => {
  const big = randomBytes(3 << 20);
  const entries: Entry[] = [
    { name: 'etc', type: 'directory', mode: 0o755 },
    { name: 'etc/motd', body: 'welcome\n', mode: 0o644 },
    { name: 'big.bin', body: big, mode: 0o600 },
    { name: 'lib', type: 'symlink', linkname: 'usr/lib' },
  ];

  it('fills a tree from a plain or a gzip layer, with its size and diff id, chunks shared or not', async () => {
    extractor = new Extractor();
    const tar = await tarOf(entries);
    for (const [mediaType, bytes] of [
      [TAR, tar],
      [GZIP, gzipSync(tar)],
    ] as const) {
      const dir = await freshDir();
      const job = extractor.extract(dir, { mediaType, digest: true });
      // Some chunks in shared memory, some not, of uneven sizes.
      const chunks: Buffer[] = [];
      for (let at = 0, i = 0; at < bytes.length; i++) {
        const piece = bytes.subarray(at, at + (i % 2 ? 70_000 : 1 << 20));
        const shared = i % 3 === 0 ? sharedBuffer(piece.length) : Buffer.alloc(piece.length);
        piece.copy(shared);
        chunks.push(shared);
        at += piece.length;
      }
      await pipeline(Readable.from(chunks), job.input);
      const layer = await job.done;
      expect(layer).toEqual({ size: big.length + 8, diffId: sha256(tar) });
      expect(await readFile(path.join(dir, 'etc/motd'), 'utf8')).toBe('welcome\n');
      expect((await readFile(path.join(dir, 'big.bin'))).equals(big)).toBe(true);
      expect((await stat(path.join(dir, 'big.bin'))).mode & 0o777).toBe(0o600);
      expect((await readdir(dir)).sort()).toEqual(['big.bin', 'etc', 'lib']);
    }
  });

  it('hands owned chunks over without a copy, in order with the small ones it copies', async () => {
    extractor = new Extractor();
    const tar = await tarOf(entries);
    const dir = await freshDir();
    const job = extractor.extract(dir, { mediaType: TAR, digest: true, ownsChunks: true });
    // As an HTTP body comes: chunks of their own memory, small (copied) and large (handed over) mixed.
    const chunks: Buffer[] = [];
    const owned: Buffer[] = [];
    const slices: Buffer[] = [];
    for (let at = 0, i = 0; at < tar.length; i++) {
      const piece = tar.subarray(at, at + [512, 40, 32_768, 100_000, 7][i % 5]!);
      // Every tenth chunk a slice of larger memory: that memory is not the chunk's to give, so it is copied.
      const slice = i % 10 === 3;
      const own = slice
        ? Buffer.alloc(piece.length + 1).subarray(0, piece.length)
        : Buffer.from(new ArrayBuffer(piece.length));
      piece.copy(own);
      chunks.push(own);
      if (own.length >= 16 << 10) (slice ? slices : owned).push(own);
      at += piece.length;
    }
    await pipeline(Readable.from(chunks), job.input);
    expect(await job.done).toEqual({ size: big.length + 8, diffId: sha256(tar) });
    expect((await readFile(path.join(dir, 'big.bin'))).equals(big)).toBe(true);
    expect(owned.length).toBeGreaterThan(10);
    expect(slices.length).toBeGreaterThan(2);
    expect(owned.every((c) => c.buffer.byteLength === 0)).toBe(true); // transferred, not copied
    expect(slices.every((c) => c.buffer.byteLength === c.length + 1)).toBe(true); // copied, still there
  });

  it('runs several extractions at once on at most maxThreads threads', async () => {
    extractor = new Extractor({ maxThreads: 2 });
    const tar = await tarOf(entries);
    const dirs = await Promise.all([0, 1, 2, 3, 4].map(() => freshDir()));
    const jobs = dirs.map((dir) => extractor.extract(dir, { mediaType: TAR, digest: true }));
    expect(extractor.threadCount).toBe(2);
    await Promise.all(jobs.map((j) => pipeline(Readable.from([tar]), j.input)));
    for (const j of jobs) expect((await j.done).diffId).toBe(sha256(tar));
  });

  it('rejects a hostile archive with an invalid-parameter error and stops its feeder', async () => {
    extractor = new Extractor();
    const dir = await freshDir();
    const job = extractor.extract(dir, { mediaType: TAR });
    const feed = new PassThrough(); // a feeder with more to come: it must be stopped
    const feeding = pipeline(feed, job.input);
    feed.write(await tarOf([{ name: 'passwd', type: 'link', linkname: 'etc/shadow' }, ...entries]));
    const error = await job.done.catch((e: unknown) => e);
    expect(isEngineError(error, 'invalid')).toBe(true);
    expect((error as Error).message).toMatch(/"passwd" refers to a path that does not exist/);
    await expect(feeding).rejects.toThrow();
  });

  it('refuses zstd before any thread starts', () => {
    extractor = new Extractor();
    expect(() => extractor.extract(base, { mediaType: 'application/vnd.oci.image.layer.v1.tar+zstd' })).toThrow(
      /unsupported layer compression/,
    );
    expect(extractor.threadCount).toBe(0);
  });

  it('rejects with the error the input was destroyed with, once the thread has stopped writing (no listener needed)', async () => {
    extractor = new Extractor();
    const dir = await freshDir();
    const job = extractor.extract(dir, { mediaType: TAR });
    const tar = await tarOf(entries);
    job.input.write(tar.subarray(0, 1 << 20));
    const cause = new Error('digest mismatch upstream');
    // Nobody listens for 'error' on the input: the job does (an unheard 'error' event once killed berthd).
    job.input.destroy(cause);
    await expect(job.done).rejects.toBe(cause);
    // Nothing of the job writes any more: the directory can go, and stays gone.
    await rm(dir, { recursive: true, force: true });
    await new Promise((r) => setTimeout(r, 100));
    expect(existsSync(dir)).toBe(false);
  });

  it('fails the extractions of a thread that dies, and starts a fresh one for the next', async () => {
    extractor = new Extractor({ maxThreads: 1 });
    const job = extractor.extract(await freshDir(), { mediaType: TAR });
    const feed = new PassThrough();
    const feeding = pipeline(feed, job.input).catch((e: unknown) => e);
    feed.write(Buffer.alloc(512)); // a job under way, waiting for more
    await extractor.close(); // the thread is terminated under it
    await expect(job.done).rejects.toThrow(/layer extraction thread died/);
    expect(await feeding).toBeInstanceOf(Error);
    const again = extractor.extract(await freshDir(), { mediaType: TAR, digest: true });
    const tar = await tarOf(entries);
    await pipeline(Readable.from([tar]), again.input);
    expect((await again.done).diffId).toBe(sha256(tar));
  });

  it('stops a thread once it has been idle for a while', async () => {
    extractor = new Extractor({ idleMs: 50 });
    const job = extractor.extract(await freshDir(), { mediaType: TAR });
    await pipeline(Readable.from([await tarOf(entries)]), job.input);
    await job.done;
    expect(extractor.threadCount).toBe(1);
    for (let i = 0; i < 100 && extractor.threadCount > 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(extractor.threadCount).toBe(0);
  });
});
