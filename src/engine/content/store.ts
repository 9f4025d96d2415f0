// Content-addressed blob store: <root>/blobs/<alg>/<hex> (sha256 in practice).
//
// Nothing unverified is ever visible under blobs/: bytes are streamed into a
// temp file under <root>/ingest/ while being hashed and counted, and renamed
// into place only when both digest and size match (file fsync'd before the
// rename, directory after). A store keyed by digest that admitted bad bytes
// would serve them to every later pull of the same digest.
//
// Single pass: download, verify and extract
// -----------------------------------------
// A layer is read from the network once. `ingest(…, { tap })` copies every
// byte, as it arrives, to the file and to `tap` (e.g. gunzip → tar extraction
// into a staging directory), with backpressure from both:
//
//   registry ──► verifyingStream ──┬──► ingest/<tmp> ──fsync, rename──► blobs/sha256/<hex>
//                                  └──► tap (gunzip → untar into staging)
//
// The tap sees bytes before they are verified, so the consumer must treat its
// output as provisional. The contract that makes this safe:
//   * the tap is ended only after the blob has been verified AND committed;
//   * on any failure (digest, size, network, disk) the tap is destroyed with
//     that error instead, so its consumer must discard what it extracted;
//   * a tap error (say, not a tar) stops the copy to the tap; a download of
//     known size goes on to its end (never past that size), so that bytes
//     that are not what the digest says are reported as such (a gzip error
//     in a corrupted download is a verification failure); the ingest then
//     rejects with the tap's error, and nothing is stored (one of unknown
//     size stops at once);
//   * the tap must be read to its end or destroyed, or the download stalls.
// When the blob is already stored, or another caller is already downloading
// the same digest, the tap is fed from the stored file once it is committed.
import { createHash, randomBytes, type Hash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open, readdir, rename, rm, stat, type FileHandle } from 'node:fs/promises';
import { once } from 'node:events';
import path from 'node:path';
import { Readable, Transform, Writable, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { EngineError, invalidParameter, isNoSpace, noSpace, notFound } from '../../errors.js';
import { Sha256 } from '../os/sha256.js';
import { removeInBackground } from '../os/dirs.js';
import { DIGEST_ALGORITHMS, parseDigest } from '../digest.js';

/** Content whose digest or size is not what its descriptor says. */
export class ContentVerificationError extends EngineError {
  constructor(
    message: string,
    readonly digest: string,
  ) {
    // Bad bytes from a registry or an archive: the input is at fault, not the daemon.
    super('invalid', message);
    this.name = 'ContentVerificationError';
  }
}

export interface VerifyOptions {
  /**
   * What the content is, for dockerd's wording "<what> verification failed for
   * digest <d>": `filesystem layer`, `image config`, `manifest`. Default `content`.
   */
  what?: string;
}

/** `sha256:<hex>` of some bytes. */
export function computeDigest(data: Buffer | string, algorithm: keyof typeof DIGEST_ALGORITHMS = 'sha256'): string {
  return `${algorithm}:${createHash(algorithm).update(data).digest('hex')}`;
}

/**
 * A pass-through that hashes and counts. It fails as soon as more than `size`
 * bytes arrive (so a pipeline stops reading an endless or oversized stream),
 * and at the end when the size is short or the digest differs. Because the
 * check at the end runs before the end is passed on, a consumer downstream
 * that sees 'end' has seen verified content. `size` undefined skips the size
 * check (content of unknown length, e.g. an archive being loaded).
 */
class VerifyingStream extends Transform {
  /** Bytes seen so far. */
  bytes = 0;
  /** sha256 (nearly every digest) on the thread pool; anything else with node:crypto on the loop. */
  private readonly hash: Sha256 | Hash;
  private readonly what: string;

  constructor(
    readonly digest: string,
    readonly size: number | undefined,
    opts: VerifyOptions = {},
  ) {
    super();
    const { algorithm } = parseDigest(digest);
    if (size !== undefined && !(Number.isSafeInteger(size) && size >= 0))
      throw invalidParameter(`invalid size ${size} for ${digest}`);
    this.hash = algorithm === 'sha256' ? new Sha256() : createHash(algorithm);
    this.what = opts.what ?? 'content';
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.size !== undefined && this.bytes > this.size) {
      cb(this.failure(`size mismatch: expected ${this.size} bytes, got more`));
      return;
    }
    if (this.hash instanceof Sha256) {
      this.hash.update(chunk).then(() => cb(null, chunk), cb);
      return;
    }
    this.hash.update(chunk);
    cb(null, chunk);
  }

  override _flush(cb: TransformCallback): void {
    if (this.size !== undefined && this.bytes !== this.size) {
      cb(this.failure(`size mismatch: expected ${this.size} bytes, got ${this.bytes}`));
      return;
    }
    const { hash } = this;
    const actual =
      hash instanceof Sha256
        ? hash.digest()
        : Promise.resolve(`${parseDigest(this.digest).algorithm}:${hash.digest('hex')}`);
    actual.then((d) => cb(d === this.digest ? null : this.failure()), cb);
  }

  private failure(why?: string): ContentVerificationError {
    const base = `${this.what} verification failed for digest ${this.digest}`;
    return new ContentVerificationError(why ? `${base}: ${why}` : base, this.digest);
  }
}

