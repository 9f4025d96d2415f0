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
 * The batch's entries as one buffer: framed (stdcopy) without a TTY, each
 * header and payload copied once into it.
 */
function joinBatch(batch: { stream: number; payload: Buffer }[], size: number, tty: boolean): Buffer {
  if (tty)
    return batch.length === 1
      ? batch[0]!.payload
      : Buffer.concat(
          batch.map((b) => b.payload),
          size,
        );
  if (batch.length === 1) return frame(batch[0]!.stream, batch[0]!.payload);
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for (const { stream, payload } of batch) {
    out[at] = stream;
    out[at + 1] = 0;
    out[at + 2] = 0;
    out[at + 3] = 0;
    out.writeUInt32BE(payload.length, at + 4);
    at += 8 + payload.copy(out, at + 8);
  }
  return out;
}

/**
 * Writes entries to `out`, honouring backpressure; resolves when the source ends.
 * Entries that come together (the lines of one read of a log file, which a
 * source may hand over as one array) go out as one write: each write to an HTTP
 * response is a chunk of its own, with its header, and a syscall. A batch is
 * written when it reaches BATCH_BYTES or at the next turn of the event loop, so
 * live output waits no longer than that.
 */
export async function writeOutput(
  out: Writable,
  entries: AsyncIterable<OutputEntry | readonly OutputEntry[]>,
  o: OutputOptions,
): Promise<void> {
  let batch: { stream: number; payload: Buffer }[] = [];
  let size = 0;
  let later: NodeJS.Immediate | undefined;
  const take = (): Buffer | undefined => {
    clearImmediate(later);
    later = undefined;
    if (!batch.length || out.destroyed) return undefined;
    const chunk = joinBatch(batch, size, o.tty);
    batch = [];
    size = 0;
    return chunk;
  };
  const flush = () => {
    const chunk = take();
    if (chunk) out.write(chunk);
  };
  const add = (e: OutputEntry) => {
    const payload =
      o.timestamps && e.timeNano !== undefined
        ? Buffer.concat([Buffer.from(`${formatTimestamp(e.timeNano)} `), e.line])
        : e.line;
    batch.push({ stream: e.stream === 'stderr' ? STDERR : STDOUT, payload });
    size += o.tty ? payload.length : 8 + payload.length;
    if (size >= BATCH_BYTES) flush();
  };
  try {
    for await (const item of entries) {
      if (out.destroyed) return;
      if (Array.isArray(item)) for (const e of item as readonly OutputEntry[]) add(e);
      else add(item as OutputEntry);
      if (size > 0) later ??= setImmediate(flush);
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
