// gzip for layers that berth makes itself (commit): reproducible, and
// compressed on several threads at once.
//
// The input is cut into fixed-size blocks, whatever the chunks it arrives in.
// Each block is deflated on its own on the libuv thread pool, primed with the
// 32 KiB before it as a dictionary (so the ratio stays that of one stream),
// and ended with a sync flush, which leaves it byte-aligned: the pieces
// concatenate into one valid deflate stream, the last block closing it (as
// pigz does). A block whose bytes look random (already compressed data) is
// stored rather than deflated, which is as small and many times faster.
// The gzip header carries no name and no time. The same bytes in therefore
// always give the same bytes out.
import { Transform, type TransformCallback } from 'node:stream';
import { availableParallelism } from 'node:os';
import { promisify } from 'node:util';
import type { ZlibOptions } from 'node:zlib';
import { zlib } from '../os/zlib.js';

const deflateRaw = (buf: Buffer, opts: ZlibOptions): Promise<Buffer> => promisify(zlib().deflateRaw)(buf, opts);

const BLOCK = 1 << 20;
const WINDOW = 32 << 10;
/** ID1 ID2 CM=deflate FLG=0 MTIME=0 XFL=0 OS=3 (unix). */
const HEADER = Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3]);
/** Bits per byte above which a block is taken for incompressible (random bytes sample at ~7.95). */
const STORE_ENTROPY = 7.8;
const SAMPLE_SLICES = 16;
const SLICE = 256;

export interface GzipOptions {
  /** zlib level for compressible blocks (fixed: part of what makes the output reproducible). */
  level: number;
  /** Blocks deflated at once; default the number of CPUs. */
  parallelism?: number;
}

export class ParallelGzip extends Transform {
  private readonly level: number;
  private readonly parallelism: number;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private dictionary: Buffer = Buffer.alloc(0);
  /** Deflated blocks not yet pushed, in order. */
  private readonly inflight: Promise<Buffer | Buffer[]>[] = [];
  private crc = 0;
  private size = 0;

  constructor(opts: GzipOptions) {
    super({ highWaterMark: 1 << 20 });
    this.level = opts.level;
    this.parallelism = Math.max(1, opts.parallelism ?? availableParallelism());
    this.push(HEADER);
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.crc = zlib().crc32(chunk, this.crc);
    this.size = (this.size + chunk.length) >>> 0;
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    this.drainBlocks().then(() => cb(), cb);
  }

  override _flush(cb: TransformCallback): void {
    const run = async () => {
      await this.drainBlocks();
      this.start(this.nextBlock(this.pendingBytes), true);
      while (this.inflight.length > 0) this.pushBlock(await this.inflight.shift()!);
      const trailer = Buffer.alloc(8);
      trailer.writeUInt32LE(this.crc >>> 0, 0);
      trailer.writeUInt32LE(this.size, 4);
      this.push(trailer);
    };
    run().then(() => cb(), cb);
  }

  /** Starts every whole block, waiting for the oldest when as many as allowed are running. */
  private async drainBlocks(): Promise<void> {
    while (this.pendingBytes >= BLOCK) {
      if (this.inflight.length >= this.parallelism) this.pushBlock(await this.inflight.shift()!);
      this.start(this.nextBlock(BLOCK), false);
    }
  }

  /** The next `n` bytes of input, as the slices of the chunks that hold them (no copy). */
  private nextBlock(n: number): Slices {
    const out: Buffer[] = [];
    let want = n;
    while (want > 0) {
      const head = this.pending[0]!;
      if (head.length <= want) {
        out.push(head);
        this.pending.shift();
        want -= head.length;
      } else {
        out.push(head.subarray(0, want));
        this.pending[0] = head.subarray(want);
        want = 0;
      }
    }
    this.pendingBytes -= n;
    return new Slices(out, n);
  }

  private pushBlock(out: Buffer | Buffer[]): void {
    for (const b of Array.isArray(out) ? out : [out]) this.push(b);
  }

  private start(block: Slices, last: boolean): void {
    const opts: ZlibOptions = {
      level: this.level,
      finishFlush: last ? zlib().constants.Z_FINISH : zlib().constants.Z_SYNC_FLUSH,
      ...(this.dictionary.length ? { dictionary: this.dictionary } : {}),
    };
    // The next block's dictionary: the last 32 KiB of input.
    const keep = Math.min(WINDOW, block.length);
    const tail = block.range(block.length - keep, block.length);
    this.dictionary = keep === WINDOW ? tail : Buffer.concat([this.dictionary, tail]).subarray(-WINDOW);
    const job =
      !last && looksRandom(block)
        ? Promise.resolve(storedBlocks(block))
        : deflateRaw(block.range(0, block.length), opts);
    job.catch(() => undefined); // awaited in order later; no unhandled rejection meanwhile
    this.inflight.push(job);
  }
}

/** A block of input as consecutive slices of the chunks it came in. */
class Slices {
  constructor(
    readonly parts: Buffer[],
    readonly length: number,
  ) {}

  /** Bytes [from, to) as one buffer: a view when one slice holds them, else a copy. */
  range(from: number, to: number): Buffer {
    let at = 0;
    const pieces: Buffer[] = [];
    for (const p of this.parts) {
      const end = at + p.length;
      if (end > from && at < to) pieces.push(p.subarray(Math.max(0, from - at), Math.min(p.length, to - at)));
      at = end;
      if (at >= to) break;
    }
    return pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces, to - from);
  }
}

const STORED_MAX = 0xffff;

/**
 * `block` as non-final deflate stored blocks, written here rather than by
 * zlib: no thread, and no copy of the data but for the pieces that straddle
 * two input chunks (the pieces are cut at fixed offsets, whatever the chunks,
 * so that the output never depends on how the input came). Every block before
 * it ended byte-aligned (a sync flush), so each header is the byte BFINAL=0
 * BTYPE=00 and then LEN and its complement.
 */
function storedBlocks(block: Slices): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < block.length; at += STORED_MAX) {
    const piece = block.range(at, Math.min(block.length, at + STORED_MAX));
    const head = Buffer.alloc(5);
    head.writeUInt16LE(piece.length, 1);
    head.writeUInt16LE(~piece.length & 0xffff, 3);
    out.push(head, piece);
  }
  return out;
}

/** Shannon entropy of a sample of the block's bytes, spread evenly over it. */
function looksRandom(block: Slices): boolean {
  if (block.length < SAMPLE_SLICES * SLICE) return false;
  const counts = new Uint32Array(256);
  const step = Math.floor((block.length - SLICE) / (SAMPLE_SLICES - 1));
  for (let s = 0; s < SAMPLE_SLICES; s++) {
    const sample = block.range(s * step, s * step + SLICE);
    for (let i = 0; i < SLICE; i++) counts[sample[i]!]!++;
  }
  const n = SAMPLE_SLICES * SLICE;
  let bits = 0;
  for (const c of counts) if (c) bits -= (c / n) * Math.log2(c / n);
  return bits > STORE_ENTROPY;
}
