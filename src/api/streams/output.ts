// Writing a container's output (logs, attach) to a client: multiplexed frames
// without a TTY, raw bytes with one; optional RFC 3339 timestamps.
import type { Writable } from 'node:stream';
import { formatTimestamp, type LogEntry } from '../../engine/index.js';
import { frame, STDERR, STDOUT } from './mux.js';

export interface OutputOptions {
  tty: boolean;
  timestamps?: boolean;
  /** End `out` when the source ends, its last batch with the end (one write fewer). */
  end?: boolean;
}

/** A log entry, or a piece of live output (no timestamp). */
export type OutputEntry = Pick<LogEntry, 'stream' | 'line'> & { timeNano?: bigint };

/** Framed bytes beyond which a batch is written without waiting for the turn of the loop. */
const BATCH_BYTES = 64 * 1024;

/**
 * Writes entries to `out`, honouring backpressure; resolves when the source ends.
 * Entries that come together (the lines of one read of a log file) go out as one
 * write: each write to an HTTP response is a chunk of its own, with its header,
 * and a syscall. A batch is written when it reaches BATCH_BYTES or at the next
 * turn of the event loop, so live output waits no longer than that.
 */
export async function writeOutput(out: Writable, entries: AsyncIterable<OutputEntry>, o: OutputOptions): Promise<void> {
  let batch: Buffer[] = [];
  let size = 0;
  let later: NodeJS.Immediate | undefined;
  const take = (): Buffer | undefined => {
    clearImmediate(later);
    later = undefined;
    if (!batch.length || out.destroyed) return undefined;
    const chunk = batch.length === 1 ? (batch[0] as Buffer) : Buffer.concat(batch, size);
    batch = [];
    size = 0;
    return chunk;
  };
  const flush = () => {
    const chunk = take();
    if (chunk) out.write(chunk);
  };
  try {
    for await (const e of entries) {
      if (out.destroyed) return;
      const payload =
        o.timestamps && e.timeNano !== undefined
          ? Buffer.concat([Buffer.from(`${formatTimestamp(e.timeNano)} `), e.line])
          : e.line;
      const chunk = o.tty ? payload : frame(e.stream === 'stderr' ? STDERR : STDOUT, payload);
      batch.push(chunk);
      size += chunk.length;
      if (size >= BATCH_BYTES) flush();
      else later ??= setImmediate(flush);
      if (out.writableNeedDrain) await drained(out);
    }
  } finally {
    if (!o.end) flush();
    else if (!out.destroyed) {
      const chunk = take();
      if (chunk) out.end(chunk);
      else out.end();
    }
  }
}

/**
 * Resolves when `out` can take more (or is closed). Writers of long streams
 * wait for it after a write that returned false, so that a client that reads
 * slowly, or not at all, holds at most a buffer's worth in berthd.
 */
export function drained(out: Writable): Promise<void> {
  if (out.destroyed || !out.writableNeedDrain) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = () => {
      out.off('drain', done).off('close', done);
      resolve();
    };
    out.on('drain', done).on('close', done);
  });
}