export const verifyingStream = (digest: string, size: number | undefined, opts?: VerifyOptions) =>
  new VerifyingStream(digest, size, opts);

/** Where the bytes come from: a stream, or a function that opens one only if they are needed. */
export type ContentSource = Readable | (() => Promise<Readable>);

export interface IngestOptions extends VerifyOptions {
  /** Receives every byte as it is written; see the file comment for the contract. */
  tap?: Writable;
  signal?: AbortSignal;
}

const isMissing = (e: unknown) => (e as NodeJS.ErrnoException).code === 'ENOENT';

/** create() syncs what it has written every this many bytes, in the background. */
const EARLY_SYNC = 8 << 20;

async function writeFully(fh: FileHandle, buf: Buffer): Promise<void> {
  for (let done = 0; done < buf.length; ) done += (await fh.write(buf, done)).bytesWritten;
}

const noop = () => undefined;

/**
 * Destroys the caller's tap with the ingest's failure. The failure is the
 * ingest's to report (its promise rejects with it): whether or not anyone
 * listens on the tap, the 'error' event must find a listener.
 */
function abandon(tap: Writable, e: Error): void {
  tap.on('error', noop);
  tap.destroy(e);
}

/** `p`, or a rejection with the signal's reason as soon as it aborts. */
function until<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  signal.throwIfAborted();
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** Closes a source we ended up not reading (its download is shared or not needed). */
function release(source: ContentSource): void {
  if (typeof source !== 'function') source.destroy();
}

/** Resolves once a stream has emitted 'close' (for a file: its descriptor is closed). */
function closed(stream: Writable): Promise<void> {
  if (stream.closed) return Promise.resolve();
  return new Promise((resolve) => stream.once('close', () => resolve()));
}

async function fsyncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

interface Tee {
  sink: Writable;
  /** Why the tap failed, if it did: the copy went on to the file alone. */
  tapError(): Error | undefined;
}

/**
 * Copies each chunk to the file and to the tap, calling back when both have
 * taken it (backpressure from the slower). Ending it ends the file only: the
 * tap is ended by ingest after the commit. A file that fails stops the copy;
 * a tap that fails is dropped when the copy is `bounded`, else stops it too
 * (see the file comment).
 */
