// Reading conmon's k8s-file logs (the format, and its records joined into
// entries: k8sfile.ts), whole, from the last records, or following.
//
// Rotation: the log is read as its rotated files, oldest first, then the live
// one (logfiles.ts), a .gz gunzipped. A new file at the log's path (a
// reopening by conmon: berth's rotation, or conmon's own cap, which throws the
// old file away) is a new inode: following drains the old file, reads the
// rotated files newer than it, and continues at offset 0 of the new one.
import { closeSync, fstatSync, openSync, readdirSync, readSync } from 'node:fs';
import path from 'node:path';
import { DirNotifier, stopSignal } from './follow.js';
import { Joiner, type LogEntry, type LogStream, parseRecord, toNano } from './k8sfile.js';
import { logLocked } from './logfiles.js';
import { Cursor, LineSplitter, type LogSource, openLogs } from './logsource.js';

export {
  formatTimestamp,
  type LogEntry,
  type LogRecord,
  type LogStream,
  parseRecord,
  parseTimestamp,
} from './k8sfile.js';
export {
  bufferPositional,
  Cursor,
  filePositional,
  gunzipAsync,
  LineSplitter,
  type LogSource,
  openLogs,
  openRotated,
  type Positional,
} from './logsource.js';

export interface ReadLogOptions {
  /** Only entries at or after this instant (Date, or bigint nanoseconds since the epoch). */
  since?: Date | bigint;
  /** Only entries at or before this instant; when following, stop once it has passed. */
  until?: Date | bigint;
  /** Only the last N entries (before since/until filtering, as dockerd); absent or negative = all. */
  tail?: number;
  stdout?: boolean;
  stderr?: boolean;
  /** Keep reading as the file grows, until signal aborts (then drain what is left and end). */
  follow?: boolean;
  signal?: AbortSignal;
}

function makeFilter(o: ReadLogOptions): (e: LogEntry) => boolean {
  const since = toNano(o.since);
  const until = toNano(o.until);
  const streams = new Set<LogStream>();
  if (o.stdout ?? true) streams.add('stdout');
  if (o.stderr ?? true) streams.add('stderr');
  return (e) =>
    streams.has(e.stream) &&
    (since === undefined || e.timeNano >= since) &&
    (until === undefined || e.timeNano <= until);
}

/**
 * Records → joined entries that pass the filter. Entries travel in batches (a
 * read's worth): a step of an async generator per entry costs more than the
 * entry's parsing.
 */
function entries(lines: Buffer[], joiner: Joiner, keep: (e: LogEntry) => boolean): LogEntry[] {
  const out: LogEntry[] = [];
  for (const line of lines) {
    const r = parseRecord(line);
    const e = r && joiner.push(r);
    if (e && keep(e)) out.push(e);
  }
  return out;
}

/** Everything from where the source is to the end of its file. */
async function* drain(src: LogSource, joiner: Joiner, keep: (e: LogEntry) => boolean): AsyncGenerator<LogEntry[]> {
  for await (const lines of src.batches()) {
    const batch = entries(lines, joiner, keep);
    if (batch.length) yield batch;
  }
}

/** Rotated files, whole, oldest first; each closed once read. */
async function* drainAll(
  older: LogSource[],
  joiner: Joiner,
  keep: (e: LogEntry) => boolean,
): AsyncGenerator<LogEntry[]> {
  try {
    for (const src of older) yield* drain(src, joiner, keep);
  } finally {
    await Promise.all(older.map((src) => src.close()));
  }
}

/**
 * The log as it is: the rotated files then the live one, whole, or the lines
 * of the last `tail` records across them. The live file (if any) reads on
 * after.
 */
