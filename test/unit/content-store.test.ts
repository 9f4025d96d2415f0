// The content store on a real temp directory: verified, atomic, shared ingests.
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isEngineError } from '../../src/errors.js';
import {
  ContentStore,
  ContentVerificationError,
  computeDigest,
  verifyingStream,
} from '../../src/engine/content/store.js';

const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
const bytes = (n: number, seed = 1) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 31 + seed) & 0xff));

/** A source that yields `data` in small chunks, counting how much was pulled from it. */
function counted(data: Buffer, chunk = 1024): Readable & { pulled: number } {
  let offset = 0;
  const r = new Readable({
    read() {
      if (offset >= data.length) return void this.push(null);
      const next = data.subarray(offset, offset + chunk);
      offset += next.length;
      (r as Readable & { pulled: number }).pulled = offset;
      this.push(next);
    },
  }) as Readable & { pulled: number };
  r.pulled = 0;
  return r;
}

/** A source that never ends, counting bytes given out. */
function endless(): Readable & { given: number } {
  const r = new Readable({
    read() {
      (r as Readable & { given: number }).given += 4096;
      this.push(Buffer.alloc(4096, 7));
    },
  }) as Readable & { given: number };
  r.given = 0;
  return r;
}

/** A Writable that collects what it is given. */
function collector(): Writable & { data(): Buffer; ended: boolean } {
  const chunks: Buffer[] = [];
  const w = new Writable({
    write(c: Buffer, _e, cb) {
      chunks.push(c);
      cb();
    },
    final(cb) {
      (w as Writable & { ended: boolean }).ended = true;
      cb();
    },
  }) as Writable & { data(): Buffer; ended: boolean };
  w.data = () => Buffer.concat(chunks);
  w.ended = false;
  return w;
}

const readAll = async (r: Readable) => {
  const chunks: Buffer[] = [];
  for await (const c of r) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
};

const errorOf = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected a rejection');
};

let root: string;
let store: ContentStore;

beforeEach(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), 'berth-content-'));
  store = new ContentStore(path.join(root, 'content'));
  await store.init();
});

afterEach(() => rmSync(root, { recursive: true, force: true }));

const ingestLeftovers = () => readdirSync(store.ingestDir);

