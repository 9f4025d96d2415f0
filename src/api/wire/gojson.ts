// Where a JSON body stops being JSON, in the words of Go's encoding/json Decoder,
// which dockerd decodes every body with: clients and Docker's own tests read
// "invalid character 'i' looking for beginning of object key string", not
// V8's "Expected property name". Only a body JSON.parse refused is scanned,
// so a valid one costs nothing more. Like Go's scanner it reads bytes, not
// characters, and the Decoder reads one value: what follows it is the caller's.

/** The outcome of reading the first JSON value of a body, as Go's Decoder.Decode reports it. */
export type GoScan =
  | { kind: 'value'; end: number }
  | { kind: 'eof' }
  | { kind: 'unexpected-eof' }
  | { kind: 'syntax'; message: string };

const isSpace = (c: number) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
const isDigit = (c: number) => c >= 0x30 && c <= 0x39;
const isHex = (c: number) => isDigit(c) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46);

/** Go's quoteChar: a byte as Go quotes it in a syntax error ('\'' and '"' by hand, the rest as strconv.Quote). */
export function goQuoteChar(c: number): string {
  if (c === 0x27) return "'\\''";
  if (c === 0x22) return `'"'`;
  const named: Record<number, string> = { 7: '\\a', 8: '\\b', 9: '\\t', 10: '\\n', 11: '\\v', 12: '\\f', 13: '\\r' };
  if (named[c]) return `'${named[c]}'`;
  if (c === 0x5c) return "'\\\\'";
  // string(byte) in Go is the rune of that value (U+0000-U+00FF): \xNN for the C0
  // controls and DEL, \u00NN for what else Go does not print, the rest as is.
  if (c < 0x20 || c === 0x7f) return `'\\x${c.toString(16).padStart(2, '0')}'`;
  if ((c >= 0x80 && c <= 0xa0) || c === 0xad) return `'\\u${c.toString(16).padStart(4, '0')}'`;
  return `'${String.fromCharCode(c)}'`;
}

/** What the scanner is inside of: an object expecting a key or a value, or an array. */
const OBJECT_KEY = 0;
const OBJECT_VALUE = 1;
const ARRAY_VALUE = 2;

/**
 * Reads the first JSON value of `buf` as Go's json.Decoder does and says where it
 * ends, or why it is not one. Nesting is not limited here: forms.ts has its own limit.
 */
export function goScan(buf: Uint8Array): GoScan {
  const stack: number[] = [];
  let i = 0;
  const n = buf.length;
  const fail = (c: number, context: string): GoScan => ({
    kind: 'syntax',
    message: `invalid character ${goQuoteChar(c)} ${context}`,
  });
  const skipSpace = () => {
    while (i < n && isSpace(buf[i]!)) i++;
  };

  skipSpace();
  if (i === n) return { kind: 'eof' };

  // Each turn reads one value at i, then what may follow it inside its containers.
  for (;;) {
    skipSpace();
    if (i === n) return { kind: 'unexpected-eof' };
    const c = buf[i]!;
    // A value begins.
    if (c === 0x7b /* { */) {
      i++;
      skipSpace();
      if (i === n) return { kind: 'unexpected-eof' };
      if (buf[i] === 0x7d /* } */) {
        i++;
      } else {
        if (buf[i] !== 0x22) return fail(buf[i]!, 'looking for beginning of object key string');
        stack.push(OBJECT_KEY);
        continue;
      }
    } else if (c === 0x5b /* [ */) {
      i++;
      skipSpace();
      if (i === n) return { kind: 'unexpected-eof' };
      if (buf[i] === 0x5d /* ] */) {
        i++;
      } else {
        stack.push(ARRAY_VALUE);
        continue;
      }
    } else {
      const r = scanScalar(buf, i);
      if (r.kind !== 'value') return r;
      // A number at the very end of the body is complete; anywhere else it ends at its delimiter.
      i = r.end;
    }
    // After a value: close containers, or step to the next key or element.
    for (;;) {
      const top = stack.length - 1;
      if (top < 0) return { kind: 'value', end: i };
      skipSpace();
      if (i === n) return { kind: 'unexpected-eof' };
      const d = buf[i]!;
      if (stack[top] === OBJECT_KEY) {
        if (d !== 0x3a /* : */) return fail(d, 'after object key');
        stack[top] = OBJECT_VALUE;
        i++;
        break;
      }
      if (stack[top] === OBJECT_VALUE) {
        if (d === 0x2c /* , */) {
          stack[top] = OBJECT_KEY;
          i++;
          skipSpace();
          if (i === n) return { kind: 'unexpected-eof' };
          if (buf[i] !== 0x22) return fail(buf[i]!, 'looking for beginning of object key string');
          break;
        }
        if (d === 0x7d /* } */) {
          stack.pop();
          i++;
          continue;
        }
        return fail(d, 'after object key:value pair');
      }
      if (d === 0x2c) {
        i++;
        break;
      }
      if (d === 0x5d /* ] */) {
        stack.pop();
        i++;
        continue;
      }
      return fail(d, 'after array element');
    }
  }
}

