// Docker's json-file log format, one entry a line, as dockerd 20.10 writes it
// (daemon/logger/jsonfilelog/jsonlog/jsonlogbytes.go):
//   {"log":"hello\n","stream":"stdout","time":"2026-11-28T08:04:01.123456789Z"}
// `log` is the output's bytes as a JSON string, escaped as that file's
// ffjsonWriteJSONBytesAsString does (not quite encoding/json: a tab is \u0009,
// not \t): ", \ and the controls escaped, \n and \r by name, <, > and & as
// \u003c \u003e \u0026, U+2028 and U+2029 escaped, each byte of an invalid
// UTF-8 sequence as \ufffd (Go's utf8.DecodeRune), DEL and valid UTF-8 raw.
// `log` is left out when empty. `time` is UTC in Go's RFC3339Nano: the
// fraction's trailing zeros dropped (time.Time.Format).
import { type LogStream, parseRecord } from './k8sfile.js';

const HEX = '0123456789abcdef';

const bytes = (s: string) => Buffer.from(s, 'latin1');

/** Per ASCII byte: its escape, or undefined when it is written as it is. */
const ASCII_ESCAPES: (Buffer | undefined)[] = Array.from({ length: 128 }, (_, b) => {
  if (b === 0x22) return bytes('\\"');
  if (b === 0x5c) return bytes('\\\\');
  if (b === 0x0a) return bytes('\\n');
  if (b === 0x0d) return bytes('\\r');
  if (b < 0x20 || b === 0x3c || b === 0x3e || b === 0x26) return bytes(`\\u00${HEX[b >> 4]}${HEX[b & 15]}`);
  return undefined;
});
/** 1 for the bytes written as they are (ASCII without an escape); the rest is looked at. */
const PLAIN = Uint8Array.from({ length: 256 }, (_, b) => (b < 0x80 && ASCII_ESCAPES[b] === undefined ? 1 : 0));
const REPLACEMENT = bytes('\\ufffd');
const LINE_SEPARATORS = [bytes('\\u2028'), bytes('\\u2029')];
const OPEN_LOG = bytes('{"log":"');
const OPEN = bytes('{');
const NEWLINE = bytes('\\n');
const CLOSE_LOG = bytes('",');

/**
 * The length of the valid UTF-8 sequence at s[i] (a byte ≥ 0x80), or 0 when
 * Go's utf8.DecodeRune would give RuneError of width 1 there: a stray
 * continuation byte, an overlong form, a surrogate, past U+10FFFF, or cut short.
 */