describe('ContentStore', () => {
  it('creates private directories', () => {
    expect(statSync(store.root).isDirectory()).toBe(true);
    expect(statSync(store.blobsDir).mode & 0o777).toBe(0o700);
    expect(statSync(store.ingestDir).mode & 0o777).toBe(0o700);
  });

  it('ingests, then has/size/path/read/readBuffer/list/delete', async () => {
    const data = bytes(100_000);
    const d = sha(data);
    expect(await store.has(d)).toBe(false);
    await store.ingest(d, data.length, counted(data));
    expect(await store.has(d)).toBe(true);
    expect(await store.size(d)).toBe(data.length);
    expect(store.path(d)).toBe(path.join(store.root, 'blobs', 'sha256', d.slice(7)));
    expect((await readAll(store.read(d))).equals(data)).toBe(true);
    expect((await store.readBuffer(d)).equals(data)).toBe(true);
    expect(await store.list()).toEqual([d]);
    expect(ingestLeftovers()).toEqual([]);
    expect(await store.delete(d)).toBe(true);
    expect(await store.delete(d)).toBe(false);
    expect(await store.has(d)).toBe(false);
  });

  it('stores and creates a blob of many blocks, and keeps none of a wrong one', async () => {
    // Past the size at which create() syncs the file as it grows, more than once.
    const data = Buffer.concat(Array.from({ length: 20 }, (_, i) => Buffer.alloc(1 << 20, i)));
    const d = sha(data);
    await store.ingest(d, data.length, counted(data, 1 << 20));
    expect((await readAll(store.read(d))).equals(data)).toBe(true);
    const wrong = sha(bytes(10));
    await expect(store.ingest(wrong, data.length, counted(data, 1 << 20))).rejects.toThrow(/verification failed/);
    expect(await store.has(wrong)).toBe(false);
    expect(ingestLeftovers()).toEqual([]);
    const made = await store.create(counted(data, 1 << 20));
    expect(made).toEqual({ digest: d, size: data.length, created: false });
    expect(ingestLeftovers()).toEqual([]);
  });

  it('stores an empty blob', async () => {
    const d = sha(Buffer.alloc(0));
    await store.put(d, Buffer.alloc(0));
    expect(await store.size(d)).toBe(0);
  });

  it('refuses a digest mismatch with the caller’s wording and keeps nothing', async () => {
    const data = bytes(10_000);
    const wrong = sha(bytes(10_000, 2));
    const err = await errorOf(store.ingest(wrong, data.length, counted(data), { what: 'filesystem layer' }));
    expect(err).toBeInstanceOf(ContentVerificationError);
    expect(isEngineError(err)).toBe(true);
    expect(err.message).toBe(`filesystem layer verification failed for digest ${wrong}`);
    expect(await store.has(wrong)).toBe(false);
    expect(ingestLeftovers()).toEqual([]);
  });

  it('stops reading past the declared size', async () => {
    const source = endless();
    const d = sha(Buffer.alloc(10_000, 7));
    const err = await errorOf(store.ingest(d, 10_000, source));
    expect(err.message).toBe(
      `content verification failed for digest ${d}: size mismatch: expected 10000 bytes, got more`,
    );
    expect(source.destroyed).toBe(true);
    expect(source.given).toBeLessThan(200_000); // a few buffers of read-ahead, not the endless stream
    expect(ingestLeftovers()).toEqual([]);
  });

  it('refuses a short stream as a size mismatch even if the digest were right', async () => {
    const data = bytes(5000);
    const d = sha(data);
    const err = await errorOf(store.ingest(d, 6000, counted(data), { what: 'filesystem layer' }));
    expect(err.message).toBe(
      `filesystem layer verification failed for digest ${d}: size mismatch: expected 6000 bytes, got 5000`,
    );
    expect(await store.has(d)).toBe(false);
  });

  it('cleans up when the source fails midway', async () => {
    const source = new PassThrough();
    const p = store.ingest(sha(bytes(10)), 10_000, source);
    source.write(bytes(100));
    setTimeout(() => source.destroy(new Error('connection reset')), 20);
    expect((await errorOf(p)).message).toBe('connection reset');
    expect(ingestLeftovers()).toEqual([]);
  });

  it('aborts on a signal', async () => {
    const ac = new AbortController();
    const source = endless();
    const p = store.ingest(sha(bytes(10)), Number.MAX_SAFE_INTEGER, source, { signal: ac.signal });
    setTimeout(() => ac.abort(), 20);
    expect((await errorOf(p)).name).toBe('AbortError');
    expect(ingestLeftovers()).toEqual([]);
  });

  it('validates digests and sizes so no path leaves the store', async () => {
    for (const bad of ['sha256:../../etc/passwd', 'md5:abc', `sha256:${'A'.repeat(64)}`, '']) {
      expect(() => store.path(bad)).toThrow();
      await expect(store.ingest(bad, 1, Readable.from([Buffer.from('x')]))).rejects.toSatisfy((e) =>
        isEngineError(e, 'invalid'),
      );
    }
    await expect(store.ingest(sha(bytes(1)), -1, Readable.from([bytes(1)]))).rejects.toThrow(/invalid size/);
  });

  it('errors a read of a missing blob with not-found', async () => {
    const err = await errorOf(readAll(store.read(sha(bytes(3)))));
    expect(isEngineError(err, 'not-found')).toBe(true);
    await expect(store.size(sha(bytes(3)))).rejects.toSatisfy((e) => isEngineError(e, 'not-found'));
  });

  it('put verifies bytes held in memory', async () => {
    const data = Buffer.from('{"config":true}');
    await store.put(computeDigest(data), data, { what: 'image config' });
    expect((await store.readBuffer(computeDigest(data))).toString()).toBe('{"config":true}');
    await expect(store.put(sha(Buffer.from('other')), data, { what: 'image config' })).rejects.toThrow(
      /^image config verification failed for digest/,
    );
  });

  it('readBuffer refuses blobs over its limit', async () => {
    const data = bytes(2000);
    await store.put(sha(data), data);
    await expect(store.readBuffer(sha(data), 1000)).rejects.toThrow(/over the 1000-byte limit/);
  });

  it('removes ingest leftovers on init', async () => {
    writeFileSync(path.join(store.ingestDir, 'abc-123'), 'half');
    await new ContentStore(store.root).init();
    expect(ingestLeftovers()).toEqual([]);
  });

  it('lists only well-formed blob names', async () => {
    const data = bytes(10);
    await store.put(sha(data), data);
    writeFileSync(path.join(store.blobsDir, 'sha256', 'not-a-digest'), '');
    expect(await store.list()).toEqual([sha(data)]);
  });
});

