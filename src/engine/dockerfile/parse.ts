// The Dockerfile's lines into nodes, as dockerd 20.10's parser (BuildKit's
// frontend/dockerfile/parser, vendored) reads them: parser directives at the
// top, comments, continuations with the escape character, flags, and each
// command's own split of its arguments (JSON array or shell form, name=value
// pairs, whitespace-separated words). Unknown commands are kept here and
// refused by parseInstruction, as dockerd refuses them in instructions.Parse.
import { invalidParameter } from '../../errors.js';
import { type Heredoc, heredocsOf } from './heredoc.js';
import { type EscapeChar, goQuote, isSpace, parseWords, trimLeft, trimSpace } from './words.js';

export { type EscapeChar, goQuote, isSpace, parseWords, trimSpace } from './words.js';

export interface Node {
  /** Lower case. */
  command: string;
  /** Raw, as written: `--from=x`. */
  flags: string[];
  /** The text after the command and its flags, continuation-joined, trimmed. */
  rest: string;
  /** The whole logical line, continuations joined. */
  original: string;
  /** First and last physical line, from 1. */
  startLine: number;
  endLine: number;
  /** The JSON array when the command takes one and `rest` (HEALTHCHECK: after its type) is one. */
  json: string[] | null;
  /**
   * The arguments as dockerd's line parser splits them for this command: the JSON
   * array or `[rest]` (RUN CMD ENTRYPOINT SHELL), the array or whitespace-separated
   * words (COPY ADD VOLUME), `[k, v, k, v…]` with quotes kept (ENV LABEL), quote-aware
   * words (ARG), whitespace words (FROM EXPOSE), `[rest]` (USER WORKDIR STOPSIGNAL
   * MAINTAINER), `[type, …command]` (HEALTHCHECK), `[trigger command, …its args]` (ONBUILD).
   */
  args: string[];
  /** ONBUILD's trigger, parsed as a line of its own. */
  trigger?: Node;
  /** The file's escape character, for expanding this node's words. */
  escape: EscapeChar;
  /** RUN, COPY, ADD: the here-documents its line starts, with their bodies (the lines after it). */
  heredocs?: Heredoc[];
}

export interface Dockerfile {
  escape: EscapeChar;
  /** Lower-cased names (`escape`, `syntax`) to their values. */
  directives: Map<string, string>;
  nodes: Node[];
  /** dockerd's notices about empty continuation lines, to print before the build. */
  warnings: string[];
}

export interface ParseOptions {
  /** The Dockerfile's name: errors then read "failed to parse <name>: …", as dockerd's build says them. */
  name?: string;
}

const DIRECTIVE = /^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$/;
const KNOWN_DIRECTIVES = new Set(['escape', 'syntax']);
const WHITESPACE = /[\t\v\f\r ]+/;
/** bufio.MaxScanTokenSize. */
const MAX_LINE = 64 * 1024;
const NOT_STRINGS = 'when using JSON array syntax, arrays must be comprised of strings only';

/**
 * Parses a Dockerfile. Throws invalidParameter with dockerd's wording for what its
 * parser refuses (bad directives, non-string JSON arrays, `ENV` without a value,
 * "file with no instructions").
 */
export function parseDockerfile(text: string, opts: ParseOptions = {}): Dockerfile {
  try {
    return parse(text);
  } catch (e) {
    if (opts.name && e instanceof Error) throw invalidParameter(`failed to parse ${opts.name}: ${e.message}`);
    throw e;
  }
}

