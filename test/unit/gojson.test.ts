// The Go decoder's words for bodies that are not JSON. Each expected line is what
// Go 1.19's json.Decoder (Decode, then More) answered for the same bytes, the
// decoder dockerd reads bodies with; the cases cover every error of its scanner.
import { describe, expect, it } from 'vitest';
import { goBlank, goMore, goQuoteChar, goScan } from '../../src/api/wire/gojson.js';

/** What dockerd's ReadJSON makes of a body: OK, MORE (content after the value), EOF, or ERR + Go's words. */
function outcome(body: string): string {
  const buf = Buffer.from(body, 'latin1');
  const r = goScan(buf);
  if (r.kind === 'eof') return 'EOF';
  if (r.kind === 'unexpected-eof') return 'ERR unexpected EOF';
  if (r.kind === 'syntax') return `ERR ${r.message}`;
  return goMore(buf, r.end) ? 'MORE' : 'OK';
}

const GO: [body: string, go: string][] = [
  ['{invalid json', "ERR invalid character 'i' looking for beginning of object key string"],
  ['', 'EOF'],
  ['   \n\t', 'EOF'],
  ['{"a":1', 'ERR unexpected EOF'],
  ['{"a" 1}', "ERR invalid character '1' after object key"],
  ['{"a":1 "b":2}', `ERR invalid character '"' after object key:value pair`],
  ['[1 2]', "ERR invalid character '2' after array element"],
  ['[1,]', "ERR invalid character ']' looking for beginning of value"],
  ['{,}', "ERR invalid character ',' looking for beginning of object key string"],
  ['{"a":}', "ERR invalid character '}' looking for beginning of value"],
  ['"abc\x01"', "ERR invalid character '\\x01' in string literal"],
  ['"\\x"', "ERR invalid character 'x' in string escape code"],
  ['"\\u12g4"', "ERR invalid character 'g' in \\u hexadecimal character escape"],
  ['-x', "ERR invalid character 'x' in numeric literal"],
  ['1.x', "ERR invalid character 'x' after decimal point in numeric literal"],
  ['1e+', 'ERR unexpected EOF'],
  ['1ex', "ERR invalid character 'x' in exponent of numeric literal"],
  ['tru', 'ERR unexpected EOF'],
  ['trux', "ERR invalid character 'x' in literal true (expecting 'e')"],
  ['fals', 'ERR unexpected EOF'],
  ['nul', 'ERR unexpected EOF'],
  ['nulx', "ERR invalid character 'x' in literal null (expecting 'l')"],
  ['{"a":01}', "ERR invalid character '1' after object key:value pair"],
  ['{} trailing', 'MORE'],
  ['{}}', 'OK'],
  ['{"a":1}\n', 'OK'],
  ['\xef\xbb\xbf{}', "ERR invalid character 'ï' looking for beginning of value"],
  ["{'a':1}", "ERR invalid character '\\'' looking for beginning of object key string"],
  ['{"a":1}x', 'MORE'],
  ['[]]', 'OK'],
  ['{"a":"\xc3\xa9"}', 'OK'],
  ['{"a":-}', "ERR invalid character '}' in numeric literal"],
  ['{\x7f}', "ERR invalid character '\\x7f' looking for beginning of object key string"],
  ['{\xa0}', "ERR invalid character '\\u00a0' looking for beginning of object key string"],
  ['{\\}', "ERR invalid character '\\\\' looking for beginning of object key string"],
  ['{"a":[1,2', 'ERR unexpected EOF'],
  ['"unterminated', 'ERR unexpected EOF'],
];

describe("Go's JSON decoder words", () => {
  it.each(GO)('%j reads as Go reads it', (body, go) => {
    expect(outcome(body)).toBe(go);
  });

  it('quotes bytes as Go quotes them', () => {
    expect(goQuoteChar(0x0a)).toBe("'\\n'");
    expect(goQuoteChar(0x22)).toBe(`'"'`);
    expect(goQuoteChar(0x80)).toBe("'\\u0080'");
    expect(goQuoteChar(0xe9)).toBe("'é'");
  });

  it('counts only the spaces Go skips as blank', () => {
    expect(goBlank(Buffer.from(' \r\n\t'))).toBe(true);
    expect(goBlank(Buffer.from('\u00a0'))).toBe(false);
  });
});
