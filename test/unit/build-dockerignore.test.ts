// .dockerignore and COPY wildcards with Go's semantics: cases from moby's
// patternmatcher and ignorefile tests and Go's filepath.Match tests.
import { describe, expect, it } from 'vitest';
import {
  containsWildcards,
  goClean,
  goMatch,
  ignoreMatcher,
  PatternMatcher,
  readIgnoreFile,
} from '../../src/engine/builder/dockerignore.js';

describe('readIgnoreFile (ignorefile.ReadAll)', () => {
  it('drops comments, blank lines and a BOM; trims, cleans, drops a leading /, keeps ! exceptions', () => {
    const text = '\uFEFF# comment\n  \n/foo/bar\n  a/../b/  \r\n!  /keep/me \n  # not a comment\n**/*.go\n!\n';
    expect(readIgnoreFile(text)).toEqual(['foo/bar', 'b', '!keep/me', '# not a comment', '**/*.go', '!']);
  });

  it('keeps "/" and cleans "./" away', () => {
    expect(readIgnoreFile('/\n./x\n.\n')).toEqual(['/', 'x', '.']);
  });
});

describe('PatternMatcher (patternmatcher MatchesOrParentMatches)', () => {
  const cases: Array<[string, string, boolean]> = [
    ['fileutils.go', 'fileutils.go', true],
    ['*.go', 'fileutils.go', true],
    ['*.go', 'a/fileutils.go', false],
    ['**/*.go', 'a/b/fileutils.go', true],
    ['**/*.go', 'fileutils.go', true],
    ['**', 'anything/at/all', true],
    ['**/foo', 'foo', true],
    ['**/foo', 'a/b/foo', true],
    ['**/foo', 'a/b/xfoo', false],
    ['foo/**', 'foo', false],
    ['foo/**', 'foo/x/y', true],
    ['foo/**/bar', 'foo/bar', true],
    ['foo/**/bar', 'foo/a/b/bar', true],
    ['dir', 'dir/sub/file', true], // a parent that matches excludes its children
    ['d*', 'dir/sub/file', true],
    ['sub', 'dir/sub/file', false], // patterns are anchored at the context root
    ['a?c', 'abc', true],
    ['a?c', 'a/c', false],
    ['[a-c]x', 'bx', true],
    ['[^a-c]x', 'dx', true],
    ['a.b', 'axb', false],
    ['a+b', 'a+b', true],
    ['a+b', 'aab', false],
    ['a\\*b', 'a*b', true],
    ['a\\*b', 'axb', false],
    ['.git', '.git/HEAD', true],
  ];
  for (const [pattern, file, want] of cases) {
    it(`${JSON.stringify(pattern)} ${want ? 'matches' : 'does not match'} ${JSON.stringify(file)}`, () => {
      expect(new PatternMatcher([pattern]).matches(file)).toBe(want);
    });
  }

  it('the last matching pattern wins; ! re-includes', () => {
    const excluded = ignoreMatcher(['*.md', '!README.md', 'docs', '!docs/keep.txt']);
    expect(excluded('CHANGES.md')).toBe(true);
    expect(excluded('README.md')).toBe(false);
    expect(excluded('docs/a.txt')).toBe(true);
    expect(excluded('docs/keep.txt')).toBe(false);
    expect(excluded('src/x.ts')).toBe(false);
  });

  it("an excluded directory's files come back only through an exception naming its path (the CLI's walk)", () => {
    const byPrefix = ignoreMatcher(['docs', '!docs/keep.txt']);
    expect(byPrefix('docs/keep.txt')).toBe(false);
    expect(byPrefix('docs/other.txt')).toBe(true);
    const anywhere = ignoreMatcher(['docs', '!**/keep.txt']);
    expect(anywhere('docs/keep.txt')).toBe(true); // the CLI never walks into docs
    expect(anywhere('src/keep.txt')).toBe(false);
    const deep = ignoreMatcher(['a', '!a/b/c']);
    expect(deep('a/b/c')).toBe(false);
    expect(deep('a/b/d')).toBe(true);
    expect(deep('a/x')).toBe(true);
  });

  it('never excludes the context root', () => {
    expect(ignoreMatcher(['*', '**'])('.')).toBe(false);
    expect(ignoreMatcher(['**'])('./')).toBe(false);
  });

  it('refuses a lone ! and a malformed pattern as dockerd does', () => {
    expect(() => new PatternMatcher(['!'])).toThrow('illegal exclusion pattern: "!"');
    expect(() => new PatternMatcher(['[a-'])).toThrow('syntax error in pattern');
    expect(() => new PatternMatcher(['a\\'])).toThrow('syntax error in pattern');
  });
});

describe('goMatch (Go filepath.Match)', () => {
  const cases: Array<[string, string, boolean | 'error']> = [
    ['abc', 'abc', true],
    ['*', 'abc', true],
    ['*c', 'abc', true],
    ['a*', 'a', true],
    ['a*', 'abc', true],
    ['a*', 'ab/c', false],
    ['a*/b', 'abc/b', true],
    ['a*/b', 'a/c/b', false],
    ['a*b*c*d*e*/f', 'axbxcxdxe/f', true],
    ['a*b*c*d*e*/f', 'axbxcxdxexxx/f', true],
    ['a*b*c*d*e*/f', 'axbxcxdxe/xxx/f', false],
    ['a*b?c*x', 'abxbbxdbxebxczzx', true],
    ['a*b?c*x', 'abxbbxdbxebxczzy', false],
    ['ab[c]', 'abc', true],
    ['ab[b-d]', 'abc', true],
    ['ab[e-g]', 'abc', false],
    ['ab[^c]', 'abc', false],
    ['ab[^b-d]', 'abe', true],
    ['a\\*b', 'a*b', true],
    ['a\\*b', 'ab', false],
    ['a?b', 'a☺b', true],
    ['a[^a]b', 'a☺b', true],
    ['a???b', 'a☺b', false],
    ['[a-ζ]*', 'α', true],
    ['*[a-ζ]', 'A', false],
    ['a?b', 'a/b', false],
    ['a*b', 'a/b', false],
    ['[\\]a]', ']', true],
    ['[\\-]', '-', true],
    ['[x\\-]', 'x', true],
    ['[', 'a', 'error'],
    ['[^', 'a', 'error'],
    ['[^bc', 'a', 'error'],
    ['a[', 'a', 'error'],
    ['a[', 'ab', 'error'],
    ['a[', 'x', 'error'],
    ['a/b[', 'x', 'error'],
    ['*x', 'xxx', true],
    ['[]a]', ']', 'error'],
    ['[-]', '-', 'error'],
    ['[x-]', 'x', 'error'],
    ['\\', 'a', 'error'],
  ];
  for (const [pattern, name, want] of cases) {
    it(`${JSON.stringify(pattern)} on ${JSON.stringify(name)} → ${want}`, () => {
      if (want === 'error') expect(() => goMatch(pattern, name)).toThrow('syntax error in pattern');
      else expect(goMatch(pattern, name)).toBe(want);
    });
  }

  it('containsWildcards honours \\ escapes; goClean is filepath.Clean', () => {
    expect(containsWildcards('a*')).toBe(true);
    expect(containsWildcards('a\\*')).toBe(false);
    expect(containsWildcards('f[12]')).toBe(true);
    expect(containsWildcards('plain/name')).toBe(false);
    expect(goClean('')).toBe('.');
    expect(goClean('a/b/../c/')).toBe('a/c');
    expect(goClean('/../x')).toBe('/x');
    expect(goClean('../../x')).toBe('../../x');
  });
});
