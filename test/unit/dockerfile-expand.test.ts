// Word expansion against dockerd's (BuildKit shell.Lex): quotes, escapes,
// the substitution forms, special and positional parameters, and the word
// splitting of ProcessWords.
import { describe, expect, it } from 'vitest';
import { expandWord, expandWords } from '../../src/engine/dockerfile/index.js';
import { isEngineError } from '../../src/errors.js';

const env = ['HOME=/home', 'SH=bash', 'EMPTY=', 'KO=한국어', 'SPACED=  a  b  '];

describe('expandWord', () => {
  it.each([
    ['plain', 'plain'],
    ["he'll'o", 'hello'],
    ["he\\'llo", "he'llo"],
    ['abc\\tdef', 'abctdef'],
    ['"abc\\tdef"', 'abc\\tdef'],
    ['"abc\\\\tdef"', 'abc\\tdef'],
    ["'abc\\tdef'", 'abc\\tdef'],
    ['trailing\\', 'trailing'],
    ['trailing\\\\', 'trailing\\'],
    ['"a\'b"', "a'b"],
    ["'x\\'", 'x\\'],
    ['"\'\'"', "''"],
    ['$.', '$.'],
    ['a$1b', 'ab'],
    ['a$HOME', 'a/home'],
    ['a\\$HOME', 'a$HOME'],
    ['a\\\\$HOME', 'a\\/home'],
    ['"a\\$HOME"', 'a$HOME'],
    ['"a\\\\$HOME"', 'a\\/home'],
    ['\\${}', '${}'],
    ['a${nope}b', 'ab'],
    ['${HOME}', '/home'],
    ['${NOPE:-d}', 'd'],
    ['${EMPTY:-d}', 'd'],
    ['${HOME:-d}', '/home'],
    ['${NOPE:-$HOME}', '/home'],
    ['${NOPE:-${NADA:-deep}}', 'deep'],
    ['${NOPE:+x}', ''],
    ['${EMPTY:+x}', ''],
    ['${HOME:+${SH}}', 'bash'],
    ['${HOME:+${HOME}:}', '/home:'],
    ['${NOPE:-\\$HOME:}', '$HOME:'],
    ['${NOPE:-\\${HOME}z}', '${HOMEz}'],
    ['${NOPE:-a {b}', 'a {b'],
    ['${NOPE:-x}}', 'x}'],
    ['${HOME?}', '/home'],
    ['${EMPTY?}', ''],
    ['${HOME:?}', '/home'],
    ["'${HOME}'", '${HOME}'],
    ['"$HOME"', '/home'],
    ['"a\'$HOME\'"', "a'/home'"],
    ['$KO', '한국어'],
    ["안'녕'", '안녕'],
    // Positional and special parameters are never set.
    ['$1', ''],
    ['${999:-b}a', 'ba'],
    ['$001a', 'a'],
    ['$@@@', '@@'],
    ['${#:-b}', 'b'],
    ['$$', ''],
    ['${0:+b}', ''],
    // Later BuildKit's colon-less forms: unset only.
    ['${EMPTY-d}', ''],
    ['${NOPE-d}', 'd'],
    ['${EMPTY+x}', 'x'],
    ['${NOPE+x}', ''],
  ])('%s → %s', (word, out) => expect(expandWord(word, env)).toBe(out));

  it.each([
    ["he'llo", 'unexpected end of statement while looking for matching single-quote'],
    ['"hello', 'unexpected end of statement while looking for matching double-quote'],
    ['"hello\\"', 'unexpected end of statement while looking for matching double-quote'],
    ['${}', 'syntax error: bad substitution'],
    ['${:-x}', 'syntax error: bad substitution'],
    ['${{a}', 'syntax error: bad substitution'],
    ['${', "syntax error: missing '}'"],
    ['${a:-b', "syntax error: missing '}'"],
    ['${a:-b ${foo}', "syntax error: missing '}'"],
    ['${.}', "missing ':' in substitution"],
    ['${HOME', "missing ':' in substitution"],
    ['${a:b}', 'unsupported modifier (b) in substitution'],
    ['${a:=b}', 'unsupported modifier (=) in substitution'],
    ['${NOPE?}', 'NOPE: is not allowed to be unset'],
    ['${NOPE:?set it}', 'NOPE: set it'],
    ['${EMPTY:?}', 'EMPTY: is not allowed to be empty'],
  ])('refuses %s: %s', (word, message) => {
    try {
      expandWord(word, env);
    } catch (e) {
      expect(isEngineError(e, 'invalid')).toBe(true);
      expect((e as Error).message).toBe(`failed to process ${JSON.stringify(word)}: ${message}`);
      return;
    }
    throw new Error('expected a refusal');
  });

  it('takes the escape character given (`# escape=``)', () => {
    expect(expandWord('a`$HOME\\b', env, '`')).toBe('a$HOME\\b');
    expect(expandWord('"x`"y"', env, '`')).toBe('x"y');
  });

  it('lets the last of repeated keys win', () => {
    expect(expandWord('$A', ['A=1', 'A=2'])).toBe('2');
    expect(expandWord('[$A]', ['A'])).toBe('[]');
  });
});

describe('expandWords', () => {
  it.each([
    ['hello there', ['hello', 'there']],
    ['hello\\ there', ['hello there']],
    ['hello" there  "', ['hello there  ']],
    ['hello\\" there', ['hello"', 'there']],
    ['x${SPACED}y', ['x', 'a', 'b', 'y']],
    ['x"${SPACED}"y', ['x  a  b  y']],
    ['${SPACED}', ['a', 'b']],
    ['"" a', ['a']],
    ['80 ${NOPE} 443', ['80', '443']],
  ])('%s → %j', (text, words) => expect(expandWords(text, env)).toEqual(words));
});
