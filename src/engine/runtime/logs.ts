// Reading conmon's k8s-file logs. Each record is one line:
//   <RFC3339Nano local time> <stdout|stderr> <F|P> <bytes>\n
// F ends a line of output (its newline is the record's); P is a piece of a
// line that continues in the stream's next record (conmon adds the newline).
// Pieces are joined back, so an entry is one line of output as the container
// wrote it, with its newline (only the very last output may lack one).
//
// Rotation: the log is read as its rotated files, oldest first, then the live
// one (logfiles.ts), a .gz gunzipped. A new file at the log's path (a
// reopening by conmon: berth's rotation, or conmon's own cap, which throws the
// old file away) is a new inode: following drains the old file, reads the
// rotated files newer than it, and continues at offset 0 of the new one.
import { closeSync, fstatSync, openSync, readdirSync, readSync, watch, type FSWatcher } from 'node:fs';
import { open, stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { lockLog, logLocked, rotatedAfter, rotatedFiles } from './logfiles.js';
import { zlib } from '../os/zlib.js';

export type LogStream = 'stdout' | 'stderr';

export interface LogEntry {
  stream: LogStream;
  /** When conmon read the line (its first piece), millisecond precision. */
  time: Date;
  /** The same instant in nanoseconds since the epoch. */
  timeNano: bigint;
  /** The timestamp as conmon wrote it. */
  timeText: string;
  /** The output, with its trailing newline when it had one. */
  line: Buffer;
}

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

// ------------------------------------------------------------- timestamps

const TIMESTAMP = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/;

/**
 * The last whole second parsed, as written (up to the seconds, and the zone), and
 * its nanoseconds: a log's lines come many to a second, and the next one
 * differs only in its fraction, parsed alone.
 */
let lastDate = '';
let lastZone = '';
let lastSecondNano = 0n;
const DOT = 0x2e;
const DIGIT_0 = 0x30;

/** RFC 3339 with up to nanoseconds → nanoseconds since the epoch; null when malformed. */
export function parseTimestamp(text: string): bigint | null {
  // The same second as the last (TIMESTAMP's match, as its date and zone matched then), and
  // between them a dot and one to nine digits: the fraction, read digit by digit.
  const end = text.length - lastZone.length;
  if (lastDate && end - 20 >= 1 && end - 20 <= 9 && text.charCodeAt(19) === DOT) {
    if (text.startsWith(lastDate) && text.endsWith(lastZone)) {
      let n = 0;
      let i = 20;
      for (; i < end; i++) {
        const d = text.charCodeAt(i) - DIGIT_0;
        if (d < 0 || d > 9) break;
        n = n * 10 + d;
      }
      if (i === end) {
        for (let k = end - 20; k < 9; k++) n *= 10;
        return lastSecondNano + BigInt(n);
      }
    }
  }
  const m = TIMESTAMP.exec(text);
  if (!m) return null;
  const [, y, mo, d, h, mi, s, frac = '', zone = 'Z'] = m;
  const ms = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s));
  const offsetMin =
    zone === 'Z' ? 0 : (zone[0] === '-' ? -1 : 1) * (Number(zone.slice(1, 3)) * 60 + Number(zone.slice(4, 6)));
  const second = (BigInt(ms) - BigInt(offsetMin) * 60_000n) * 1_000_000n;
  lastDate = text.slice(0, 19);
  lastZone = zone;
  lastSecondNano = second;
  return second + BigInt(frac.padEnd(9, '0'));
}

/** Nanoseconds since the epoch → RFC 3339 in UTC with nine fraction digits (dockerd's log timestamps). */
export function formatTimestamp(ns: bigint): string {
  const ms = ns / 1_000_000n;
  const base = new Date(Number(ms)).toISOString().slice(0, 19);
  const frac = (((ns % 1_000_000_000n) + 1_000_000_000n) % 1_000_000_000n).toString().padStart(9, '0');
  return `${base}.${frac}Z`;
}

const toNano = (t: Date | bigint | undefined): bigint | undefined =>
  t === undefined ? undefined : typeof t === 'bigint' ? t : BigInt(t.getTime()) * 1_000_000n;

// ---------------------------------------------------------------- records

/** One line of the file, parsed. */
export interface LogRecord {
  timeNano: bigint;
  timeText: string;
  stream: LogStream;
  partial: boolean;
  content: Buffer;
}

const SPACE = 0x20;
const NEWLINE = Buffer.from('\n');

/** A copy of the bytes and a newline. */
function withNewline(content: Buffer): Buffer {
  const out = Buffer.allocUnsafe(content.length + 1);
  content.copy(out, 0);
  out[content.length] = 0x0a;
  return out;
}

