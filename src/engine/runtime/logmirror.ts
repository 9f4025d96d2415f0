// A json-file copy of a container's k8s-file log (jsonfile.ts's lines), kept
// beside it for the readers of Docker's file (kubelet through cri-dockerd's
// link, node log shippers). conmon's log stays the record; this follows it.
//
// One record is one entry, P pieces included (a piece's entry has no newline,
// as dockerd's partial entries). The log's files and the copy's match: when
// the log moves on to a new file (a rotation, or conmon's cap starting it
// afresh), the old file is read to its end first, then the copy's files are
// shifted (`keep`, as logfiles.shiftLogs) and the copy goes on in a new file.
//
// Followed on inotify of the log's directory (fs.watch): a wake-up reads what
// was appended from an offset, converts it and appends it in one write.
//
// Resuming (berthd's start, or an exit found after a crash): where the copy
// stopped is found from its last entry's time and how many entries at its end
// share it (conmon stamps every record of one read alike), matched against
// the log's records, newest file first, read backwards. A torn last line (a
// crash mid-write) is cut off first.
import { type FSWatcher, watch } from 'node:fs';
import { type FileHandle, open, readFile } from 'node:fs/promises';
import path from 'node:path';
import { entryTime, JsonLineWriter, RecordConverter } from './jsonfile.js';
import { compressRotated, lockLog, rotatedFiles, shiftLogs } from './logfiles.js';
import { parseRecord, parseTimestamp } from './k8sfile.js';
import {
  bufferPositional,
  Cursor,
  filePositional,
  gunzipAsync,
  LineSplitter,
  type LogSource,
  openLogs,
  type Positional,
} from './logsource.js';

const CHUNK = 64 * 1024;
/** Entries are written once this much is converted (or at the end of a read). */
const WRITE_AT = 1024 * 1024;

export interface MirrorFiles {
  /** conmon's k8s-file log. */
  log: string;
  /** The json-file copy. */
  mirror: string;
  /** The copy's files kept when the log moves on to a new file, the live one included (1: it starts afresh). */
  keep: number;
  /** Rotated copies are gzipped. */
  compress: boolean;
}

/** What the resume matches: the copy's last entry's time, and how many entries at its end share it. */
interface Mark {
  time: bigint;
  count: number;
  /**
   * Found in the copy's newest rotated file, its live one empty: the copy had
   * moved on past the log's file that holds the mark (it does so once that
   * file was read to its end), and nothing was copied since.
   */
  rotated: boolean;
}

type Pumpable = Pick<LogSource, 'batches' | 'close'>;

/** One of the log's files, open, to scan backwards and read on from an offset. */
interface LogPiece {
  scan: Positional;
  from(offset: number): Promise<Pumpable>;
  close(): Promise<void>;
  /** conmon writes into it still. */
  live: boolean;
  compressed: boolean;
}

export class LogMirror {
  private out: FileHandle | null = null;
  private cursor: Cursor | null = null;
  private watcher: FSWatcher | null = null;
  private queue: Promise<void> = Promise.resolve();
  private scheduled = false;
  private resumed = false;
  private closed = false;
  private readonly writer = new JsonLineWriter();
  private readonly records = new RecordConverter(this.writer);

  constructor(
    private readonly f: MirrorFiles,
    private readonly onError: (err: unknown) => void,
  ) {}

  /** Catches up from where the copy stopped, then follows the log as it grows. */
  follow(): void {
    const names = [path.basename(this.f.log), `${path.basename(this.f.log)}.tmp`];
    try {
      this.watcher = watch(path.dirname(this.f.log), (_event, name) => {
        if (!name || names.includes(name)) this.poke();
      });
      this.watcher.on('error', () => this.poke());
    } catch (err) {
      this.onError(err);
    }
    this.enqueue(() => this.step(false));
  }

  /** conmon writes no more: the copy is completed (every record of the log in it) and closed. */
  async finish(): Promise<void> {
    this.stopWatching();
    this.enqueue(() => this.step(true));
    await this.queue;
    await this.close();
  }

  /** Stops following now (berthd stops, or the container is removed); a later resume picks up. */
  async close(): Promise<void> {
    this.stopWatching();
    this.closed = true;
    await this.queue;
    await this.cursor?.close();
    await this.out?.close().catch(() => undefined);
    this.cursor = null;
    this.out = null;
  }

  private stopWatching(): void {
    this.watcher?.close();
    this.watcher = null;
  }

  private poke(): void {
    if (this.scheduled || this.closed) return;
    this.scheduled = true;
    this.enqueue(() => {
      this.scheduled = false;
      return this.step(false);
    });
  }

  private enqueue(job: () => Promise<void>): void {
    this.queue = this.queue
      .then(() => (this.closed ? undefined : job()))
      .catch((err: unknown) => {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.onError(err);
      });
  }