async function* readAll(
  older: LogSource[],
  live: Cursor | null,
  tail: number | undefined,
  joiner: Joiner,
  keep: (e: LogEntry) => boolean,
): AsyncGenerator<LogEntry[]> {
  if (tail === undefined || tail < 0) {
    yield* drainAll(older, joiner, keep);
  } else {
    const parts: Buffer[][] = [];
    try {
      let wanted = Math.floor(tail);
      let open: LogStream[] = [];
      for (const src of [...(live ? [live] : []), ...[...older].reverse()]) {
        if (wanted <= 0 && !open.length && src !== live) break;
        const t = await src.tail(wanted, open);
        parts.unshift(t.lines);
        wanted -= t.count;
        open = t.open;
      }
    } finally {
      await Promise.all(older.map((src) => src.close()));
    }
    const batch = entries(parts.flat(), joiner, keep);
    if (batch.length) yield batch;
  }
  if (live) yield* drain(live, joiner, keep);
}

/** The size up to which a log read whole, without following, is read in one go (smallLog). */
const SMALL_LOG = 256 * 1024;

/**
 * A log read whole, without following, that is one small file (no rotated
 * ones, no rotation under way): its bytes, read with a few synchronous calls
 * rather than a trip to the thread pool for each (directory, open, stat, read,
 * close), which is most of the time such a read takes. Null otherwise.
 */
function smallLog(file: string): Buffer | null {
  if (logLocked(file)) return null;
  const prefix = `${path.basename(file)}.`;
  let fd: number;
  try {
    if (readdirSync(path.dirname(file)).some((n) => n.startsWith(prefix))) return null;
    fd = openSync(file, 'r');
  } catch {
    return null;
  }
  try {
    const size = fstatSync(fd).size;
    if (size > SMALL_LOG) return null;
    const buf = Buffer.allocUnsafe(size);
    return buf.subarray(0, size ? readSync(fd, buf, 0, size, 0) : 0);
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

/**
 * The entries of a conmon k8s-file log. Without follow, what the file holds
 * now; with follow, also what is appended (across rotations) until
 * options.signal aborts or `until` passes. A missing file reads as empty
 * (when following: until it appears).
 */
export async function* readLog(file: string, o: ReadLogOptions = {}): AsyncGenerator<LogEntry> {
  for await (const batch of readLogBatches(file, o)) yield* batch;
}

/** readLog's entries in batches, as they are read (never an empty one). */
export async function* readLogBatches(file: string, o: ReadLogOptions = {}): AsyncGenerator<LogEntry[]> {
  const keep = makeFilter(o);
  const joiner = new Joiner();
  const small = !o.follow && (o.tail === undefined || o.tail < 0) ? smallLog(file) : null;
  if (small) {
    const batch = entries(new LineSplitter().push(small), joiner, keep);
    for (const e of joiner.flush()) if (keep(e)) batch.push(e);
    if (batch.length) yield batch;
    return;
  }
  const notifier = o.follow
    ? new DirNotifier(path.dirname(file), [path.basename(file), `${path.basename(file)}.tmp`])
    : null;
  const stop = o.follow ? stopSignal(o.signal, toNano(o.until)) : null;
  let cursor: Cursor | null = null;
  try {
    const begun = await openLogs(file);
    cursor = begun.live;
    yield* readAll(begun.older, cursor, o.tail, joiner, keep);
    while (notifier && stop && !stop.signal.aborted) {
      await notifier.wait(stop.signal);
      if (!cursor) cursor = await Cursor.open(file);
      if (!cursor) continue;
      yield* drain(cursor, joiner, keep);
      // After the end (the container exited), the files this reader has yet to reach are read too.
      while (cursor && (await cursor.movedOn(file, stop.signal.aborted))) {
        // conmon closes the old file before the new one takes its name, but may
        // have written more to it since that drain (the start of a line, maybe).
        yield* drain(cursor, joiner, keep);
        // Rotated files newer than it: rotations that came quicker than this reader.
        const next = await openLogs(file, cursor.ino);
        await cursor.close();
        cursor = next.live;
        yield* drainAll(next.older, joiner, keep);
        if (cursor) yield* drain(cursor, joiner, keep);
      }
    }
    // The last output may lack its newline; it is the end of the log now.
    const last = joiner.flush().filter(keep);
    if (last.length) yield last;
  } finally {
    notifier?.close();
    stop?.dispose();
    await cursor?.close();
  }
}
