// Writing a container's output (logs, attach) to a client: multiplexed frames
// without a TTY, raw bytes with one; optional RFC 3339 timestamps.
import type { Writable } from 'node:stream';
import { formatTimestamp, type LogEntry } from '../../engine/index.js';
import { frame, STDERR, STDOUT } from './mux.js';

export interface OutputOptions {
  tty: boolean;
  timestamps?: boolean;
}

/** A log entry, or a piece of live output (no timestamp). */
export type OutputEntry = Pick<LogEntry, 'stream' | 'line'> & { timeNano?: bigint };

/** Writes entries to `out`, honouring backpressure; resolves when the source ends. */
export async function writeOutput(out: Writable, entries: AsyncIterable<OutputEntry>, o: OutputOptions): Promise<void> {
  for await (const e of entries) {
    if (out.destroyed) return;
    const payload =
      o.timestamps && e.timeNano !== undefined
        ? Buffer.concat([Buffer.from(`${formatTimestamp(e.timeNano)} `), e.line])
        : e.line;
    const chunk = o.tty ? payload : frame(e.stream === 'stderr' ? STDERR : STDOUT, payload);
    if (!out.write(chunk)) await drained(out);
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
