// Writes docker save's archive straight to the connection: blobs are read
// into two reused buffers (one filling while the other is being written), so
// a save allocates nothing per byte and every write is a large one. Tar
// headers and padding go in the same buffers as the data around them.
import type { FileHandle } from 'node:fs/promises';
import type { Writable } from 'node:stream';
import { systemError } from '../../errors.js';

/** 1 MiB: past this, larger writes to a socket gain nothing (its kernel buffer is smaller). */
const CHUNK = 1 << 20;

export class ArchiveWriter {
  private readonly bufs = [Buffer.allocUnsafeSlow(CHUNK), Buffer.allocUnsafeSlow(CHUNK)];
  /** The write in flight from each buffer: it must finish before that buffer is filled again. */
  private readonly inFlight: (Promise<void> | undefined)[] = [undefined, undefined];
  private cur = 0;
  private fill = 0;
  private readonly closed: Promise<never>;

  constructor(private readonly out: Writable) {
    // A write whose connection closed may never call back: a close fails the save instead.
    this.closed = new Promise<never>((_, reject) => {
      const gone = () => reject(new Error('the client went away'));
      if (out.destroyed) gone();
      else out.once('close', gone);
    });
    this.closed.catch(() => {});
  }

  /** Small bytes (tar headers, padding, metadata files), copied into the current buffer. */
  async append(bytes: Buffer): Promise<void> {
    let off = 0;
    while (off < bytes.length) {
      const n = bytes.copy(this.bufs[this.cur]!, this.fill, off);
      off += n;
      this.fill += n;
      if (this.fill === CHUNK) await this.flush();
    }
  }

  /** Exactly `size` bytes of a file, read straight into the buffers; a file of another size fails. */
  async appendFile(fh: FileHandle, size: number, what: string): Promise<void> {
    let position = 0;
    while (position < size) {
      const want = Math.min(CHUNK - this.fill, size - position);
      const { bytesRead } = await fh.read(this.bufs[this.cur]!, this.fill, want, position);
      if (bytesRead === 0) throw systemError(`${what} shrank while being saved`);
      position += bytesRead;
      this.fill += bytesRead;
      if (this.fill === CHUNK) await this.flush();
    }
    // A blob that changed size under us would corrupt every entry after it.
    const { bytesRead } = await fh.read(Buffer.alloc(1), 0, 1, size);
    if (bytesRead !== 0) throw systemError(`${what} grew while being saved`);
  }

  /** Sends what is buffered and waits until every write is done. */
  async end(): Promise<void> {
    await this.flush();
    await Promise.race([Promise.all(this.inFlight), this.closed]);
  }

  /** Writes the current buffer and switches to the other, once its own write is done. */
  private async flush(): Promise<void> {
    if (this.fill === 0) return;
    const chunk = this.bufs[this.cur]!.subarray(0, this.fill);
    this.inFlight[this.cur] = new Promise<void>((resolve, reject) => {
      this.out.write(chunk, (err) => (err ? reject(err) : resolve()));
    });
    this.inFlight[this.cur]!.catch(() => {});
    this.cur ^= 1;
    this.fill = 0;
    await Promise.race([this.inFlight[this.cur], this.closed]);
  }
}