describe('concurrent ingests', () => {
  it('share one download', async () => {
    const data = bytes(300_000);
    const d = sha(data);
    let opened = 0;
    const open = async () => {
      opened++;
      return counted(data);
    };
    await Promise.all(Array.from({ length: 5 }, () => store.ingest(d, data.length, open)));
    expect(opened).toBe(1);
    expect((await store.readBuffer(d)).equals(data)).toBe(true);
  });

  it('release the streams they did not need', async () => {
    const data = bytes(50_000);
    const d = sha(data);
    const first = counted(data);
    const second = counted(data);
    await Promise.all([store.ingest(d, data.length, first), store.ingest(d, data.length, second)]);
    expect(second.destroyed).toBe(true);
    expect(second.pulled).toBe(0);
    const third = counted(data);
    await store.ingest(d, data.length, third); // already stored
    expect(third.destroyed).toBe(true);
  });

  it('fall back to their own source when the shared download fails', async () => {
    const data = bytes(50_000);
    const d = sha(data);
    const bad = counted(bytes(50_000, 9));
    const good = counted(data);
    const [a, b] = await Promise.allSettled([store.ingest(d, data.length, bad), store.ingest(d, data.length, good)]);
    expect(a.status).toBe('rejected');
    expect(b.status).toBe('fulfilled');
    expect((await store.readBuffer(d)).equals(data)).toBe(true);
  });
});

