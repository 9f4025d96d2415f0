// conmon's k8s-file log format. Each record is one line:
//   <RFC3339Nano local time> <stdout|stderr> <F|P> <bytes>\n
// F ends a line of output (its newline is the record's); P is a piece of a
// line that continues in the stream's next record (conmon adds the newline).
// Pieces are joined back, so an entry is one line of output as the container
// wrote it, with its newline (only the very last output may lack one).

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

export const toNano = (t: Date | bigint | undefined): bigint | undefined =>
  t === undefined ? undefined : typeof t === 'bigint' ? t : BigInt(t.getTime()) * 1_000_000n;

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
export class Joiner {
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
