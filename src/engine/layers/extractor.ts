// Layer extraction on threads of their own.
//
// Filling a layer's tree is thousands of small system calls (a file is open,
// write, chown, chmod, utimes, close) and tar parsing. On the event loop that
// work held every other request back, and through the thread pool each call
// cost several times its own CPU in hand-offs. So each extraction runs in a
// worker thread (extract-worker.ts), which makes the calls synchronously, and
// the loop only hands it bytes:
//
//   bytes ──► input (Writable) ══ MessagePort ══► worker: [gunzip] → [sha256] → apply ──► tree
//                      ◄── acks (bytes consumed), then { size, diffId } or the error
//
// Chunks in shared memory (sharedConcat, sharedBuffer: what pull and commit
// make) cross without a copy; any other chunk is copied into a transferable
// buffer (the caller may still hold its own: a hash, gzip, the content store).
// Nobody writes to a chunk once it is written to `input`. (Copying every
// chunk, even into recycled memory, measured slower than the fresh pages of
// shared buffers: docs/decisions/storage.md.) At most WINDOW bytes
// are in flight; beyond that, writes to `input` wait for the worker (ordinary
// backpressure).
//
// Threads start when work comes, several extractions share a thread, up to
// maxThreads run at once, and a thread left idle for idleMs is stopped: an
// idle daemon holds none. A thread that dies fails its extractions, and the
// next one starts afresh.
import { availableParallelism } from 'node:os';
import path from 'node:path';
import { Writable, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { MessageChannel, Worker, type MessagePort } from 'node:worker_threads';
import { EngineError, invalidParameter, messageOf, systemError, type Kind } from '../../errors.js';
import type { Logger } from '../../log.js';
import { packageRoot } from '../../paths.js';
import { scavengeEvery } from '../os/gc.js';
import type { CopyTarget } from './apply.js';
import type { Compression, ExtractedLayer } from './unpack.js';

/** The thread's script: a bundle of extract-worker.ts made by the build (scripts/bundle.mjs). */
export const WORKER_SCRIPT = path.join(packageRoot, 'dist/extract-worker.cjs');
/** Bytes sent to a thread and not yet consumed by it, at most. */
const WINDOW = 4 << 20;
/** Private chunks are gathered into messages of this size (see Job.stage). */
const STAGE = 512 << 10;
/** An owned chunk at least this large is transferred rather than copied (see ExtractOptions.ownsChunks). */
const TRANSFER_MIN = 16 << 10;
const IDLE_MS = 15_000;
/**
 * The loop scavenges after every this many bytes sent to threads: what a pull
 * read from its socket and the blocks it passed on are then freed as it goes,
 * instead of piling up to a mark-compact (src/engine/os/gc.ts).
 */
export const SCAVENGE_EVERY = 16 << 20;
const scavenge = scavengeEvery(SCAVENGE_EVERY);
/** A thread's young generation, at most (V8 would grow it to 64 MiB, resident until the thread stops). */
const THREAD_YOUNG_MB = 4;

export interface ExtractOptions {
  /** The layer's media type (gzip or plain tar). */
  mediaType: string;
  /** Compute the diff id (sha256 of the uncompressed tar) on the way. */
  digest?: boolean;
  /** Not a layer: a `docker cp` into a container's directory (apply.ts CopyTarget; `dir` is then unused). */
  copy?: CopyTarget;
  /**
   * Nobody but the extraction holds the chunks written to `input` (an HTTP
   * body: Node's parser gives each chunk a memory of its own), so a large
   * chunk that is the whole of its memory is handed to the thread as it is
   * (transferred: detached here) rather than copied.
   */
  ownsChunks?: boolean;
}

export interface Extraction {
  /**
   * The layer's bytes, as stored (compressed or not). End it when all are
   * written; destroy it to abandon the extraction (the tree is then half made,
   * for the caller to remove, once `done` has settled).
   */
  input: Writable;
  /**
   * The extracted layer. Rejects with the extraction's error (an EngineError),
   * or with the error `input` was destroyed with; either way only once the
   * thread has stopped writing into the tree.
   */
  done: Promise<ExtractedLayer>;
}

/** What a job's port carries from the loop to the thread. */
export type ToThread = { data: Uint8Array[] } | { end: true } | { abort: true };
/** ...and back. */
export type FromThread = { ack: number } | { done: ExtractedLayer } | { error: { kind: Kind; message: string } };
/** The message that starts a job, sent to the thread with the job's port. */
export interface JobStart {
  port: MessagePort;
  dir: string;
  compression: Compression;
  digest: boolean;
  copy?: CopyTarget;
}

export interface ExtractorOptions {
  maxThreads?: number;
  idleMs?: number;
  logger?: Logger;
}

export class Extractor {
  private readonly threads = new Set<Thread>();
  private readonly maxThreads: number;
  private readonly idleMs: number;

  constructor(private readonly opts: ExtractorOptions = {}) {
    this.maxThreads = Math.max(1, opts.maxThreads ?? Math.min(availableParallelism(), 4));
    this.idleMs = opts.idleMs ?? IDLE_MS;
  }

  /** Threads running now. */
  get threadCount(): number {
    return this.threads.size;
  }

  /** Starts extracting a layer into `dir` (an empty directory). */
  extract(dir: string, opts: ExtractOptions): Extraction {
    const compression = compressionOf(opts.mediaType); // refused before any thread starts
    const { port1, port2 } = new MessageChannel();
    const thread = this.pick();
    const job = new Job(port1, () => thread.finished(job), opts.ownsChunks === true);
    thread.add(job);
    const start: JobStart = {
      port: port2,
      dir,
      compression,
      digest: opts.digest === true,
      ...(opts.copy ? { copy: opts.copy } : {}),
    };
    thread.worker.postMessage(start, [port2]);
    return { input: job.input, done: job.done };
  }

  /**
   * Extracts a stored layer blob into `dir`, checking that its uncompressed
   * bytes have the diff id the image says. Resolves with the layer's size.
   */
  async unpackBlob(blob: Readable, mediaType: string, dir: string, diffId: string): Promise<number> {
    const layer = await this.unpack(blob, mediaType, dir);
    if (layer.diffId !== diffId)
      throw systemError(`layer content has diff id ${layer.diffId}, the image says ${diffId}`);
    return layer.size;
  }

  /**
   * Extracts a layer blob into `dir`, computing its diff id. On a failure the
   * blob is destroyed and it rejects only once the thread has stopped writing
   * into `dir`, for the caller to remove.
   */
  async unpack(blob: Readable, mediaType: string, dir: string): Promise<{ diffId: string; size: number }> {
    const job = this.extract(dir, { mediaType, digest: true });
    try {
      const [, layer] = await Promise.all([pipeline(blob, job.input), job.done]);
      return { diffId: layer.diffId!, size: layer.size };
    } catch (e) {
      blob.destroy();
      job.input.destroy();
      await job.done.catch(() => undefined); // the thread has stopped writing before the caller cleans up
      throw e;
    }
  }

  /** Stops every thread; their extractions fail. */
  async close(): Promise<void> {
    await Promise.all([...this.threads].map((t) => t.stop()));
  }

  /** The least busy thread, or a new one while every thread has work and there is room. */
  private pick(): Thread {
    let best: Thread | undefined;
    for (const t of this.threads) if (!best || t.jobs.size < best.jobs.size) best = t;
    if (best && (best.jobs.size === 0 || this.threads.size >= this.maxThreads)) return best;
    const thread = new Thread(this.idleMs, this.opts.logger, () => this.threads.delete(thread));
    this.threads.add(thread);
    return thread;
  }
}

/** A buffer in memory an extraction thread can read without a copy. */
export function sharedBuffer(size: number): Buffer {
  return Buffer.from(new SharedArrayBuffer(size));
}

/** Buffer.concat into shared memory (see sharedBuffer). */
export function sharedConcat(chunks: readonly Buffer[], total: number): Buffer {
  const out = sharedBuffer(total);
  let at = 0;
  for (const c of chunks) at += c.copy(out, at);
  return out;
}

/** The compression a layer media type uses; zstd is refused (Docker 20.10 has none either). */
function compressionOf(mediaType: string): Compression {
  if (/zstd/.test(mediaType)) throw invalidParameter(`unsupported layer compression: ${mediaType}`);
  return /gzip/.test(mediaType) ? 'gzip' : 'none';
}

/** One worker thread and the jobs it runs. */
class Thread {
  readonly worker: Worker;
  readonly jobs = new Set<Job>();
  private idle: NodeJS.Timeout | undefined;

  constructor(
    private readonly idleMs: number,
    logger: Logger | undefined,
    private readonly gone: () => void,
  ) {
    // Its young generation small: a thread's objects are parsers and stream state, its bulk is buffers.
    this.worker = new Worker(WORKER_SCRIPT, { resourceLimits: { maxYoungGenerationSizeMb: THREAD_YOUNG_MB } });
    this.worker.unref(); // an idle daemon exits without waiting for it
    const die = (why: string) => {
      this.gone();
      if (this.jobs.size) logger?.warn({ jobs: this.jobs.size, why }, 'layer extraction thread died');
      for (const j of this.jobs) j.fail(systemError(`layer extraction thread died: ${why}`));
      this.jobs.clear();
    };
    this.worker.on('error', (e) => die(messageOf(e)));
    this.worker.on('exit', (code) => die(`exited with code ${code}`));
  }

  add(job: Job): void {
    clearTimeout(this.idle);
    this.jobs.add(job);
  }

  finished(job: Job): void {
    this.jobs.delete(job);
    if (this.jobs.size > 0) return;
    this.idle = setTimeout(() => {
      if (this.jobs.size === 0) void this.stop();
    }, this.idleMs);
    this.idle.unref();
  }

  async stop(): Promise<void> {
    clearTimeout(this.idle);
    this.gone();
    await this.worker.terminate();
  }
}

/** One extraction, as the loop sees it. */
class Job {
  readonly input: Writable;
  readonly done: Promise<ExtractedLayer>;
  private resolve!: (layer: ExtractedLayer) => void;
  private reject!: (e: unknown) => void;
  private inFlight = 0;
  /** A write waiting for the thread to catch up. */
  private blocked: ((e?: Error | null) => void) | null = null;
  /** Why the input was destroyed: what `done` rejects with once the thread has stopped. */
  private abandoned: Error | null = null;
  private settled = false;
  /** Private chunks gathered into one transferable buffer (stage()). */
  private staged: Uint8Array | undefined;
  private stagedLength = 0;
  /** Owned chunks (and staged bytes before them) waiting to go in the next message, and their transfer list. */
  private pending: Uint8Array[] = [];
  private pendingTransfer: ArrayBuffer[] = [];
  private pendingLength = 0;
  private wroteThisTurn = false;
  flushCheck: NodeJS.Immediate | undefined;

  constructor(
    private readonly port: MessagePort,
    private readonly finished: () => void,
    private readonly ownsChunks: boolean,
  ) {
    this.done = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    this.done.catch(() => undefined); // awaited by the caller; never an unhandled rejection meanwhile
    const job = this;
    this.input = new Writable({
      highWaterMark: 1 << 20,
      writev(chunks, cb) {
        job.send(
          chunks.map((c) => c.chunk as Buffer),
          cb,
        );
      },
      final(cb) {
        job.flush();
        job.post({ end: true });
        cb();
      },
      destroy(err, cb) {
        // Also called once the input has finished (autoDestroy): that is no abandonment.
        if (!job.settled && (err || !job.input.writableFinished)) {
          job.abandoned ??= err ?? new Error('layer extraction abandoned');
          job.post({ abort: true });
        }
        clearImmediate(job.flushCheck);
        job.unblock(err);
        cb(err);
      },
    });
    // The input's failure is the job's: `done` reports it. Whoever destroys the input with an
    // error (a failed download, a thread that died) must not find an 'error' event nobody hears.
    this.input.on('error', () => undefined);
    port.on('message', (m: FromThread) => this.receive(m));
  }

  /** Fails the job at once: its thread is gone, so nothing writes into the tree any more. */
  fail(e: Error): void {
    this.settle(() => this.reject(this.abandoned ?? e));
    this.input.destroy(e);
  }

  private send(chunks: Buffer[], cb: (e?: Error | null) => void): void {
    let length = 0;
    for (const c of chunks) {
      length += c.length;
      if (c.buffer instanceof SharedArrayBuffer) {
        this.flush();
        this.post({ data: [c] }); // shared as it is
      } else if (
        this.ownsChunks &&
        c.length >= TRANSFER_MIN &&
        c.byteOffset === 0 &&
        c.buffer.byteLength === c.length
      ) {
        this.handOver(c);
      } else {
        this.stage(c);
      }
    }
    this.inFlight += length;
    scavenge(length);
    if (this.inFlight < WINDOW) cb();
    else {
      this.flush(); // the thread must see all it is waited on for
      this.blocked = cb;
    }
  }

  /**
   * Copies a private chunk into the staging buffer, sent when full or once
   * a turn of the loop brings nothing more: one message per STAGE bytes, not
   * per socket read (an upload of small HTTP chunks made thousands of hops,
   * each a message on both threads, and an ack back).
   */
  private stage(c: Buffer): void {
    for (let at = 0; at < c.length; ) {
      this.staged ??= Buffer.allocUnsafeSlow(STAGE); // every byte sent is written first: no need to clear it
      const n = Math.min(c.length - at, STAGE - this.stagedLength);
      this.staged.set(c.subarray(at, at + n), this.stagedLength);
      this.stagedLength += n;
      at += n;
      if (this.stagedLength === STAGE) this.flush();
    }
    this.wroteThisTurn = true;
    if (this.stagedLength > 0 && !this.flushCheck) this.flushCheck = setImmediate(() => this.flushIfQuiet());
  }

  /**
   * An owned chunk joins the next message as it is, after the bytes staged
   * before it: one message carries many chunks, each transferred, none copied.
   */
  private handOver(c: Buffer): void {
    this.seal();
    this.pending.push(c);
    this.pendingTransfer.push(c.buffer as ArrayBuffer);
    this.pendingLength += c.length;
    if (this.pendingLength >= STAGE) this.flush();
    this.wroteThisTurn = true;
    if (!this.flushCheck) this.flushCheck = setImmediate(() => this.flushIfQuiet());
  }

  /**
   * Closes the staging buffer: what it holds goes, in order, before whatever
   * is handed over next. A buffer mostly empty keeps staging; its few bytes go
   * in memory of their own size (a small piece before each large chunk would
   * otherwise hold a whole staging buffer).
   */
  private seal(): void {
    if (!this.staged || this.stagedLength === 0) return;
    let data: Uint8Array;
    if (this.stagedLength < STAGE / 4) {
      data = Buffer.allocUnsafeSlow(this.stagedLength);
      data.set(this.staged.subarray(0, this.stagedLength));
    } else {
      data = this.staged.subarray(0, this.stagedLength);
      this.staged = undefined;
    }
    this.stagedLength = 0;
    this.pending.push(data);
    this.pendingTransfer.push(data.buffer as ArrayBuffer);
    this.pendingLength += data.length;
  }

  /** Runs after each poll of the loop while bytes are staged: sends them once a poll brought no more. */
  private flushIfQuiet(): void {
    this.flushCheck = undefined;
    if (this.stagedLength === 0 && this.pendingLength === 0) return;
    if (!this.wroteThisTurn) {
      this.flush();
      return;
    }
    this.wroteThisTurn = false;
    this.flushCheck = setImmediate(() => this.flushIfQuiet());
  }

  /** Sends what is staged and handed over (fresh or owned memory, transferred: no copy of it is kept). */
  private flush(): void {
    this.seal();
    if (this.pending.length === 0) return;
    const data = this.pending;
    const transfer = this.pendingTransfer;
    this.pending = [];
    this.pendingTransfer = [];
    this.pendingLength = 0;
    this.post({ data }, transfer);
  }

  private post(m: ToThread, transfer: ArrayBuffer[] = []): void {
    if (!this.settled) this.port.postMessage(m, transfer);
  }

  private unblock(e?: Error | null): void {
    const cb = this.blocked;
    this.blocked = null;
    cb?.(e);
  }

  private receive(m: FromThread): void {
    if ('ack' in m) {
      this.inFlight -= m.ack;
      if (this.inFlight < WINDOW) this.unblock();
    } else if ('done' in m) {
      this.settle(() => (this.abandoned ? this.reject(this.abandoned) : this.resolve(m.done)));
    } else {
      const error = new EngineError(m.error.kind, m.error.message);
      this.settle(() => this.reject(this.abandoned ?? error));
      this.input.destroy(error); // whatever feeds the input stops
    }
  }

  private settle(fn: () => void): void {
    if (this.settled) return;
    this.settled = true;
    this.port.close();
    this.finished();
    fn();
  }
}