describe('tap (download, verify and extract in one pass)', () => {
  it('gets every byte and ends only after the blob is committed', async () => {
    const data = bytes(500_000);
    const d = sha(data);
    const chunks: Buffer[] = [];
    let committedAtEnd: boolean | undefined;
    const tap = new Writable({
      write(c: Buffer, _e, cb) {
        chunks.push(c);
        cb();
      },
      final(cb) {
        committedAtEnd = existsSync(store.path(d));
        cb();
      },
    });
    await store.ingest(d, data.length, counted(data), { tap });
    expect(Buffer.concat(chunks).equals(data)).toBe(true);
    expect(committedAtEnd).toBe(true);
  });

  it('is destroyed with the verification error, never ended', async () => {
    const data = bytes(100_000);
    const wrong = sha(bytes(100_000, 5));
    const tap = collector();
    const tapError = new Promise<Error>((r) => tap.on('error', r));
    const err = await errorOf(store.ingest(wrong, data.length, counted(data), { tap, what: 'filesystem layer' }));
    expect(await tapError).toBe(err);
    expect(tap.ended).toBe(false);
    expect(tap.destroyed).toBe(true);
  });

  it('applies backpressure: a slow tap slows the download', async () => {
    const data = bytes(1_000_000);
    const source = counted(data, 16 * 1024);
    let maxAhead = 0;
    let taken = 0;
    const tap = new Writable({
      highWaterMark: 16 * 1024,
      write(c: Buffer, _e, cb) {
        taken += c.length;
        maxAhead = Math.max(maxAhead, source.pulled - taken);
        setTimeout(cb, 1);
      },
    });
    await store.ingest(sha(data), data.length, source, { tap });
    expect(taken).toBe(data.length);
    expect(maxAhead).toBeLessThan(300_000);
  });

  const failingTap = () =>
    new Writable({
      write(_c, _e, cb) {
        cb(new Error('Error processing tar file(unexpected EOF)'));
      },
    });

  it('failing stores nothing: the ingest rejects with its error once the bytes are verified', async () => {
    const data = bytes(300_000);
    const source = counted(data);
    const err = await errorOf(store.ingest(sha(data), data.length, source, { tap: failingTap() }));
    expect(err.message).toBe('Error processing tar file(unexpected EOF)');
    expect(await store.has(sha(data))).toBe(false);
    expect(ingestLeftovers()).toEqual([]);
  });

  it('failing on bytes that are not what the digest says reports the verification failure', async () => {
    const data = bytes(300_000);
    const err = await errorOf(
      store.ingest(sha(bytes(5)), data.length, counted(data), { tap: failingTap(), what: 'filesystem layer' }),
    );
    expect(err).toBeInstanceOf(ContentVerificationError);
    expect(ingestLeftovers()).toEqual([]);
  });

  it('failing aborts a download of unknown size', async () => {
    const source = endless();
    const err = await errorOf(store.ingest(sha(bytes(1)), undefined, source, { tap: failingTap() }));
    expect(err.message).toBe('Error processing tar file(unexpected EOF)');
    expect(source.destroyed).toBe(true);
    expect(ingestLeftovers()).toEqual([]);
  });

  it('is fed from the store when the blob is already there or was downloaded by another caller', async () => {
    const data = bytes(70_000);
    const d = sha(data);
    const tapA = collector();
    const tapB = collector();
    await Promise.all([
      store.ingest(d, data.length, counted(data), { tap: tapA }),
      store.ingest(d, data.length, counted(data), { tap: tapB }),
    ]);
    const tapC = collector();
    await store.ingest(d, data.length, counted(data), { tap: tapC });
    for (const t of [tapA, tapB, tapC]) {
      expect(t.ended).toBe(true);
      expect(t.data().equals(data)).toBe(true);
    }
  });
});

describe('verifyingStream', () => {
  it('passes verified content through', async () => {
    const data = bytes(10_000);
    const out = collector();
    await pipeline(counted(data), verifyingStream(sha(data), data.length), out);
    expect(out.data().equals(data)).toBe(true);
  });

  it('does not pass the end on when the digest is wrong', async () => {
    const data = bytes(10_000);
    const out = collector();
    const err = await errorOf(
      pipeline(counted(data), verifyingStream(sha(bytes(1)), data.length, { what: 'image config' }), out),
    );
    expect(err.message).toBe(`image config verification failed for digest ${sha(bytes(1))}`);
    expect(out.ended).toBe(false);
  });

  it('errors on overflow as soon as it happens', async () => {
    const v = verifyingStream(sha(bytes(1)), 10);
    const source = endless();
    const err = await errorOf(pipeline(source, v, collector()));
    expect(err.message).toMatch(/size mismatch: expected 10 bytes, got more$/);
    expect(v.bytes).toBe(4096);
  });

  it('skips the size check when the size is unknown', async () => {
    const data = bytes(1234);
    await pipeline(counted(data), verifyingStream(sha(data), undefined), collector());
  });

  it('checks sha512 digests too', async () => {
    const data = bytes(100);
    const d = computeDigest(data, 'sha512');
    await pipeline(counted(data), verifyingStream(d, 100), collector());
    await store.put(d, data);
    expect(await store.list()).toContain(d);
  });
});