function parse(text: string): Dockerfile {
  let esc: EscapeChar = '\\';
  let continuation = continuationRegex(esc);
  const directives = new Map<string, string>();
  let directivesDone = false;
  // Directives are read only from the top: the first line that is not one ends them.
  const directive = (line: string): void => {
    if (directivesDone) return;
    const m = DIRECTIVE.exec(line);
    const key = m?.[1]?.toLowerCase();
    if (!m || !key || !KNOWN_DIRECTIVES.has(key)) {
      directivesDone = true;
      return;
    }
    if (directives.has(key)) throw invalidParameter(`only one ${key} parser directive can be used`);
    directives.set(key, m[2]!);
    if (key === 'escape') {
      if (m[2] !== '`' && m[2] !== '\\')
        throw invalidParameter(`invalid escape token '${m[2]}' does not match \` or \\`);
      esc = m[2];
      continuation = continuationRegex(esc);
    }
  };
  const isComment = (line: string) => trimLeft(line).startsWith('#');
  // A trailing escape (not itself escaped) continues the line; it and the blanks after it go.
  const trimContinuation = (line: string): [string, boolean] =>
    continuation.test(line) ? [line.replace(continuation, '$1'), false] : [line, true];

  // bufio.Scanner's lines: split on \n, one trailing \r dropped, no empty last line.
  const lines = text.split('\n').map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l));
  if (lines.at(-1) === '') lines.pop();
  // The scanner's buffer holds a line and its newline (a UTF-16 unit is at most three bytes).
  for (const l of lines)
    if (l.length * 3 >= MAX_LINE && Buffer.byteLength(l) >= MAX_LINE)
      throw invalidParameter(`dockerfile line greater than max allowed size of ${MAX_LINE - 1}`);
  if (lines.length > 0) lines[0] = lines[0]!.replace(/^\uFEFF/, '');

  const nodes: Node[] = [];
  const warnings: string[] = [];
  let at = 0;
  while (at < lines.length) {
    const first = trimLeft(lines[at]!);
    directive(first);
    at++;
    const startLine = at;
    let [line, ended] = trimContinuation(isComment(first) ? '' : first);
    if (ended && line === '') continue;
    let emptyContinuation = false;
    while (!ended && at < lines.length) {
      const raw = lines[at]!;
      directive(raw);
      at++;
      if (isComment(raw)) continue;
      if (trimLeft(raw) === '') {
        emptyContinuation = true;
        continue;
      }
      const [more, end] = trimContinuation(raw);
      line += more;
      ended = end;
    }
    if (emptyContinuation) warnings.push(`[WARNING]: Empty continuation line found in:\n    ${line}`);
    const node = nodeFromLine(line, esc, startLine, at);
    if (HEREDOC_COMMANDS.has(node.command) && node.json === null) {
      const docs = heredocsOf(line);
      for (const doc of docs) at = readHeredoc(doc, lines, at);
      if (docs.length) {
        node.heredocs = docs;
        node.endLine = at;
      }
    }
    nodes.push(node);
  }
  if (warnings.length > 0) warnings.push('[WARNING]: Empty continuation lines will become errors in a future release.');
  if (nodes.length === 0) throw invalidParameter('file with no instructions');
  return { escape: esc, directives, nodes, warnings };
}

const HEREDOC_COMMANDS = new Set(['run', 'copy', 'add']);

/** Fills a heredoc's body from `lines[at…]` up to its terminator line; returns the index after it. */
function readHeredoc(doc: Heredoc, lines: readonly string[], at: number): number {
  let i = at;
  for (; i < lines.length; i++) {
    const line = lines[i]!;
    if ((doc.chomp ? line.replace(/^\t+/, '') : line) === doc.name) {
      doc.content = lines
        .slice(at, i)
        .map((l) => `${l}\n`)
        .join('');
      return i + 1;
    }
  }
  throw invalidParameter('unterminated heredoc');
}

function continuationRegex(esc: EscapeChar): RegExp {
  const e = esc === '\\' ? '\\\\' : '`';
  return new RegExp(`([^${e}])${e}[ \\t]*$|^${e}[ \\t]*$`);
}

/** One logical line into a node; `startLine`/`endLine` from 1. Also used for ONBUILD triggers. */
export function nodeFromLine(line: string, esc: EscapeChar, startLine: number, endLine: number): Node {
  const trimmed = trimSpace(line);
  const split = WHITESPACE.exec(trimmed);
  const command = (split ? trimmed.slice(0, split.index) : trimmed).toLowerCase();
  let rest = '';
  let flags: string[] = [];
  if (split) [rest, flags] = extractFlags(trimmed.slice(split.index + split[0].length));
  rest = trimSpace(rest);
  const node: Node = { command, flags, rest, original: line, startLine, endLine, json: null, args: [], escape: esc };
  splitArgs(node);
  return node;
}

/** Leading `--name[=value]` words, with quotes and `\` resolved as dockerd's extractBuilderFlags does. */
function extractFlags(line: string): [string, string[]] {
  const words: string[] = [];
  let pos = 0;
  for (;;) {
    while (pos < line.length && isSpace(line[pos]!)) pos++;
    if (pos >= line.length) return ['', words];
    if (!line.startsWith('--', pos)) return [line.slice(pos), words];
    let word = '';
    let quote = '';
    let blankOK = false;
    for (;;) {
      if (pos >= line.length) {
        if (word !== '--' && (blankOK || word.length > 0)) words.push(word);
        return ['', words];
      }
      let ch = line[pos]!;
      if (quote === '') {
        if (isSpace(ch)) {
          if (word === '--') return [line.slice(pos), words];
          if (blankOK || word.length > 0) words.push(word);
          break;
        }
        if (ch === "'" || ch === '"') {
          quote = ch;
          blankOK = true;
          pos++;
          continue;
        }
        if (ch === '\\') {
          if (pos + 1 === line.length) {
            pos++;
            continue;
          }
          ch = line[++pos]!;
        }
        word += ch;
        pos++;
        continue;
      }
      if (ch === quote) {
        quote = '';
        pos++;
        continue;
      }
      if (ch === '\\') {
        if (pos + 1 === line.length) {
          quote = '';
          pos++;
          continue;
        }
        ch = line[++pos]!;
      }
      word += ch;
      pos++;
    }
  }
}

