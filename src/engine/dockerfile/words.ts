// The words of Dockerfile lines, below the parser: Go's blanks, dockerd's
// quote-aware split, Go's quoting of a string for messages.

export type EscapeChar = '\\' | '`';

/** Go's unicode.IsSpace. */
export function isSpace(ch: string): boolean {
  return /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]$/.test(ch);
}

export const trimLeft = (s: string): string => {
  let i = 0;
  while (i < s.length && isSpace(s[i]!)) i++;
  return s.slice(i);
};
export const trimSpace = (s: string): string => {
  let end = s.length;
  while (end > 0 && isSpace(s[end - 1]!)) end--;
  return trimLeft(s.slice(0, end));
};

/** Whitespace-separated words; quotes and escapes stay in them for expansion (dockerd's parseWords). */
export function parseWords(rest: string, esc: EscapeChar = '\\'): string[] {
  const words: string[] = [];
  const chars = [...rest];
  let word = '';
  let quote = '';
  let blankOK = false;
  let inWord = false;
  for (let i = 0; i < chars.length; i++) {
    let ch = chars[i]!;
    if (!inWord) {
      if (isSpace(ch)) continue;
      inWord = true;
    }
    if (quote === '') {
      if (isSpace(ch)) {
        if (blankOK || word.length > 0) words.push(word);
        word = '';
        blankOK = false;
        inWord = false;
        continue;
      }
      if (ch === "'" || ch === '"') {
        quote = ch;
        blankOK = true;
      }
      if (ch === esc) {
        if (i + 1 === chars.length) continue;
        word += ch;
        ch = chars[++i]!;
      }
      word += ch;
      continue;
    }
    if (ch === quote) quote = '';
    if (ch === esc && quote !== "'") {
      if (i + 1 === chars.length) {
        quote = '';
        continue;
      }
      word += ch;
      ch = chars[++i]!;
    }
    word += ch;
  }
  if (inWord && (blankOK || word.length > 0)) words.push(word);
  return words;
}

/** Go's strconv.Quote for the text a Dockerfile holds (printable characters kept, controls escaped). */
export function goQuote(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === '"' || ch === '\\') out += `\\${ch}`;
    else if (ch === '\n') out += '\\n';
    else if (ch === '\t') out += '\\t';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\x07') out += '\\a';
    else if (ch === '\b') out += '\\b';
    else if (ch === '\f') out += '\\f';
    else if (ch === '\v') out += '\\v';
    else if (c < 0x20 || c === 0x7f) out += `\\x${c.toString(16).padStart(2, '0')}`;
    else out += ch;
  }
  return `${out}"`;
}