/** One log line (without its newline) → record; null for anything malformed (e.g. cut by a crash). */
export function parseRecord(line: Buffer): LogRecord | null {
  const s1 = line.indexOf(SPACE);
  const s2 = s1 < 0 ? -1 : line.indexOf(SPACE, s1 + 1);
  if (s2 < 0 || line.length < s2 + 3 || line[s2 + 2] !== SPACE) return null;
  const timeText = line.toString('latin1', 0, s1);
  const stream = line.toString('latin1', s1 + 1, s2);
  const tag = line[s2 + 1];
  const timeNano = parseTimestamp(timeText);
  if (timeNano === null || (stream !== 'stdout' && stream !== 'stderr') || (tag !== 0x46 && tag !== 0x50)) return null;
  return { timeNano, timeText, stream, partial: tag === 0x50, content: line.subarray(s2 + 3) };
}

/** A joined line longer than this is handed out in pieces, so one endless line cannot exhaust memory. */
const MAX_JOINED = 1024 * 1024;

/** Joins P pieces with the F that ends them, per stream. */
class Joiner {
  private readonly pending = new Map<LogStream, { first: LogRecord; parts: Buffer[]; size: number }>();

  push(r: LogRecord): LogEntry | null {
    const p = this.pending.get(r.stream);
    if (!r.partial) {
      if (!p) return toEntry(r, withNewline(r.content));
      this.pending.delete(r.stream);
      return toEntry(p.first, Buffer.concat([...p.parts, r.content, NEWLINE]));
    }
    if (!p) this.pending.set(r.stream, { first: r, parts: [r.content], size: r.content.length });
    else {
      p.parts.push(r.content);
      p.size += r.content.length;
    }
    const cur = this.pending.get(r.stream)!;
    if (cur.size < MAX_JOINED) return null;
    this.pending.delete(r.stream);
    return toEntry(cur.first, Buffer.concat(cur.parts));
  }

  /** Lines that never got their end (the container's last output had no newline), oldest first. */
  flush(): LogEntry[] {
    const out = [...this.pending.values()].map((p) => toEntry(p.first, Buffer.concat(p.parts)));
    this.pending.clear();
    return out.sort((a, b) => (a.timeNano < b.timeNano ? -1 : a.timeNano > b.timeNano ? 1 : 0));
  }
}

/** An entry; its Date is made when asked for (the API's readers never do, and a log has many entries). */
class Entry implements LogEntry {
  constructor(
    readonly stream: LogStream,
    readonly timeNano: bigint,
    readonly timeText: string,
    readonly line: Buffer,
  ) {}

  get time(): Date {
    return new Date(Number(this.timeNano / 1_000_000n));
  }
}

function toEntry(first: LogRecord, line: Buffer): LogEntry {
  return new Entry(first.stream, first.timeNano, first.timeText, line);
}

// ------------------------------------------------------------ file access

const CHUNK = 64 * 1024;

/** Splits bytes into complete lines; keeps the unfinished rest for the next chunk. */
export class LineSplitter {
  private rest: Buffer = Buffer.alloc(0);

  push(chunk: Buffer): Buffer[] {
    const buf = this.rest.length ? Buffer.concat([this.rest, chunk]) : chunk;
    const lines: Buffer[] = [];
    let start = 0;
    for (let nl = buf.indexOf(0x0a); nl >= 0; nl = buf.indexOf(0x0a, start)) {
      lines.push(buf.subarray(start, nl));
      start = nl + 1;
    }
    this.rest = buf.subarray(start);
    return lines;
  }

  reset(): void {
    this.rest = Buffer.alloc(0);
  }
}

/** One of a log's files, to read whole or the end of. */
export interface LogSource {
  /** Complete lines from where reading is to the end of the file, a chunk's worth at a time. */
  batches(): AsyncGenerator<Buffer[]>;
  /** The lines of the last n records, and how many records they are; `continued` as tailLines takes it. */
  tail(n: number, continued?: LogStream[]): Promise<Tail>;
  close(): Promise<void>;
}

interface Tail {
  lines: Buffer[];
  count: number;
  /** Streams whose oldest kept record reaches the start of the file: it may have begun in the file before. */
  open: LogStream[];
}

/** An open plain log file and how far into it we have read. */
export class Cursor implements LogSource {
  private readonly splitter = new LineSplitter();
  private readonly buf = Buffer.allocUnsafe(CHUNK);

  private constructor(
    private fh: FileHandle,
    /** The file's inode: where it went after a rotation is found by it. */
    public ino: number,
    private offset: number,
  ) {}

  static async open(file: string, offset = 0): Promise<Cursor | null> {
    const fh = await open(file, 'r').catch(() => null);
    return fh && Cursor.at(fh, offset);
  }