function utf8Width(s: Uint8Array, i: number): number {
  const b = s[i]!;
  const cont = (k: number, lo = 0x80, hi = 0xbf) => i + k < s.length && s[i + k]! >= lo && s[i + k]! <= hi;
  if (b >= 0xc2 && b <= 0xdf) return cont(1) ? 2 : 0;
  if (b >= 0xe0 && b <= 0xef) {
    const lo = b === 0xe0 ? 0xa0 : 0x80;
    const hi = b === 0xed ? 0x9f : 0xbf;
    return cont(1, lo, hi) && cont(2) ? 3 : 0;
  }
  if (b >= 0xf0 && b <= 0xf4) {
    const lo = b === 0xf0 ? 0x90 : 0x80;
    const hi = b === 0xf4 ? 0x8f : 0xbf;
    return cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

/**
 * A growing byte buffer that entries are written into, one batch at a time.
 * Pieces go in with TypedArray set (a builtin), not Buffer's copy or write:
 * entries are short, and a call into native code per piece costs more than
 * the copy.
 */
export class JsonLineWriter {
  private buf = Buffer.allocUnsafe(64 * 1024);
  private len = 0;
  /** The end of the last entry written (`"stream":…,"time":…}\n`), for the next one of the same stream and time. */
  private tail = { stream: '', timeNano: -1n, bytes: Buffer.alloc(0) };

  /** Appends one entry (content from `start` on) and its newline. */
  entry(stream: LogStream, timeNano: bigint, content: Uint8Array, newline: boolean, start = 0): void {
    // Worst case: every byte six (\u00XX, \ufffd), plus the frame.
    this.reserve((content.length - start) * 6 + 96);
    const logged = content.length > start || newline;
    this.put(logged ? OPEN_LOG : OPEN);
    if (logged) {
      this.escaped(content, start);
      if (newline) this.put(NEWLINE);
      this.put(CLOSE_LOG);
    }
    const t = this.tail;
    if (t.stream !== stream || t.timeNano !== timeNano) {
      this.tail = { stream, timeNano, bytes: bytes(`"stream":"${stream}","time":"${rfc3339Nano(timeNano)}"}\n`) };
    }
    this.put(this.tail.bytes);
  }

  /** The entries written since the last take, and an empty writer. */
  take(): Buffer {
    const out = Buffer.from(this.buf.subarray(0, this.len));
    this.len = 0;
    return out;
  }

  get length(): number {
    return this.len;
  }

  private reserve(n: number): void {
    if (this.len + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.len + n));
    this.buf.copy(next, 0, 0, this.len);
    this.buf = next;
  }

  private put(b: Uint8Array): void {
    this.buf.set(b, this.len);
    this.len += b.length;
  }

  private escaped(s: Uint8Array, from: number): void {
    let run = from;
    for (let i = from; i < s.length; ) {
      const b = s[i]!;
      if (PLAIN[b] === 1) {
        i++;
        continue;
      }
      if (i > run) this.put(s.subarray(run, i));
      if (b < 0x80) {
        this.put(ASCII_ESCAPES[b]!);
        i++;
      } else {
        const w = utf8Width(s, i);
        if (w === 0) {
          this.put(REPLACEMENT);
          i++;
        } else if (w === 3 && b === 0xe2 && s[i + 1] === 0x80 && (s[i + 2] === 0xa8 || s[i + 2] === 0xa9)) {
          // U+2028 and U+2029: E2 80 A8 / E2 80 A9.
          this.put(LINE_SEPARATORS[s[i + 2]! - 0xa8]!);
          i += 3;
        } else {
          this.put(s.subarray(i, i + w));
          i += w;
        }
      }
      run = i;
    }
    if (s.length > run) this.put(s.subarray(run));
  }
}

const SPACE = 0x20;

/**
 * conmon's records → entries, one each (a malformed record, none, as for
 * `docker logs`). A record's header (`<time> <stream> <F|P> `) is parsed in
 * full only when its time differs from the last one's: conmon stamps all the
 * records of one read alike, and most records share the last one's time.
 */
export class RecordConverter {
  private time = { text: Buffer.alloc(0), nano: 0n };

  constructor(readonly writer: JsonLineWriter) {}

  push(line: Buffer): void {
    let s1 = 0;
    while (s1 < line.length && line[s1] !== SPACE) s1++;
    const stream = line[s1 + 4] === 0x6f ? 'stdout' : 'stderr';
    const tag = line[s1 + 8];
    if (!this.sameTime(line, s1) || !this.wellFormed(line, s1, stream, tag)) {
      const r = parseRecord(line);
      if (!r) return;
      this.time = { text: Buffer.from(line.subarray(0, s1)), nano: r.timeNano };
      this.writer.entry(r.stream, r.timeNano, r.content, !r.partial);
      return;
    }
    this.writer.entry(stream, this.time.nano, line, tag === 0x46, s1 + 10);
  }

  private sameTime(line: Buffer, s1: number): boolean {
    const t = this.time.text;
    if (t.length !== s1) return false;
    for (let i = 0; i < s1; i++) if (line[i] !== t[i]) return false;
    return true;
  }

  /** `stdout `/`stderr `, F or P, and a space after: what parseRecord takes. */
  private wellFormed(line: Buffer, s1: number, stream: string, tag: number | undefined): boolean {
    if (line.length < s1 + 10 || line[s1 + 7] !== SPACE || line[s1 + 9] !== SPACE) return false;
    if (tag !== 0x46 && tag !== 0x50) return false;
    for (let i = 0; i < 6; i++) if (line[s1 + 1 + i] !== stream.charCodeAt(i)) return false;
    return true;
  }
}

let lastSecond = -1n;
let lastSecondText = '';

/** Nanoseconds since the epoch → Go's RFC3339Nano in UTC (trailing zeros of the fraction dropped). */
export function rfc3339Nano(ns: bigint): string {
  const second = ns / 1_000_000_000n - (ns % 1_000_000_000n < 0n ? 1n : 0n);
  if (second !== lastSecond) {
    lastSecond = second;
    lastSecondText = new Date(Number(second) * 1000).toISOString().slice(0, 19);
  }
  const frac = ns - second * 1_000_000_000n;
  if (frac === 0n) return `${lastSecondText}Z`;
  return `${lastSecondText}.${frac.toString().padStart(9, '0').replace(/0+$/, '')}Z`;
}

/** The time of a json-file entry (a line berth wrote), as written; null if it has none. */
export function entryTime(line: Buffer): string | null {
  const at = line.lastIndexOf('"time":"');
  if (at < 0) return null;
  const end = line.indexOf('"', at + 8);
  return end < 0 ? null : line.toString('latin1', at + 8, end);
}