/** Each command's own split of its arguments (dockerd's line parsers). */
function splitArgs(node: Node): void {
  const { rest } = node;
  switch (node.command) {
    case 'run':
    case 'cmd':
    case 'entrypoint':
    case 'shell':
      maybeJson(node, rest);
      return;
    case 'copy':
    case 'add':
    case 'volume': {
      const json = jsonArray(rest);
      if (json) {
        node.json = json;
        node.args = json;
      } else node.args = whitespaceWords(rest);
      return;
    }
    case 'env':
    case 'label':
      node.args = nameValues(rest, node.command.toUpperCase(), node.escape);
      return;
    case 'arg':
      node.args = parseWords(rest, node.escape);
      return;
    case 'from':
    case 'expose':
      node.args = whitespaceWords(rest);
      return;
    case 'user':
    case 'workdir':
    case 'stopsignal':
    case 'maintainer':
      node.args = rest === '' ? [] : [rest];
      return;
    case 'healthcheck': {
      let sep = 0;
      while (sep < rest.length && !isSpace(rest[sep]!)) sep++;
      if (sep === 0) return;
      const type = rest.slice(0, sep);
      const sub: Node = { ...node, args: [] };
      maybeJson(sub, trimLeft(rest.slice(sep)));
      node.json = sub.json;
      node.args = [type, ...sub.args];
      return;
    }
    case 'onbuild':
      if (rest === '') return;
      node.trigger = nodeFromLine(rest, node.escape, node.startLine, node.endLine);
      node.args = [node.trigger.command, ...node.trigger.args];
      return;
    default:
      // Unknown: kept, refused by parseInstruction.
      return;
  }
}

function maybeJson(node: Node, rest: string): void {
  if (rest === '') return;
  const json = jsonArray(rest);
  node.json = json;
  node.args = json ?? [rest];
}

const whitespaceWords = (rest: string): string[] => (rest === '' ? [] : rest.split(WHITESPACE));

/**
 * The JSON array `rest` starts with, or null when it does not start with one (the
 * shell form then). As Go's json.Decoder, only the first value is read: text after
 * the array's `]` is ignored. Elements other than strings are refused.
 */
export function jsonArray(rest: string): string[] | null {
  const s = trimLeft(rest);
  if (!s.startsWith('[')) return null;
  const end = jsonValueEnd(s);
  if (end < 0) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(s.slice(0, end));
  } catch {
    return null;
  }
  if (!Array.isArray(parsed)) return null;
  if (!parsed.every((x) => typeof x === 'string')) throw invalidParameter(NOT_STRINGS);
  return parsed;
}

/** Where the bracketed value at the start of `s` ends (after its closing bracket), or -1. */
function jsonValueEnd(s: string): number {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < s.length; i++) {
    const ch = s[i]!;
    if (inString) {
      if (ch === '\\') i++;
      else if (ch === '"') inString = false;
    } else if (ch === '"') inString = true;
    else if (ch === '[' || ch === '{') depth++;
    else if (ch === ']' || ch === '}') {
      if (--depth === 0) return i + 1;
    }
  }
  return -1;
}

/** ENV/LABEL: `k=v k2="v 2"` (quotes kept for expansion), or the legacy `k rest of line`; flat [k, v, …]. */
function nameValues(rest: string, cmd: string, esc: EscapeChar): string[] {
  const words = parseWords(rest, esc);
  if (words.length === 0) return [];
  if (!words[0]!.includes('=')) {
    const split = WHITESPACE.exec(rest);
    if (!split) throw invalidParameter(`${cmd} must have two arguments`);
    return [rest.slice(0, split.index), rest.slice(split.index + split[0].length)];
  }
  const out: string[] = [];
  for (const w of words) {
    const eq = w.indexOf('=');
    if (eq < 0) throw invalidParameter(`Syntax error - can't find = in ${goQuote(w)}. Must be of the form: name=value`);
    out.push(w.slice(0, eq), w.slice(eq + 1));
  }
  return out;
}