  /** A cursor on a file already open (it owns the handle from here on). */
  static async at(fh: FileHandle, offset = 0): Promise<Cursor> {
    const st = await fh.stat();
    return new Cursor(fh, st.ino, offset);
  }

  /** Complete lines from the offset to the end of the file as it is now, a chunk's worth at a time. */
  async *batches(): AsyncGenerator<Buffer[]> {
    // Truncated in place: start over. From the start, there is nothing to compare.
    if (this.offset > 0 && (await this.fh.stat()).size < this.offset) this.restart();
    for (;;) {
      const { bytesRead } = await this.fh.read(this.buf, 0, CHUNK, this.offset);
      if (bytesRead === 0) return;
      this.offset += bytesRead;
      // A copy: lines (and pieces the joiner keeps) must not alias the reused read buffer.
      yield this.splitter.push(Buffer.from(this.buf.subarray(0, bytesRead)));
      // A short read was the end of the file as it is now (what grows later, a follow drains
      // again when it is told): no second read to learn it.
      if (bytesRead < CHUNK) return;
    }
  }

  /** The lines of the last n records; reading continues after them. */
  async tail(n: number, continued?: LogStream[]): Promise<Tail> {
    const { end, ...tail } = await tailLines(filePositional(this.fh, (await this.fh.stat()).size), n, continued);
    this.offset = end;
    return tail;
  }

  /**
   * Whether the log goes on past this file: the path names another file (a
   * rotation, and conmon has reopened), or, once the writer is gone, no file
   * (renamed by a rotation that conmon did not live to follow).
   */
  async movedOn(file: string, writerGone: boolean): Promise<boolean> {
    const st = await stat(file).catch(() => null);
    return st ? st.ino !== this.ino : writerGone;
  }

  close(): Promise<void> {
    return this.fh.close().catch(() => undefined);
  }

  private restart(): void {
    this.offset = 0;
    this.splitter.reset();
  }
}

export const gunzipAsync = (buf: Buffer): Promise<Buffer> => promisify(zlib().gunzip)(buf);

/** A rotated file, gzipped: read by streaming through gunzip; its end by gunzipping it whole (it is one file's size). */
class GzipSource implements LogSource {
  constructor(private readonly fh: FileHandle) {}

  async *batches(): AsyncGenerator<Buffer[]> {
    const splitter = new LineSplitter();
    const file = this.fh.createReadStream({ autoClose: false, start: 0 });
    const stream = file.pipe(zlib().createGunzip());
    try {
      for await (const chunk of stream) yield splitter.push(chunk as Buffer);
    } finally {
      file.destroy();
    }
  }

  async tail(n: number, continued?: LogStream[]): Promise<Tail> {
    const data = await gunzipAsync(await this.fh.readFile());
    const { end: _, ...tail } = await tailLines(bufferPositional(data), n, continued);
    return tail;
  }

  close(): Promise<void> {
    return this.fh.close().catch(() => undefined);
  }
}

/** A rotated file, opened as what it is. */
export async function openRotated(f: { path: string; compressed: boolean }): Promise<LogSource | null> {
  if (!f.compressed) return Cursor.open(f.path);
  const fh = await open(f.path, 'r').catch(() => null);
  return fh && new GzipSource(fh);
}

/**
 * The log's files, open: the rotated ones (only those newer than the file of
 * inode `after`, when given), oldest first, and the live one. While the live
 * file is renamed away and conmon has not yet reopened, the newest rotated
 * file is still being written: it is the live one.
 */
export async function openLogs(file: string, after?: number): Promise<{ older: LogSource[]; live: Cursor | null }> {
  return lockLog(file, async () => {
    const all = await rotatedFiles(file);
    const rotated = after === undefined ? all : rotatedAfter(file, after, all);
    const older = (await Promise.all(rotated.map(openRotated))).filter((s): s is LogSource => s !== null);
    let live = await Cursor.open(file);
    const newest = older.at(-1);
    if (!live && newest instanceof Cursor) {
      older.pop();
      live = newest;
    }
    return { older, live };
  });
}

/** What tailLines reads: a file, or a gunzipped one in memory. */
export interface Positional {
  size: number;
  read(buf: Buffer, len: number, pos: number): Promise<unknown>;
}

/** The first `size` bytes of an open file, read where asked. */
export const filePositional = (fh: FileHandle, size: number): Positional => ({
  size,
  read: (b, len, pos) => fh.read(b, 0, len, pos),
});

/** Bytes in memory (a gunzipped file), read the same way. */
export const bufferPositional = (data: Buffer): Positional => ({
  size: data.length,
  read: async (b, len, pos) => data.copy(b, 0, pos, pos + len),
});

