// From a layer's bytes (a tar, compressed or not) to a layer directory: what
// an extraction thread runs for a pull (bytes from the network), a restore
// (bytes from the content store) and a commit (the tar it makes).
import { createHash } from 'node:crypto';
import { PassThrough, Transform, type Readable, type TransformCallback, type TransformOptions } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ZlibOptions } from 'node:zlib';
import { isEngineError, messageOf, systemError } from '../../errors.js';
import { applyLayer, type CopyTarget } from './apply.js';
import { zlib } from '../os/zlib.js';

/**
 * Bytes are best handed between stages in blocks of this size: every stage
 * (digest, file write, gunzip on the thread pool, diff-id hash, tar parser)
 * pays a cost per chunk, which on a small machine costs more than the bytes
 * themselves (bench/pull.mjs).
 */
export const BLOCK = 1 << 20;

/** Passes bytes through and knows their sha256 digest once they have all gone by. */
class Hasher extends Transform {
  private readonly hash = createHash('sha256');
  digest = '';
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.hash.update(chunk);
    cb(null, chunk);
  }
  override _flush(cb: TransformCallback): void {
    this.digest = `sha256:${this.hash.digest('hex')}`;
    cb();
  }
}

/** The media type a blob's first bytes show: gzip, zstd or a plain tar. */
export function sniffMediaType(head: Buffer): string {
  if (head[0] === 0x1f && head[1] === 0x8b) return 'application/vnd.oci.image.layer.v1.tar+gzip';
  if (head.length >= 4 && head.readUInt32LE(0) === 0xfd2fb528) return 'application/vnd.oci.image.layer.v1.tar+zstd';
  return 'application/vnd.oci.image.layer.v1.tar';
}

/** The media type of a stored layer blob, from its first bytes. */
export async function storedLayerMediaType(
  content: { readHead(digest: string, n: number): Promise<Buffer> },
  digest: string,
): Promise<string> {
  return sniffMediaType(await content.readHead(digest, 4));
}

/** A tar fault as dockerd words it. */
function tarError(e: unknown): never {
  if (isEngineError(e)) throw e;
  throw systemError(`Error processing tar file(${messageOf(e)})`, e);
}

/** How a layer's bytes are compressed (see extractor.ts compressionOf). */
export type Compression = 'gzip' | 'none';

export interface ExtractedLayer {
  /** Bytes of regular-file content. */
  size: number;
  /** sha256 of the uncompressed tar, when it was asked for. */
  diffId?: string;
}

/**
 * Extracts a layer's bytes (`compression` as given) into `dir`, hashing the
 * tar on the way when `digest` is set. On a failure, destroys `input` and
 * rejects once nothing writes into `dir` any more. This runs on an extraction
 * thread (extract-worker.ts); the daemon's loop goes through extractor.ts.
 */
export async function extractLayer(
  input: Readable,
  dir: string,
  opts: { compression: Compression; digest: boolean; copy?: CopyTarget },
): Promise<ExtractedLayer> {
  const stages: Array<Readable | Transform> = [input];
  // Output and input buffers of a block: one thread-pool trip per block, not per 16 KiB.
  // (zlib streams hand their options on to Transform, whose writableHighWaterMark the ZlibOptions type lacks.)
  const gunzipOpts: ZlibOptions & TransformOptions = { chunkSize: BLOCK, writableHighWaterMark: BLOCK };
  if (opts.compression === 'gzip') stages.push(zlib().createGunzip(gunzipOpts));
  const hasher = opts.digest ? new Hasher() : undefined;
  if (hasher) stages.push(hasher);
  const tar = new PassThrough();
  const unpack = pipeline([...stages, tar]).catch(tarError);
  try {
    const [, applied] = await Promise.all([unpack, applyLayer(tar, dir, opts.copy ? { copy: opts.copy } : {})]);
    return { size: applied.size, ...(hasher ? { diffId: hasher.digest } : {}) };
  } catch (e) {
    for (const s of [...stages, tar]) s.destroy();
    throw e;
  }
}