  // ------------------------------------------------------------ following

  /** Reads what the log gained; across to its next files when it moved on. `writerGone`: conmon has exited. */
  private async step(writerGone: boolean): Promise<void> {
    if (!this.resumed) await this.resume();
    this.cursor ??= await Cursor.open(this.f.log);
    if (!this.cursor) return;
    await this.pump(this.cursor);
    while (this.cursor && (await this.cursor.movedOn(this.f.log, writerGone))) {
      // conmon closed the old file before the new one took its name, maybe after more writes.
      await this.pump(this.cursor);
      const next = await openLogs(this.f.log, this.cursor.ino);
      await this.cursor.close();
      this.cursor = next.live;
      for (const src of next.older) {
        await this.nextFile();
        await this.pump(src);
        await src.close();
      }
      if (this.cursor) {
        await this.nextFile();
        await this.pump(this.cursor);
      }
    }
  }

  /** Converts the source's records from where it is to its end, and appends them. */
  private async pump(src: Pumpable): Promise<void> {
    for await (const lines of src.batches()) {
      for (const line of lines) {
        this.records.push(line);
        if (this.writer.length >= WRITE_AT) await this.flush();
      }
      await this.flush();
    }
  }

  private async flush(): Promise<void> {
    if (!this.writer.length) return;
    const buf = this.writer.take();
    this.out ??= await openCopy(this.f.mirror);
    for (let at = 0; at < buf.length; ) at += (await this.out.write(buf, at)).bytesWritten;
  }

  /** The log went on in a new file: so does the copy (its files shifted as the log's). */
  private async nextFile(): Promise<void> {
    await this.out?.close();
    this.out = null;
    await lockLog(this.f.mirror, () => shiftLogs(this.f.mirror, this.f.keep));
    this.out = await openCopy(this.f.mirror);
    if (this.f.compress) await compressRotated(this.f.mirror);
  }

  // ------------------------------------------------------------- resuming

  /**
   * Finds where the copy stopped in the log, copies what it lacks, and leaves
   * the cursor on the live file. Run again (from its mark) after a failure.
   */
  private async resume(): Promise<void> {
    await this.out?.close();
    this.out = await openCopy(this.f.mirror);
    const mark = await lastMark(this.f.mirror, this.out);
    const pieces = await lockLog(this.f.log, () => openPieces(this.f.log));
    try {
      let at: { index: number; offset: number } | null = mark ? null : { index: 0, offset: 0 };
      for (let i = pieces.length - 1; mark && i >= 0 && !at; i--) {
        const offset = await offsetAfter(pieces[i]!.scan, mark);
        // After a rotated mark the copy is at the start of the log's next file already.
        if (offset !== null) at = mark.rotated ? { index: i + 1, offset: 0 } : { index: i, offset };
      }
      if (!at) {
        // Not in the log: it started afresh since (conmon's cap while berthd was down). So does
        // the copy, unless it has already.
        if (pieces.length && !mark?.rotated) await this.nextFile();
        at = { index: 0, offset: 0 };
      }
      for (let i = at.index; i < pieces.length; i++) {
        const piece = pieces[i]!;
        if (i > at.index) await this.nextFile();
        const src = await piece.from(i === at.index ? at.offset : 0);
        try {
          await this.pump(src);
        } catch (e) {
          await src.close();
          throw e;
        }
        if (piece.live) this.cursor = src as Cursor;
        else await src.close();
      }
      this.resumed = true;
    } finally {
      await Promise.all(pieces.map((p) => p.close()));
    }
  }
}

// Read too: the resume reads its last entries.
const openCopy = (file: string) => open(file, 'a+', 0o640);

/**
 * The log's files, oldest first, open: the rotated ones and the live one. While
 * the live one is renamed away (a rotation conmon has not followed yet), the
 * newest plain rotated file is written still: it is the live one.
 */
async function openPieces(log: string): Promise<LogPiece[]> {
  const pieces: LogPiece[] = [];
  for (const f of await rotatedFiles(log)) {
    const piece = f.compressed ? await gzipPiece(f.path) : await plainPiece(f.path, false);
    if (piece) pieces.push(piece);
  }
  const live = await plainPiece(log, true);
  if (live) pieces.push(live);
  else {
    const newest = pieces.at(-1);
    if (newest && !newest.compressed) newest.live = true;
  }
  return pieces;
}

async function plainPiece(file: string, live: boolean): Promise<LogPiece | null> {
  const fh = await open(file, 'r').catch(() => null);
  if (!fh) return null;
  const size = (await fh.stat()).size;
  let owned = false;
  return {
    live,
    compressed: false,
    scan: filePositional(fh, size),
    from: (offset) => {
      owned = true;
      return Cursor.at(fh, offset);
    },
    close: async () => {
      if (!owned) await fh.close().catch(() => undefined);
    },
  };
}

