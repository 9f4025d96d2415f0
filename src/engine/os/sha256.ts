// sha256 of bytes that stream by in large chunks (layer tars and blobs),
// computed on libuv's thread pool by the native addon rather than on the
// event loop, which meanwhile does other work (the commit's walk, a pull's
// parsing); docs/decisions/storage.md has the measure.
//
// Chunks are hashed in the order given, in batches (one pool trip per batch).
// They are referenced, not copied, until hashed, so they must not change
// meanwhile: stream chunks never do.
import { Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { native, type Sha256Handle } from './native.js';

/** Bytes waiting to be hashed beyond which writers wait (ordinary backpressure). */
const MAX_QUEUED = 8 << 20;

export class Sha256 {
  private readonly handle: Sha256Handle = native.sha256New();
  private queue: Buffer[] = [];
  private queued = 0;
  private running: Promise<void> | null = null;
  private readonly waiting: Array<() => void> = [];
  private failure: { error: unknown } | null = null;

  /** Adds bytes; resolves at once unless too many wait to be hashed, then once they are fewer. */
  update(chunk: Buffer): Promise<void> {
    if (chunk.length === 0) return Promise.resolve();
    this.queue.push(chunk);
    this.queued += chunk.length;
    this.pump();
    if (this.queued <= MAX_QUEUED) return Promise.resolve();
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** `sha256:<hex>` of everything added, once it is hashed. */
  async digest(): Promise<string> {
    while (this.running) await this.running;
    if (this.failure) throw this.failure.error;
    return `sha256:${native.sha256Digest(this.handle)}`;
  }

  private pump(): void {
    if (this.running || this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    this.queued = 0;
    this.running = native.sha256Update(this.handle, batch).then(
      () => this.ran(),
      (error: unknown) => {
        this.failure ??= { error };
        this.ran();
      },
    );
  }

  private ran(): void {
    this.running = null;
    this.pump();
    // The batch that was running is hashed: writers wait only for what is queued now.
    if (this.queued <= MAX_QUEUED) for (const release of this.waiting.splice(0)) release();
  }
}

/** A Writable that hashes what is written to it. */
export function hashSink(): Writable & { digest(): Promise<string> } {
  const hash = new Sha256();
  const sink = new Writable({
    highWaterMark: 1 << 20,
    write(chunk: Buffer, _enc, cb) {
      hash.update(chunk).then(() => cb(), cb);
    },
  });
  // Once every write has reached the hash (the sink finished), and all of it is hashed.
  const digest = () => finished(sink).then(() => hash.digest());
  return Object.assign(sink, { digest });
}