function tee(file: Writable, tap: Writable | undefined, bounded: boolean): Tee {
  let tapError: Error | undefined;
  const live = () => (tap && !tapError ? [file, tap] : [file]);
  /** A full target has taken its chunk: 'drain', or for the tap also its failure. */
  const drained = (t: Writable) =>
    t === file
      ? once(file, 'drain')
      : new Promise<void>((resolve) => {
          const done = () => {
            t.off('drain', done);
            t.off('close', done);
            t.off('error', done);
            resolve();
          };
          t.on('drain', done).on('close', done).on('error', done);
        });
  const sink: Writable = new Writable({
    write(chunk: Buffer, _enc, cb) {
      const waits = live()
        .filter((t) => !t.write(chunk))
        .map(drained);
      if (waits.length === 0) cb();
      else Promise.all(waits).then(() => cb(), cb);
    },
    final(cb) {
      file.end();
      closed(file).then(() => cb(), cb);
    },
    destroy(err, cb) {
      // pipeline destroys every stream once done; only a failure may stop the file
      // (its descriptor belongs to the caller, which still has to fsync it).
      if (err) file.destroy();
      cb(err);
    },
  });
  // The file failing between writes (a full disk) stops the copy.
  file.on('error', (e) => sink.destroy(e));
  tap?.on('error', (e) => {
    tapError ??= e;
    if (!bounded) sink.destroy(e);
  });
  return { sink, tapError: () => tapError };
}

export class ContentStore {
  private readonly inflight = new Map<string, Promise<void>>();
  /** Deletions under way: an ingest of the same digest waits for them, and they for it. */
  private readonly deleting = new Map<string, Promise<boolean>>();
  readonly blobsDir: string;
  readonly ingestDir: string;

  constructor(readonly root: string) {
    this.blobsDir = path.join(root, 'blobs');
    this.ingestDir = path.join(root, 'ingest');
  }

  /** Creates the directories (0700: layers can hold setuid files) and removes leftovers of a crash. */
  async init(): Promise<void> {
    await mkdir(path.join(this.blobsDir, 'sha256'), { recursive: true, mode: 0o700 });
    await mkdir(this.ingestDir, { recursive: true, mode: 0o700 });
    await this.cleanupIngest();
  }

  /** The blob's file. The digest is validated, so the path never leaves the store. */
  path(digest: string): string {
    const { algorithm, encoded } = parseDigest(digest);
    return path.join(this.blobsDir, algorithm, encoded);
  }

  async has(digest: string): Promise<boolean> {
    try {
      return (await stat(this.path(digest))).isFile();
    } catch (e) {
      if (isMissing(e)) return false;
      throw e;
    }
  }

  async size(digest: string): Promise<number> {
    try {
      return (await stat(this.path(digest))).size;
    } catch (e) {
      if (isMissing(e)) throw notFound(`content ${digest} not found`);
      throw e;
    }
  }

  /** Streams a stored blob, or bytes [start, end) of it; a missing one errors the stream with not-found. */
  read(digest: string, range?: { start: number; end: number }): Readable {
    const file = this.path(digest);
    if (range && range.end <= range.start) return Readable.from([]);
    // createReadStream's `end` is inclusive.
    const opts = range ? { start: range.start, end: range.end - 1 } : {};
    async function* chunks(): AsyncGenerator<Buffer> {
      // 1 MiB reads: blobs are large and read whole (extraction, save); 64 KiB reads cost a turn of the loop each.
      const s = createReadStream(file, { ...opts, highWaterMark: 1 << 20 });
      try {
        for await (const chunk of s) yield chunk as Buffer;
      } catch (e) {
        throw isMissing(e) ? notFound(`content ${digest} not found`) : e;
      } finally {
        s.destroy();
      }
    }
    return Readable.from(chunks(), { objectMode: false });
  }

  /** A stored blob opened for positional reads (docker save reads straight into its own buffers); the caller closes it. */
  async openBlob(digest: string): Promise<FileHandle> {
    return open(this.path(digest), 'r').catch((e: unknown) => {
      throw isMissing(e) ? notFound(`content ${digest} not found`) : e;
    });
  }

  /** The first `n` bytes of a stored blob (fewer if it is shorter). */
  async readHead(digest: string, n: number): Promise<Buffer> {
    const fh = await open(this.path(digest), 'r').catch((e: unknown) => {
      throw isMissing(e) ? notFound(`content ${digest} not found`) : e;
    });
    try {
      const buf = Buffer.alloc(n);
      const { bytesRead } = await fh.read(buf, 0, n, 0);
      return buf.subarray(0, bytesRead);
    } finally {
      await fh.close();
    }
  }

