// .dockerignore and the path patterns Docker uses for it and for COPY/ADD
// wildcards, with Go's semantics rather than a glob library's: the CLI and
// dockerd decide with Go's filepath.Match and moby's patternmatcher, and a
// context must give the same files here as there.
//
// - readIgnoreFile: moby's ignorefile.ReadAll (BOM, `#` comments only at the
//   start of a line, trimmed, cleaned, leading `/` dropped, `!` exceptions).
// - PatternMatcher: moby/patternmatcher (the CLI's): `*` and `?` stop at `/`,
//   `**` crosses directories, a pattern matching a parent excludes its
//   children (MatchesOrParentMatches), the last matching pattern wins.
// - goMatch: Go's path/filepath.Match, with its errors (COPY's wildcards).
import { posix } from 'node:path';
import { invalidParameter } from '../../errors.js';

/** Go's filepath.ErrBadPattern text. */
const BAD_PATTERN = 'syntax error in pattern';

/** Go's filepath.Clean for '/'-separated paths. */
export function goClean(p: string): string {
  if (p === '') return '.';
  const out = posix.normalize(p);
  return out.length > 1 && out.endsWith('/') ? out.slice(0, -1) : out;
}

/** The patterns of a .dockerignore file's text, as ignorefile.ReadAll gives them. */
export function readIgnoreFile(text: string): string[] {
  const out: string[] = [];
  // bufio.Scanner's lines: split at \n, a \r before it dropped.
  const lines = text.split('\n').map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l));
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  lines.forEach((line, i) => {
    let pattern = i === 0 && line.startsWith('\uFEFF') ? line.slice(1) : line;
    if (pattern.startsWith('#')) return;
    pattern = goTrimSpace(pattern);
    if (pattern === '') return;
    const invert = pattern[0] === '!';
    if (invert) pattern = goTrimSpace(pattern.slice(1));
    if (pattern.length > 0) {
      pattern = goClean(pattern);
      if (pattern.length > 1 && pattern[0] === '/') pattern = pattern.slice(1);
    }
    out.push(invert ? `!${pattern}` : pattern);
  });
  return out;
}

/** strings.TrimSpace: Unicode white space at both ends. */
const goTrimSpace = (s: string): string => s.replace(/^[\s\u0085]+|[\s\u0085]+$/gu, '');

type MatchType = 'exact' | 'prefix' | 'suffix' | 'regexp';

interface Pattern {
  cleaned: string;
  exclusion: boolean;
  type: MatchType;
  regexp?: RegExp;
}

/** Characters a regexp would read as syntax but filepath.Match takes literally (patternmatcher's shouldEscape). */
const ESCAPED = new Set(['.', '+', '(', ')', '|', '{', '}', '$']);

/** moby/patternmatcher's PatternMatcher. */
export class PatternMatcher {
  readonly patterns: readonly Pattern[];
  readonly exclusions: boolean;

  /** Throws invalidParameter for a pattern Go would refuse (dockerd's words). */
  constructor(patterns: readonly string[]) {
    const out: Pattern[] = [];
    let exclusions = false;
    for (const raw of patterns) {
      let p = goTrimSpace(raw);
      if (p === '') continue;
      p = goClean(p);
      let exclusion = false;
      if (p[0] === '!') {
        if (p.length === 1) throw invalidParameter('illegal exclusion pattern: "!"');
        exclusion = true;
        exclusions = true;
        p = p.slice(1);
      }
      goMatch(p, '.'); // its syntax errors, as patternmatcher checks them
      out.push(compile(p, exclusion));
    }
    this.patterns = out;
    this.exclusions = exclusions;
  }

  /** MatchesOrParentMatches: whether `file` (a '/'-separated path) is excluded. */
  matches(file: string): boolean {
    let matched = false;
    const parent = posix.dirname(file);
    const parentDirs = parent.split('/');
    for (const p of this.patterns) {
      // An inclusion cannot change a match, nor an exclusion a non-match.
      if (p.exclusion !== matched) continue;
      let match = matchOne(p, file);
      if (!match && parent !== '.') {
        for (let i = 0; i < parentDirs.length && !match; i++) match = matchOne(p, parentDirs.slice(0, i + 1).join('/'));
      }
      if (match) matched = !p.exclusion;
    }
    return matched;
  }
}

