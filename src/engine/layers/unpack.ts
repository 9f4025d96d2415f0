// From a layer blob (compressed tar) to a layer directory: the pieces that a
// pull (bytes from the network) and a restore (bytes from the content store)
// share.
import { createHash } from 'node:crypto';
import { PassThrough, Transform, type Readable, type TransformCallback, type TransformOptions } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, type ZlibOptions } from 'node:zlib';
import { invalidParameter, isEngineError, messageOf, systemError } from '../../errors.js';
import { applyLayer } from './apply.js';

/**
 * Bytes are best handed between stages in blocks of this size: every stage
 * (digest, file write, gunzip on the thread pool, diff-id hash, tar parser)
 * pays a cost per chunk, which on a small machine costs more than the bytes
 * themselves (bench/pull.mjs).
 */
export const BLOCK = 1 << 20;

/** Passes bytes through and knows their sha256 digest once they have all gone by. */
export class Hasher extends Transform {
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

/** The decompressor for a layer of this media type (gzip or uncompressed). */
export function decompressor(mediaType: string): Transform {
  if (/zstd/.test(mediaType)) throw invalidParameter(`unsupported layer compression: ${mediaType}`);
  // Output and input buffers of a block: one thread-pool trip per block, not per 16 KiB.
  // (zlib streams hand their options on to Transform, whose writableHighWaterMark the ZlibOptions type lacks.)
  const opts: ZlibOptions & TransformOptions = { chunkSize: BLOCK, writableHighWaterMark: BLOCK };
  if (/gzip/.test(mediaType)) return createGunzip(opts);
  return new PassThrough();
}

/** The media type a blob's first bytes show: gzip, zstd or a plain tar. */
export function sniffMediaType(head: Buffer): string {
  if (head[0] === 0x1f && head[1] === 0x8b) return 'application/vnd.oci.image.layer.v1.tar+gzip';
  if (head.length >= 4 && head.readUInt32LE(0) === 0xfd2fb528) return 'application/vnd.oci.image.layer.v1.tar+zstd';
  return 'application/vnd.oci.image.layer.v1.tar';
}

/** A tar fault as dockerd words it. */
export function tarError(e: unknown): never {
  if (isEngineError(e)) throw e;
  throw systemError(`Error processing tar file(${messageOf(e)})`, e);
}

/**
 * Extracts the tar that comes out of `decompress` (which the caller feeds)
 * into `dir`, hashing it on the way. Resolves with the layer's size and diff
 * id; on a failure, destroys what it made.
 */
export async function extractLayer(decompress: Transform, dir: string): Promise<{ size: number; diffId: string }> {
  const diffHash = new Hasher();
  const tar = new PassThrough();
  const unpack = pipeline(decompress, diffHash, tar).catch(tarError);
  try {
    const [, applied] = await Promise.all([unpack, applyLayer(tar, dir)]);
    return { size: applied.size, diffId: diffHash.digest };
  } catch (e) {
    for (const s of [decompress, tar]) s.destroy();
    throw e;
  }
}

/**
 * Extracts a stored layer blob into `dir`, checking that its uncompressed
 * bytes have the diff id the image says. Resolves with the layer's size.
 */
export async function unpackBlob(blob: Readable, mediaType: string, dir: string, diffId: string): Promise<number> {
  const decompress = decompressor(mediaType);
  let layer;
  try {
    [, layer] = await Promise.all([pipeline(blob, decompress), extractLayer(decompress, dir)]);
  } catch (e) {
    blob.destroy();
    throw e;
  }
  if (layer.diffId !== diffId) throw systemError(`layer content has diff id ${layer.diffId}, the image says ${diffId}`);
  return layer.size;
}