async function gzipPiece(file: string): Promise<LogPiece | null> {
  const data = await readFile(file)
    .then((b) => gunzipAsync(b))
    .catch(() => null);
  if (!data) return null;
  return {
    live: false,
    compressed: true,
    scan: bufferPositional(data),
    from: async (offset) => ({
      async *batches() {
        yield new LineSplitter().push(data.subarray(offset));
      },
      close: async () => undefined,
    }),
    close: async () => undefined,
  };
}

/** The time of the file's first record (in its first chunk); null when there is none or it is malformed. */
async function firstRecordTime(src: Positional): Promise<bigint | null> {
  const buf = Buffer.allocUnsafe(Math.min(CHUNK, src.size));
  await src.read(buf, buf.length, 0);
  const nl = buf.indexOf(0x0a);
  return nl < 0 ? null : (parseRecord(buf.subarray(0, nl))?.timeNano ?? null);
}

/** The complete lines of a file from its end backwards, with where each starts. */
async function* linesBackward(src: Positional): AsyncGenerator<{ line: Buffer; start: number }> {
  const buf = Buffer.allocUnsafe(CHUNK);
  let pos = src.size;
  // The bytes from pos up to the first line already handed out (or the end of the file).
  let rest = Buffer.alloc(0);
  let seenEnd = false;
  while (pos > 0) {
    const len = Math.min(CHUNK, pos);
    pos -= len;
    await src.read(buf, len, pos);
    const data = Buffer.concat([buf.subarray(0, len), rest]);
    let end = data.length;
    if (!seenEnd) {
      // What follows the last newline is a line not finished (being written, or torn).
      const nl = data.lastIndexOf(0x0a);
      if (nl < 0) {
        rest = data;
        continue;
      }
      seenEnd = true;
      end = nl + 1;
    }
    while (end > 0) {
      const nl = end >= 2 ? data.lastIndexOf(0x0a, end - 2) : -1;
      if (nl < 0) break;
      yield { line: data.subarray(nl + 1, end - 1), start: pos + nl + 1 };
      end = nl + 1;
    }
    rest = Buffer.from(data.subarray(0, end));
  }
  if (seenEnd && rest.length) yield { line: rest.subarray(0, rest.length - 1), start: 0 };
}

/**
 * The copy's mark: from its live file, or when that is empty its newest
 * rotated one. A torn last line of the live file is cut off. Null: no entry.
 */
async function lastMark(mirror: string, out: FileHandle): Promise<Mark | null> {
  const size = (await out.stat()).size;
  const found = await markOf(filePositional(out, size), false, async (completeEnd) => {
    if (completeEnd < size) await out.truncate(completeEnd);
  });
  if (found) return found;
  const newest = (await rotatedFiles(mirror)).find((f) => f.index === 1);
  if (!newest) return null;
  const data = newest.compressed
    ? await gunzipAsync(await readFile(newest.path))
    : await readFile(newest.path).catch(() => null);
  return data && markOf(bufferPositional(data), true);
}

async function markOf(
  src: Positional,
  rotated: boolean,
  onEnd?: (completeEnd: number) => Promise<void>,
): Promise<Mark | null> {
  let mark: Mark | null = null;
  let text: string | null = null;
  let ended = false;
  for await (const { line, start } of linesBackward(src)) {
    if (!ended) await onEnd?.(start + line.length + 1);
    ended = true;
    const t = entryTime(line);
    if (t === null) continue;
    if (mark && t !== text) break;
    if (mark) mark.count++;
    else {
      const time = parseTimestamp(t);
      if (time === null) continue;
      mark = { time, count: 1, rotated };
      text = t;
    }
  }
  if (!ended) await onEnd?.(0);
  return mark;
}

/**
 * Where in this file of the log the record after the copy's last entry starts:
 * the mark's time has a run of records (one read of conmon's), the copy holds
 * `count` of them (the run starts after an older record). Null when every
 * record of the file is newer than the mark (or it has none).
 */
async function offsetAfter(src: Positional, mark: Mark): Promise<number | null> {
  // Records come in time order: a file that starts after the mark is skipped unread.
  const first = await firstRecordTime(src);
  if (first !== null && first > mark.time) return null;
  const runEnds: number[] = []; // newest first
  for await (const { line, start } of linesBackward(src)) {
    const r = parseRecord(line);
    if (!r || r.timeNano > mark.time) continue;
    const end = start + line.length + 1;
    if (r.timeNano === mark.time) {
      runEnds.push(end);
      continue;
    }
    if (!runEnds.length) return end;
    break;
  }
  if (!runEnds.length) return null;
  return runEnds[Math.max(runEnds.length - mark.count, 0)]!;
}
