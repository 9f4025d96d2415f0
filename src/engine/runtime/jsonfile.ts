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
import type { LogStream } from './logs.js';

const HEX = '0123456789abcdef';

/** Per ASCII byte: its escape, or undefined when it is written as it is. */
const ASCII_ESCAPES: (string | undefined)[] = Array.from({ length: 128 }, (_, b) => {
  if (b === 0x22) return '\\"';
  if (b === 0x5c) return '\\\\';
  if (b === 0x0a) return '\\n';
  if (b === 0x0d) return '\\r';
  if (b < 0x20 || b === 0x3c || b === 0x3e || b === 0x26) return `\\u00${HEX[b >> 4]}${HEX[b & 15]}`;
  return undefined;
});

/**
 * The length of the valid UTF-8 sequence at s[i] (a byte ≥ 0x80), or 0 when
 * Go's utf8.DecodeRune would give RuneError of width 1 there: a stray
 * continuation byte, an overlong form, a surrogate, past U+10FFFF, or cut short.
 */
function utf8Width(s: Buffer, i: number): number {
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

/** A growing byte buffer that entries are written into, one batch at a time. */
export class JsonLineWriter {
  private buf = Buffer.allocUnsafe(64 * 1024);
  private len = 0;

  /** Appends one entry and its newline. */
  entry(stream: LogStream, timeNano: bigint, content: Buffer, newline: boolean): void {
    // Worst case: every byte six (\u00XX, \ufffd), plus the frame.
    this.reserve(content.length * 6 + 96);
    this.ascii(content.length || newline ? '{"log":"' : '{');
    if (content.length || newline) {
      this.escaped(content);
      if (newline) this.ascii('\\n');
      this.ascii('",');
    }
    this.ascii(`"stream":"${stream}","time":"${rfc3339Nano(timeNano)}"}\n`);
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

  private ascii(s: string): void {
    this.len += this.buf.write(s, this.len, 'latin1');
  }

  private escaped(s: Buffer): void {
    let start = 0;
    const flush = (end: number) => {
      if (end > start) this.len += s.copy(this.buf, this.len, start, end);
    };
    for (let i = 0; i < s.length; ) {
      const b = s[i]!;
      if (b < 0x80) {
        const esc = ASCII_ESCAPES[b];
        if (esc === undefined) {
          i++;
          continue;
        }
        flush(i);
        this.ascii(esc);
        start = ++i;
        continue;
      }
      const w = utf8Width(s, i);
      if (w === 0) {
        flush(i);
        this.ascii('\\ufffd');
        start = ++i;
        continue;
      }
      // U+2028 and U+2029: E2 80 A8 / E2 80 A9.
      if (w === 3 && b === 0xe2 && s[i + 1] === 0x80 && (s[i + 2] === 0xa8 || s[i + 2] === 0xa9)) {
        flush(i);
        this.ascii(s[i + 2] === 0xa8 ? '\\u2028' : '\\u2029');
        start = i += 3;
        continue;
      }
      i += w;
    }
    flush(s.length);
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
