// Word expansion as dockerd's builder does it (BuildKit's shell.Lex): quotes
// removed, the escape character resolved, $VAR and ${VAR…} replaced from an
// environment given as `k=v` strings. ProcessWords' splitting is kept too:
// what a variable brings is split on blanks, quoted text is not.
//
// Beyond dockerd 20.10: `${VAR-x}`, `${VAR+x}` (no colon: unset only), as
// later BuildKit takes them; 20.10 refused those with "missing ':' in
// substitution", so nothing that worked there reads differently here.
import { invalidParameter } from '../../errors.js';
import { type EscapeChar, goQuote, isSpace } from './words.js';

/** One word, expanded (BuildKit's ProcessWord). */
export function expandWord(word: string, env: readonly string[], esc: EscapeChar = '\\'): string {
  return new Lexer(word, env, esc).run().word;
}

/**
 * `text` expanded and split into words (BuildKit's ProcessWords): blanks outside
 * quotes separate words, including blanks a variable's value brings.
 */
export function expandWords(text: string, env: readonly string[], esc: EscapeChar = '\\'): string[] {
  return new Lexer(text, env, esc).run().words;
}

/**
 * A heredoc's body expanded as BuildKit's ExpandRaw does (SkipProcessQuotes):
 * variables replaced and escapes resolved, quotes kept as text.
 */
export function expandVariables(text: string, env: readonly string[], esc: EscapeChar = '\\'): string {
  return new Lexer(text, env, esc, true).run().word;
}

/** The env's `k=v` strings as a map; a later key wins, as BuildKit's BuildEnvs. */
function envMap(env: readonly string[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const e of env) {
    const eq = e.indexOf('=');
    if (eq < 0) out.set(e, '');
    else out.set(e.slice(0, eq), e.slice(eq + 1));
  }
  return out;
}

class Words {
  word = '';
  words: string[] = [];
  inWord = false;
  addChar(ch: string): void {
    if (isSpace(ch)) {
      if (this.inWord && this.word.length > 0) {
        this.words.push(this.word);
        this.word = '';
        this.inWord = false;
      }
    } else this.addRaw(ch);
  }
  addRaw(s: string): void {
    this.word += s;
    this.inWord = true;
  }
  addString(s: string): void {
    for (const ch of s) this.addChar(ch);
  }
  done(): string[] {
    if (this.word.length > 0) {
      this.words.push(this.word);
      this.word = '';
      this.inWord = false;
    }
    return this.words;
  }
}

const EOF = '';

class Lexer {
  private readonly chars: string[];
  private pos = 0;
  private readonly env: Map<string, string>;
  constructor(
    private readonly source: string,
    env: readonly string[],
    private readonly esc: EscapeChar,
    /** Quotes are text, not quoting (a heredoc's body). */
    private readonly quotesAreText = false,
  ) {
    this.chars = [...source];
    this.env = envMap(env);
  }

  run(): { word: string; words: string[] } {
    try {
      return this.until(EOF);
    } catch (e) {
      if (e instanceof LexError) throw invalidParameter(`failed to process ${goQuote(this.source)}: ${e.message}`);
      throw e;
    }
  }

  private peek(): string {
    return this.chars[this.pos] ?? EOF;
  }
  private next(): string {
    return this.chars[this.pos++] ?? EOF;
  }

  private until(stop: string): { word: string; words: string[] } {
    let result = '';
    const words = new Words();
    while (this.peek() !== EOF) {
      const ch = this.peek();
      if (stop !== EOF && ch === stop) {
        this.next();
        return { word: result, words: words.done() };
      }
      if (ch === '$' || ((ch === "'" || ch === '"') && !this.quotesAreText)) {
        const part = ch === "'" ? this.singleQuoted() : ch === '"' ? this.doubleQuoted() : this.dollar();
        result += part;
        if (ch === '$') words.addString(part);
        else words.addRaw(part);
        continue;
      }
      let c = this.next();
      if (c === this.esc) {
        c = this.next();
        if (c === EOF) break;
        words.addRaw(c);
      } else words.addChar(c);
      result += c;
    }
    if (stop !== EOF) throw new LexError(`unexpected end of statement while looking for matching ${stop}`);
    return { word: result, words: words.done() };
  }

  private singleQuoted(): string {
    this.next();
    let out = '';
    for (;;) {
      const ch = this.next();
      if (ch === EOF) throw new LexError('unexpected end of statement while looking for matching single-quote');
      if (ch === "'") return out;
      out += ch;
    }
  }

  private doubleQuoted(): string {
    this.next();
    let out = '';
    for (;;) {
      const ch = this.peek();
      if (ch === EOF) throw new LexError('unexpected end of statement while looking for matching double-quote');
      if (ch === '"') {
        this.next();
        return out;
      }
      if (ch === '$') {
        out += this.dollar();
        continue;
      }
      let c = this.next();
      if (c === this.esc) {
        const after = this.peek();
        if (after === EOF) continue;
        if (after === '"' || after === '$' || after === this.esc) c = this.next();
      }
      out += c;
    }
  }

  private dollar(): string {
    this.next();
    if (this.peek() !== '{') {
      const name = this.name();
      return name === '' ? '$' : (this.env.get(name) ?? '');
    }
    this.next();
    const first = this.peek();
    if (first === EOF) throw new LexError("syntax error: missing '}'");
    if (first === '{' || first === '}' || first === ':') throw new LexError('syntax error: bad substitution');
    const name = this.name();
    const value = this.env.get(name);
    const ch = this.next();
    if (ch === '}') return value ?? '';
    let colon = false;
    let modifier = ch;
    if (ch === ':') {
      colon = true;
      modifier = this.next();
    }
    if (modifier !== '-' && modifier !== '+' && modifier !== '?') {
      if (colon) throw new LexError(`unsupported modifier (${modifier}) in substitution`);
      throw new LexError("missing ':' in substitution");
    }
    const word = this.argument();
    // With a colon an empty value counts as unset, as in the shell.
    const unset = colon ? !value : value === undefined;
    switch (modifier) {
      case '-':
        return unset ? word : value!;
      case '+':
        return unset ? '' : word;
      default:
        if (value === undefined) throw new LexError(`${name}: ${word || 'is not allowed to be unset'}`);
        if (unset) throw new LexError(`${name}: ${word || 'is not allowed to be empty'}`);
        return value;
    }
  }

  /** The word of `${NAME:-word}`, itself expanded, up to the closing brace. */
  private argument(): string {
    try {
      return this.until('}').word;
    } catch (e) {
      if (e instanceof LexError && this.peek() === EOF) throw new LexError("syntax error: missing '}'");
      throw e;
    }
  }

  /** A variable name: digits, one special parameter, or letters, digits and `_`. */
  private name(): string {
    let name = '';
    while (this.peek() !== EOF) {
      const ch = this.peek();
      if (name === '' && /^\p{Nd}$/u.test(ch)) {
        while (/^\p{Nd}$/u.test(this.peek())) name += this.next();
        return name;
      }
      if (name === '' && '@*#?-$!0'.includes(ch)) return this.next();
      if (!/^[\p{L}\p{Nd}_]$/u.test(ch)) break;
      name += this.next();
    }
    return name;
  }
}

class LexError extends Error {}