/**
 * A matcher for a context's .dockerignore patterns: `excluded(rel)` as the
 * CLI decides what to send. Besides the patterns, its walk (archive's
 * TarWithOptions) never enters an excluded directory unless an exception
 * pattern starts with that directory's path: with `docs` and `!docs/keep`
 * docs/keep is sent; with `docs` and an exception that starts with `**`, it
 * is not.
 */
export function ignoreMatcher(patterns: readonly string[]): (rel: string) => boolean {
  if (patterns.length === 0) return () => false;
  const pm = new PatternMatcher(patterns);
  const exceptions = pm.patterns.filter((p) => p.exclusion).map((p) => `${p.cleaned}/`);
  /** The CLI's walk skips this excluded directory whole. */
  const skipped = (dir: string) => pm.matches(dir) && !exceptions.some((e) => e.startsWith(`${dir}/`));
  return (rel: string) => {
    const file = goClean(rel);
    if (file === '.') return false; // the context root itself is never excluded
    const parts = file.split('/');
    for (let i = 1; i < parts.length; i++) if (skipped(parts.slice(0, i).join('/'))) return true;
    return pm.matches(file);
  };
}

function matchOne(p: Pattern, path: string): boolean {
  switch (p.type) {
    case 'exact':
      return path === p.cleaned;
    case 'prefix':
      return path.startsWith(p.cleaned.slice(0, -2));
    case 'suffix': {
      const suffix = p.cleaned.slice(2);
      if (path.endsWith(suffix)) return true;
      return suffix[0] === '/' && path === suffix.slice(1);
    }
    case 'regexp':
      if (!p.regexp) throw invalidParameter(BAD_PATTERN);
      return p.regexp.test(path);
  }
}

/** patternmatcher's compile: the pattern as a match type, and as a regular expression when it needs one. */
function compile(cleaned: string, exclusion: boolean): Pattern {
  const chars = Array.from(cleaned);
  let re = '^';
  let type: MatchType = 'exact';
  for (let i = 0, at = 0; at < chars.length; i++) {
    const ch = chars[at++]!;
    if (ch === '*') {
      if (chars[at] === '*') {
        at++;
        if (chars[at] === '/') at++; // `**/` is `**`
        if (at >= chars.length) {
          if (type === 'exact') type = 'prefix';
          else {
            re += '.*';
            type = 'regexp';
          }
        } else {
          re += '(.*/)?';
          type = 'regexp';
        }
        if (i === 0) type = 'suffix';
      } else {
        re += '[^/]*';
        type = 'regexp';
      }
    } else if (ch === '?') {
      re += '[^/]';
      type = 'regexp';
    } else if (ESCAPED.has(ch)) {
      re += `\\${ch}`;
    } else if (ch === '\\') {
      if (at < chars.length) {
        re += `\\${chars[at++]!}`;
        type = 'regexp';
      } else re += '\\\\';
    } else if (ch === '[' || ch === ']') {
      re += ch;
      type = 'regexp';
    } else {
      re += ch;
    }
  }
  const p: Pattern = { cleaned, exclusion, type };
  if (type === 'regexp') {
    try {
      p.regexp = new RegExp(`${re}$`, 'u');
    } catch {
      // Go's regexp refused it too, in the cases that matter: the pattern never matches and says so when used.
    }
  }
  return p;
}

// ---- Go's filepath.Match ----------------------------------------------------