  /** A whole stored blob (manifests, configs), refusing more than `limit` bytes. */
  async readBuffer(digest: string, limit = 8 * 1024 * 1024): Promise<Buffer> {
    const size = await this.size(digest);
    if (size > limit) throw invalidParameter(`content ${digest} is ${size} bytes, over the ${limit}-byte limit`);
    const chunks: Buffer[] = [];
    for await (const chunk of this.read(digest)) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }

  /** Stores bytes already in memory (a manifest, a config), verified like any ingest. */
  put(digest: string, data: Buffer, opts: VerifyOptions = {}): Promise<void> {
    return this.ingest(digest, data.length, () => Promise.resolve(Readable.from([data])), opts);
  }

  /**
   * Streams `source` into the store, verifying digest and size. Concurrent
   * ingests of one digest share the first download; a later caller's own
   * source is used only if that download fails. Already stored → no download.
   */
  async ingest(
    digest: string,
    expectedSize: number | undefined,
    source: ContentSource,
    opts: IngestOptions = {},
  ): Promise<void> {
    let target: string;
    try {
      target = this.path(digest); // validates the digest before anything else
      if (expectedSize !== undefined && !(Number.isSafeInteger(expectedSize) && expectedSize >= 0)) {
        throw invalidParameter(`invalid size ${expectedSize} for ${digest}`);
      }
    } catch (e) {
      release(source);
      throw e;
    }
    const deleting = this.deleting.get(digest);
    if (deleting) await deleting.catch(noop);
    const running = this.inflight.get(digest);
    if (running) {
      let shared: boolean;
      try {
        shared = await until(
          running.then(
            () => true,
            () => false,
          ),
          opts.signal,
        );
      } catch (e) {
        release(source);
        if (opts.tap) abandon(opts.tap, e as Error);
        throw e;
      }
      if (shared) return this.finishFromStore(digest, source, opts.tap);
      return this.ingest(digest, expectedSize, source, opts);
    }
    const job = this.download(digest, target, expectedSize, source, opts).finally(() => this.inflight.delete(digest));
    this.inflight.set(digest, job);
    return job;
  }

  private async download(
    digest: string,
    target: string,
    size: number | undefined,
    source: ContentSource,
    opts: IngestOptions,
  ): Promise<void> {
    if (await this.has(digest)) return this.finishFromStore(digest, source, opts.tap);
    const tmp = path.join(this.ingestDir, `${path.basename(target)}-${randomBytes(6).toString('hex')}`);
    let input: Readable | undefined;
    try {
      input = typeof source === 'function' ? await source() : source;
      const tapError = await this.writeVerified(tmp, input, digest, size, opts);
      if (tapError) throw tapError; // the bytes are right, the tap could not take them
      await mkdir(path.dirname(target), { recursive: true, mode: 0o700 });
      await rename(tmp, target);
      await fsyncDir(path.dirname(target));
    } catch (e) {
      input?.destroy();
      if (opts.tap) abandon(opts.tap, e as Error);
      await rm(tmp, { force: true });
      throw isNoSpace(e) ? noSpace(tmp, e) : e;
    }
    opts.tap?.end();
  }

  /** Copies input to a new temp file through the verifier (and the tap); fsyncs it. Resolves with the tap's failure, if any. */
  private async writeVerified(
    tmp: string,
    input: Readable,
    digest: string,
    size: number | undefined,
    opts: IngestOptions,
  ): Promise<Error | undefined> {
    // flush: fsync before close, so the rename that follows publishes durable bytes.
    const verify = verifyingStream(digest, size, opts);
    const file = createWriteStream(tmp, { flags: 'wx', mode: 0o644, flush: true });
    try {
      const { sink, tapError } = tee(file, opts.tap, size !== undefined);
      await (opts.signal ? pipeline(input, verify, sink, { signal: opts.signal }) : pipeline(input, verify, sink));
      return tapError();
    } finally {
      // Success or not, the descriptor must be closed before the file is renamed or removed
      // (after a success it already is, and destroy does nothing).
      file.destroy();
      await closed(file);
    }
  }