/** A string, number or literal starting at `at`: where it ends, or Go's complaint. */
function scanScalar(buf: Uint8Array, at: number): GoScan {
  const n = buf.length;
  let i = at;
  const fail = (c: number, context: string): GoScan => ({
    kind: 'syntax',
    message: `invalid character ${goQuoteChar(c)} ${context}`,
  });
  const c = buf[i]!;
  if (c === 0x22) {
    i++;
    while (i < n) {
      const s = buf[i]!;
      if (s === 0x22) return { kind: 'value', end: i + 1 };
      if (s === 0x5c) {
        i++;
        if (i === n) break;
        const e = buf[i]!;
        if (e === 0x75 /* u */) {
          for (let k = 1; k <= 4; k++) {
            if (i + k === n) return { kind: 'unexpected-eof' };
            if (!isHex(buf[i + k]!)) return fail(buf[i + k]!, 'in \\u hexadecimal character escape');
          }
          i += 5;
          continue;
        }
        if (!'bfnrt\\/"'.includes(String.fromCharCode(e))) return fail(e, 'in string escape code');
        i++;
        continue;
      }
      if (s < 0x20) return fail(s, 'in string literal');
      i++;
    }
    return { kind: 'unexpected-eof' };
  }
  if (c === 0x2d || isDigit(c)) return scanNumber(buf, at);
  const literals: Record<number, string> = { 116: 'true', 102: 'false', 110: 'null' };
  const word = literals[c];
  if (!word) return fail(c, 'looking for beginning of value');
  for (let k = 1; k < word.length; k++) {
    if (i + k === n) return { kind: 'unexpected-eof' };
    if (buf[i + k] !== word.charCodeAt(k)) return fail(buf[i + k]!, `in literal ${word} (expecting '${word[k]}')`);
  }
  return { kind: 'value', end: i + word.length };
}

function scanNumber(buf: Uint8Array, at: number): GoScan {
  const n = buf.length;
  let i = at;
  const fail = (c: number, context: string): GoScan => ({
    kind: 'syntax',
    message: `invalid character ${goQuoteChar(c)} ${context}`,
  });
  // At the end of the body Go's Decoder has a value when the scanner's eof() does:
  // a number missing its digits is cut short ("unexpected EOF").
  if (buf[i] === 0x2d) {
    i++;
    if (i === n) return { kind: 'unexpected-eof' };
    if (!isDigit(buf[i]!)) return fail(buf[i]!, 'in numeric literal');
  }
  if (buf[i] === 0x30) i++;
  else while (i < n && isDigit(buf[i]!)) i++;
  if (i < n && buf[i] === 0x2e /* . */) {
    i++;
    if (i === n) return { kind: 'unexpected-eof' };
    if (!isDigit(buf[i]!)) return fail(buf[i]!, 'after decimal point in numeric literal');
    while (i < n && isDigit(buf[i]!)) i++;
  }
  if (i < n && (buf[i] === 0x65 || buf[i] === 0x45) /* e E */) {
    i++;
    if (i < n && (buf[i] === 0x2b || buf[i] === 0x2d)) i++;
    if (i === n) return { kind: 'unexpected-eof' };
    if (!isDigit(buf[i]!)) return fail(buf[i]!, 'in exponent of numeric literal');
    while (i < n && isDigit(buf[i]!)) i++;
  }
  return { kind: 'value', end: i };
}

/**
 * What follows the first value, as dockerd's ReadJSON judges it with Decoder.More:
 * anything but spaces is "unexpected content after JSON", except a stray `}` or `]`,
 * which More does not count as more.
 */
export function goMore(buf: Uint8Array, end: number): boolean {
  let i = end;
  while (i < buf.length && isSpace(buf[i]!)) i++;
  return i < buf.length && buf[i] !== 0x7d && buf[i] !== 0x5d;
}

/** Nothing but the spaces Go's scanner skips (an empty body, to its Decoder, is io.EOF). */
export const goBlank = (buf: Uint8Array) => buf.every(isSpace);
