// A log's files as sources of lines: the live file read on from where reading
// is (a Cursor, which knows its inode, to follow it across a rotation), a
// rotated file plain or gzipped, and the lines of the last records of either,
// read backwards. openLogs() opens them all, oldest first (logfiles.ts names them).
import { open, stat, type FileHandle } from 'node:fs/promises';
import { promisify } from 'node:util';
import { type LogStream, parseRecord } from './k8sfile.js';
import { lockLog, rotatedAfter, rotatedFiles } from './logfiles.js';
import { zlib } from '../os/zlib.js';

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