/** Whether `name` matches the shell pattern `pattern`; throws invalidParameter on a malformed pattern. */
export function goMatch(pattern: string, name: string): boolean {
  let pat = Array.from(pattern);
  let s = Array.from(name);
  outer: while (pat.length > 0) {
    const { star, chunk, rest } = scanChunk(pat);
    pat = rest;
    if (star && chunk.length === 0) return !s.includes('/'); // a trailing `*` takes what is left of this segment
    const first = matchChunk(chunk, s);
    if (first !== null && (first.length === 0 || pat.length > 0)) {
      s = first;
      continue;
    }
    if (star) {
      // `*` takes as much as it must, never a `/`.
      for (let i = 0; i < s.length && s[i] !== '/'; i++) {
        const t = matchChunk(chunk, s.slice(i + 1));
        if (t !== null) {
          if (pat.length === 0 && t.length > 0) continue;
          s = t;
          continue outer;
        }
      }
    }
    // No match; but a malformed rest of the pattern is still an error, as Go reports it.
    while (pat.length > 0) {
      const next = scanChunk(pat);
      pat = next.rest;
      matchChunk(next.chunk, []);
    }
    return false;
  }
  return s.length === 0;
}

function scanChunk(pattern: string[]): { star: boolean; chunk: string[]; rest: string[] } {
  let star = false;
  let at = 0;
  while (at < pattern.length && pattern[at] === '*') {
    at++;
    star = true;
  }
  let inRange = false;
  let i = at;
  scan: for (; i < pattern.length; i++) {
    switch (pattern[i]) {
      case '\\':
        if (i + 1 < pattern.length) i++;
        break;
      case '[':
        inRange = true;
        break;
      case ']':
        inRange = false;
        break;
      case '*':
        if (!inRange) break scan;
        break;
    }
  }
  return { star, chunk: pattern.slice(at, i), rest: pattern.slice(i) };
}

/** The rest of `s` once `chunk` (no `*` outside ranges) has matched its start; null when it does not. */
function matchChunk(chunkIn: string[], sIn: string[]): string[] | null {
  let chunk = chunkIn;
  let s = sIn;
  let failed = false;
  while (chunk.length > 0) {
    if (!failed && s.length === 0) failed = true;
    const c = chunk[0]!;
    if (c === '[') {
      let r = -1;
      if (!failed) {
        r = s[0]!.codePointAt(0)!;
        s = s.slice(1);
      }
      chunk = chunk.slice(1);
      let negated = false;
      if (chunk[0] === '^') {
        negated = true;
        chunk = chunk.slice(1);
      }
      let match = false;
      let nrange = 0;
      for (;;) {
        if (chunk.length > 0 && chunk[0] === ']' && nrange > 0) {
          chunk = chunk.slice(1);
          break;
        }
        const lo = getEsc(chunk);
        chunk = lo.rest;
        let hi = lo.r;
        if (chunk[0] === '-') {
          const h = getEsc(chunk.slice(1));
          hi = h.r;
          chunk = h.rest;
        }
        if (lo.r <= r && r <= hi) match = true;
        nrange++;
      }
      if (match === negated) failed = true;
    } else if (c === '?') {
      if (!failed) {
        if (s[0] === '/') failed = true;
        s = s.slice(1);
      }
      chunk = chunk.slice(1);
    } else {
      if (c === '\\') {
        chunk = chunk.slice(1);
        if (chunk.length === 0) throw invalidParameter(BAD_PATTERN);
      }
      if (!failed) {
        if (chunk[0] !== s[0]) failed = true;
        s = s.slice(1);
      }
      chunk = chunk.slice(1);
    }
  }
  return failed ? null : s;
}

function getEsc(chunkIn: string[]): { r: number; rest: string[] } {
  let chunk = chunkIn;
  if (chunk.length === 0 || chunk[0] === '-' || chunk[0] === ']') throw invalidParameter(BAD_PATTERN);
  if (chunk[0] === '\\') {
    chunk = chunk.slice(1);
    if (chunk.length === 0) throw invalidParameter(BAD_PATTERN);
  }
  const r = chunk[0]!.codePointAt(0)!;
  const rest = chunk.slice(1);
  if (rest.length === 0) throw invalidParameter(BAD_PATTERN);
  return { r, rest };
}

/** Whether a COPY/ADD source has wildcards (moby's containsWildcards: a `\` escapes the next character). */
export function containsWildcards(name: string): boolean {
  for (let i = 0; i < name.length; i++) {
    const ch = name[i];
    if (ch === '\\') i++;
    else if (ch === '*' || ch === '?' || ch === '[') return true;
  }
  return false;
}