  /**
   * Stores bytes whose digest is not known before they are all written (a
   * layer being made by a commit): they are hashed on the way into a temp
   * file, fsync'd, and renamed to the digest they turn out to have.
   * `created` is false when that blob was stored already. The file is synced
   * in the background as it grows, so that the final fsync finds little left
   * to write and the caller is not kept waiting on the disk.
   */
  async create(source: Readable): Promise<{ digest: string; size: number; created: boolean }> {
    const tmp = path.join(this.ingestDir, `new-${randomBytes(6).toString('hex')}`);
    const fh = await open(tmp, 'wx', 0o644);
    const hash = new Sha256();
    let size = 0;
    let synced = 0;
    let syncing: Promise<void> | undefined;
    let syncError: unknown;
    const sink = new Writable({
      highWaterMark: 1 << 20,
      write(chunk: Buffer, _enc, cb) {
        size += chunk.length;
        Promise.all([hash.update(chunk), writeFully(fh, chunk)]).then(() => {
          if (!syncing && size - synced >= EARLY_SYNC) {
            synced = size;
            syncing = fh.datasync().then(
              () => {
                syncing = undefined;
              },
              (e: unknown) => {
                syncError ??= e;
              },
            );
          }
          cb(syncError as Error | undefined);
        }, cb);
      },
    });
    try {
      try {
        await pipeline(source, sink);
        await syncing;
        if (syncError) throw syncError;
        await fh.sync();
      } finally {
        await syncing;
        await fh.close();
      }
      const digest = await hash.digest();
      const created = !(await this.has(digest));
      if (created) {
        await rename(tmp, this.path(digest));
        await fsyncDir(path.dirname(this.path(digest)));
      } else {
        await rm(tmp, { force: true });
      }
      return { digest, size, created };
    } catch (e) {
      await rm(tmp, { force: true });
      throw isNoSpace(e) ? noSpace(tmp, e) : e;
    }
  }

  /** The blob is stored: drop the unneeded source and give the tap the stored bytes. */
  private async finishFromStore(digest: string, source: ContentSource, tap: Writable | undefined): Promise<void> {
    release(source);
    if (tap) await pipeline(this.read(digest), tap);
  }

  /** Removes a blob, once an ingest of it under way has ended; false if it was not there. */
  delete(digest: string): Promise<boolean> {
    const file = this.path(digest);
    const previous = this.deleting.get(digest) ?? Promise.resolve(false);
    // The unlink goes on in the background, from ingest/ (emptied at every start).
    const job = previous
      .catch(noop)
      .then(() => this.inflight.get(digest)?.catch(noop))
      .then(() => removeInBackground(file, this.ingestDir, noop));
    this.deleting.set(digest, job);
    void job.then(noop, noop).then(() => this.deleting.get(digest) === job && this.deleting.delete(digest));
    return job;
  }

  /** Deletes every stored blob not in `keep`; returns their digests. Only while nothing is being stored. */
  async sweep(keep: ReadonlySet<string>): Promise<string[]> {
    const gone = (await this.list()).filter((d) => !keep.has(d));
    for (const d of gone) await this.delete(d);
    return gone;
  }

  /** Every stored digest. */
  async list(): Promise<string[]> {
    const out: string[] = [];
    for (const [algorithm, length] of Object.entries(DIGEST_ALGORITHMS)) {
      let names: string[] = [];
      try {
        names = await readdir(path.join(this.blobsDir, algorithm));
      } catch (e) {
        if (!isMissing(e)) throw e;
      }
      const valid = new RegExp(`^[a-f0-9]{${length}}$`);
      for (const name of names) if (valid.test(name)) out.push(`${algorithm}:${name}`);
    }
    return out.sort();
  }

  /** Removes half-written ingests (call at start, before any ingest runs). */
  async cleanupIngest(): Promise<void> {
    let names: string[] = [];
    try {
      names = await readdir(this.ingestDir);
    } catch (e) {
      if (isMissing(e)) return;
      throw e;
    }
    await Promise.all(names.map((n) => rm(path.join(this.ingestDir, n), { recursive: true, force: true })));
  }
}