/**
 * The lines of the last n records (count: how many records they are, fewer
 * than n when the file has fewer) and the offset just past the last complete
 * line. `continued`: the streams whose record at the start of the next file
 * may have begun here (its pieces here are kept, and not counted again). Reads backwards; a record's P pieces may interleave with the other
 * stream's lines, so reading goes on until every kept record has its start
 * (an earlier F of its stream, or the beginning of the file). Records count
 * in the order of their last line, an unfinished one included.
 */
async function tailLines(src: Positional, n: number, continued: Tail['open'] = []): Promise<Tail & { end: number }> {
  const size = src.size;
  const buf = Buffer.allocUnsafe(CHUNK);
  const kept: Buffer[] = [];
  // A stream whose oldest kept record in the next file may have begun in this one: its pieces here are that record's.
  const state = new Map<LogStream, 'open' | 'done'>(continued.map((s) => [s, 'open']));
  let started = 0;
  let pos = size;
  let carry = Buffer.alloc(0);
  let end = -1;
  const visit = (line: Buffer): boolean => {
    const r = parseRecord(line);
    if (!r || state.get(r.stream) === 'done') return false;
    if (r.partial && state.get(r.stream) === 'open') kept.push(line);
    else if (started === n) state.set(r.stream, 'done');
    else {
      started++;
      state.set(r.stream, 'open');
      kept.push(line);
    }
    return started === n && ![...state.values()].includes('open');
  };
  while (pos > 0) {
    const len = Math.min(CHUNK, pos);
    pos -= len;
    await src.read(buf, len, pos);
    const data = Buffer.concat([buf.subarray(0, len), carry]);
    const parts = splitAll(data);
    // parts[0] may continue in the previous chunk; the last part follows the last newline.
    carry = Buffer.from(parts.shift()!);
    if (end < 0) {
      const trailing = parts.pop();
      if (trailing === undefined) {
        // No newline in this chunk yet: everything is carried.
        continue;
      }
      end = size - trailing.length;
    }
    for (let i = parts.length - 1; i >= 0; i--) {
      if (visit(parts[i]!)) return { lines: kept.reverse(), count: started, open: [], end };
    }
  }
  if (end >= 0 && carry.length) visit(carry);
  const open = [...state].filter(([, st]) => st === 'open').map(([stream]) => stream);
  return { lines: kept.reverse(), count: started, open, end: Math.max(end, 0) };
}

function splitAll(data: Buffer): Buffer[] {
  const parts: Buffer[] = [];
  let start = 0;
  for (let nl = data.indexOf(0x0a); nl >= 0; nl = data.indexOf(0x0a, start)) {
    parts.push(data.subarray(start, nl));
    start = nl + 1;
  }
  parts.push(data.subarray(start));
  return parts;
}

// ---------------------------------------------------------------- follow

/** Wakes a waiter when a file in dir changes (inotify via fs.watch; no polling). */
class DirNotifier {
  private dirty = true;
  private wake: (() => void) | undefined;
  private readonly watcher: FSWatcher;

  constructor(dir: string, names: string[]) {
    this.watcher = watch(dir, (_event, name) => {
      if (!name || names.includes(name)) this.poke();
    });
    this.watcher.on('error', () => this.poke());
  }

  /** Resolves at once if something changed since the last call, else on the next change or abort. */
  async wait(signal: AbortSignal): Promise<void> {
    if (!this.dirty && !signal.aborted) {
      await new Promise<void>((resolve) => {
        const onAbort = () => resolve();
        this.wake = () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        };
        signal.addEventListener('abort', onAbort, { once: true });
      });
    }
    this.wake = undefined;
    this.dirty = false;
  }

  close(): void {
    this.watcher.close();
  }

  private poke(): void {
    this.dirty = true;
    this.wake?.();
  }
}

/** Aborts when the caller's signal does, or once `until` (if any) is past. */
function stopSignal(
  signal: AbortSignal | undefined,
  until: bigint | undefined,
): { signal: AbortSignal; dispose: () => void } {
  const ctl = new AbortController();
  const abort = () => ctl.abort();
  signal?.addEventListener('abort', abort, { once: true });
  if (signal?.aborted) ctl.abort();
  let timer: NodeJS.Timeout | undefined;
  if (until !== undefined) {
    const ms = Number(until / 1_000_000n) - Date.now();
    timer = setTimeout(abort, Math.max(0, Math.min(ms, 2 ** 31 - 1)));
  }
  return {
    signal: ctl.signal,
    dispose: () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', abort);
    },
  };
}

// ------------------------------------------------------------------ read

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

/**
 * The entries of a conmon k8s-file log. Without follow, what the file holds
 * now; with follow, also what is appended (across rotations) until
 * options.signal aborts or `until` passes. A missing file reads as empty
 * (when following: until it appears).
 */
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
