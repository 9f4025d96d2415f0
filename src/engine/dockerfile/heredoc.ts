// Here-documents (Dockerfile 1.4): `RUN <<EOF`, `COPY <<A <<B /dir/`. A RUN,
// COPY or ADD line (not in JSON form) names them with `<<WORD` words (`<<-WORD`
// takes leading tabs off the body and the terminator); the lines after it, up to
// a line that is the word alone, are each one's body, in order. As BuildKit's
// parser: the word with quotes in it (`<<'EOF'`, `<<"EOF"`) means a COPY body
// is not expanded; a body keeps its lines' newlines.
import { expandWords } from './expand.js';
import { parseWords } from './words.js';

export interface Heredoc {
  /** The word, quotes taken off: the terminator, and COPY's file name. */
  name: string;
  /** `<<-`: leading tabs of each body line are dropped (chompHeredoc) and the terminator may be indented by tabs. */
  chomp: boolean;
  /** No quotes in the word: a COPY body's variables are expanded. */
  expand: boolean;
  /** The body: each line with its newline (filled by the parser). */
  content: string;
}

const HEREDOC = /^(\d*)<<(-?)\s*([^<]*)$/;

/** A word as a heredoc's start (`<<EOF`, `<<-"EOF"`, `2<<EOF`), or null when it is none. */
export function parseHeredocWord(word: string): Heredoc | null {
  const m = HEREDOC.exec(word);
  const rest = m?.[3];
  if (!m || !rest) return null;
  let words: string[];
  try {
    words = expandWords(rest, [], '\\');
  } catch {
    return null;
  }
  if (words.length !== 1) return null;
  return { name: words[0]!, chomp: m[2] === '-', expand: !/(^|[^\\])['"]/.test(rest), content: '' };
}

/** The heredocs a logical line starts, in order of their words. */
export function heredocsOf(line: string): Heredoc[] {
  if (!line.includes('<<')) return [];
  const out: Heredoc[] = [];
  for (const w of parseWords(line, '\\')) {
    const h = parseHeredocWord(w);
    if (h) out.push(h);
  }
  return out;
}

/** `<<-`'s body: the tabs each line starts with taken off. */
export const chompHeredoc = (s: string): string => s.replace(/^\t+/gm, '');

/** A body's content as it is used: chomped for `<<-`. */
export const heredocBody = (h: Heredoc): string => (h.chomp ? chompHeredoc(h.content) : h.content);

/** BuildKit's summary of a heredoc in a RUN's vertex name: its first line, `...` when more follow. */
export function summarizeHeredoc(doc: string): string {
  const lines = doc.trim().replaceAll('\r\n', '\n').split('\n');
  return lines[0]! + (lines.length > 1 ? '...' : '');
}
