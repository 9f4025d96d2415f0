// The Dockerfile parser against dockerd 20.10's: directives, comments,
// continuations, line numbers, flags and each command's argument split.
import { describe, expect, it } from 'vitest';
import { jsonArray, type Node, parseDockerfile, parseWords } from '../../src/engine/dockerfile/index.js';
import { refusal } from '../harness/errors.js';

/** A node as dockerd's parser dumps it: `(cmd ["--flag"] "arg" …)`. */
const dump = (n: Node): string => {
  let s = n.command;
  if (n.flags.length) s += ` [${n.flags.map((f) => JSON.stringify(f)).join(' ')}]`;
  if (n.trigger) return `${s} (${dump(n.trigger)})`;
  for (const a of n.args) s += ` ${JSON.stringify(a)}`;
  return s;
};
const dumpAll = (text: string) => parseDockerfile(text).nodes.map(dump);

describe('parseDockerfile: lines', () => {
  it('joins continuations, keeps the blanks of continued lines, and counts physical lines', () => {
    const df = parseDockerfile('FROM busybox\n\nRUN echo a \\\n    b \\\n  c\nCMD x\n');
    expect(df.nodes.map((n) => [n.command, n.startLine, n.endLine])).toEqual([
      ['from', 1, 1],
      ['run', 3, 5],
      ['cmd', 6, 6],
    ]);
    expect(df.nodes[1]!.rest).toBe('echo a     b   c');
    expect(df.nodes[1]!.original).toBe('RUN echo a     b   c');
  });

  it('skips comments, also inside a continued instruction, and warns on empty continuation lines', () => {
    const df = parseDockerfile('# top\nRUN a \\\n# inside\n  # indented\n\n    b\n   # after\nUSER x');
    expect(dumpAll('RUN a \\\n# inside\n    b')).toEqual(['run "a     b"']);
    expect(df.nodes.map(dump)).toEqual(['run "a     b"', 'user "x"']);
    expect(df.nodes[0]!.endLine).toBe(6);
    expect(df.warnings).toEqual([
      '[WARNING]: Empty continuation line found in:\n    RUN a     b',
      '[WARNING]: Empty continuation lines will become errors in a future release.',
    ]);
    // A `#` after text is no comment.
    expect(dumpAll('RUN echo # not a comment')).toEqual(['run "echo # not a comment"']);
  });

  it('ends an instruction at a trailing escape on the last line, and keeps an escaped escape', () => {
    expect(dumpAll('RUN echo hi \\')).toEqual(['run "echo hi"']);
    expect(dumpAll('RUN echo hi \\\\\nUSER x')).toEqual(['run "echo hi \\\\\\\\"', 'user "x"']);
    // A line that is only the escape continues too.
    expect(dumpAll('RUN a \\\n\\\nb')).toEqual(['run "a b"']);
    // Blanks after the escape do not stop it.
    expect(dumpAll('RUN a \\  \t\n b')).toEqual(['run "a  b"']);
  });

  it('takes CRLF line ends and a byte-order mark', () => {
    const df = parseDockerfile('\uFEFFFROM busybox\r\nRUN a \\\r\n b\r\n');
    expect(df.nodes.map(dump)).toEqual(['from "busybox"', 'run "a  b"']);
  });

  it('refuses a file without instructions, as dockerd', () => {
    expect(refusal(() => parseDockerfile(''))).toBe('file with no instructions');
    expect(refusal(() => parseDockerfile('# only\n\n   \n# comments'))).toBe('file with no instructions');
    expect(refusal(() => parseDockerfile('', { name: 'Dockerfile' }))).toBe(
      'failed to parse Dockerfile: file with no instructions',
    );
  });

  it("refuses a line longer than dockerd's scanner holds", () => {
    expect(parseDockerfile(`LABEL a=${'x'.repeat(65527)}\n`).nodes).toHaveLength(1);
    expect(refusal(() => parseDockerfile(`LABEL a=${'x'.repeat(65528)}\n`))).toBe(
      'dockerfile line greater than max allowed size of 65535',
    );
    expect(refusal(() => parseDockerfile(`LABEL a=${'é'.repeat(32764)}\n`))).toMatch(/max allowed size/);
  });

  it('keeps unknown instructions for parseInstruction to refuse', () => {
    expect(parseDockerfile('FOO bar').nodes[0]).toMatchObject({ command: 'foo', rest: 'bar', args: [] });
  });
});

describe('parseDockerfile: directives', () => {
  it('takes `# escape=`` and then continues lines and escapes with the backtick', () => {
    const df = parseDockerfile('# escape=`\nFROM x\nRUN dir c:\\ `\n  && echo \\`');
    expect(df.escape).toBe('`');
    expect(df.directives.get('escape')).toBe('`');
    expect(df.nodes.map(dump)).toEqual(['from "x"', 'run "dir c:\\\\   && echo \\\\"']);
    expect(df.nodes[1]!.escape).toBe('`');
  });

  it('reads directives only before anything else, in any case, with blanks', () => {
    expect(parseDockerfile('#  ESCAPE = `  \nFROM x').escape).toBe('`');
    expect(parseDockerfile('# syntax=docker/dockerfile:1\n# escape=`\nFROM x').escape).toBe('`');
    // After a comment, an empty line, or an instruction, it is a comment.
    expect(parseDockerfile('# a comment\n# escape=`\nFROM x').escape).toBe('\\');
    expect(parseDockerfile('\n# escape=`\nFROM x').escape).toBe('\\');
    expect(parseDockerfile('FROM x\n# escape=`\nRUN a').escape).toBe('\\');
    // An unknown directive ends them too.
    expect(parseDockerfile('# foo=bar\n# escape=`\nFROM x').escape).toBe('\\');
  });

  it('refuses a repeated or bad escape directive', () => {
    expect(refusal(() => parseDockerfile('# escape=`\n# escape=`\nFROM x'))).toBe(
      'only one escape parser directive can be used',
    );
    expect(refusal(() => parseDockerfile('# escape=x\nFROM x'))).toBe(
      "invalid escape token 'x' does not match ` or \\",
    );
  });
});

describe('parseDockerfile: flags and arguments', () => {
  it('takes leading --flags, quoted or not, up to `--` or the first other word', () => {
    expect(parseDockerfile('COPY --from=build --chown="1:1" a b').nodes[0]).toMatchObject({
      flags: ['--from=build', '--chown=1:1'],
      rest: 'a b',
      args: ['a', 'b'],
    });
    expect(parseDockerfile('COPY -- --x b').nodes[0]).toMatchObject({ flags: [], rest: '--x b' });
    expect(parseDockerfile('COPY a --from=x b').nodes[0]).toMatchObject({ flags: [], args: ['a', '--from=x', 'b'] });
    expect(parseDockerfile('HEALTHCHECK --interval=5s --retries=3 CMD true').nodes[0]).toMatchObject({
      flags: ['--interval=5s', '--retries=3'],
      args: ['CMD', 'true'],
    });
  });

  it('splits JSON and shell forms as dockerd does', () => {
    expect(dumpAll('CMD ["a", "b c"]\nCMD a b\nCMD []\nCMD\nCMD [ "x" ] trailing')).toEqual([
      'cmd "a" "b c"',
      'cmd "a b"',
      'cmd',
      'cmd',
      // Go's json.Decoder reads the first value only.
      'cmd "x"',
    ]);
    const json = parseDockerfile('RUN ["echo","hi"]').nodes[0]!;
    expect(json.json).toEqual(['echo', 'hi']);
    expect(parseDockerfile('RUN echo hi').nodes[0]!.json).toBeNull();
    // Not JSON (single quotes, unterminated, bad escape): the shell form.
    expect(dumpAll('CMD [\'a\']\nCMD ["a"\nCMD ["a\\q"]')).toEqual([
      'cmd "[\'a\']"',
      'cmd "[\\"a\\""',
      'cmd "[\\"a\\\\q\\"]"',
    ]);
    expect(refusal(() => parseDockerfile('CMD ["a", 1]'))).toBe(
      'when using JSON array syntax, arrays must be comprised of strings only',
    );
    expect(refusal(() => parseDockerfile('CMD [["a"]]'))).toMatch(/arrays must be comprised of strings only/);
  });

  it('splits COPY, ADD and VOLUME into words or their JSON array', () => {
    expect(dumpAll('COPY a  b\tc\nADD ["a b", "c"]\nVOLUME /a /b\nVOLUME ["/c"]')).toEqual([
      'copy "a" "b" "c"',
      'add "a b" "c"',
      'volume "/a" "/b"',
      'volume "/c"',
    ]);
  });

  it('splits ENV and LABEL into pairs, quotes kept, and the legacy one-pair form', () => {
    expect(dumpAll('ENV a=b c="d e" f=g\\ h')).toEqual(['env "a" "b" "c" "\\"d e\\"" "f" "g\\\\ h"']);
    expect(dumpAll('ENV name  the rest  of it')).toEqual(['env "name" "the rest  of it"']);
    expect(dumpAll('LABEL "a b"=c')).toEqual(['label "\\"a b\\"" "c"']);
    expect(refusal(() => parseDockerfile('ENV a'))).toBe('ENV must have two arguments');
    expect(refusal(() => parseDockerfile('LABEL a'))).toBe('LABEL must have two arguments');
    expect(refusal(() => parseDockerfile('ENV a=b c'))).toBe(
      'Syntax error - can\'t find = in "c". Must be of the form: name=value',
    );
    // Quoted as Go's %q: controls as \x escapes, other characters as they are.
    expect(refusal(() => parseDockerfile('ENV a=b é\x01'))).toBe(
      'Syntax error - can\'t find = in "é\\x01". Must be of the form: name=value',
    );
    expect(refusal(() => parseDockerfile('ENV a=b c', { name: 'Dockerfile.dev' }))).toMatch(
      /^failed to parse Dockerfile\.dev: Syntax error/,
    );
  });

  it('splits the others: ARG quote-aware, FROM and EXPOSE on blanks, USER WORKDIR whole', () => {
    expect(dumpAll('ARG a="x y" b\nFROM x AS y\nEXPOSE 80  443/udp\nUSER a b\nWORKDIR /a b')).toEqual([
      'arg "a=\\"x y\\"" "b"',
      'from "x" "AS" "y"',
      'expose "80" "443/udp"',
      'user "a b"',
      'workdir "/a b"',
    ]);
  });

  it('parses HEALTHCHECK and ONBUILD with a command of their own', () => {
    expect(dumpAll('HEALTHCHECK CMD ["a", "b"]\nHEALTHCHECK CMD a b\nHEALTHCHECK NONE')).toEqual([
      'healthcheck "CMD" "a" "b"',
      'healthcheck "CMD" "a b"',
      'healthcheck "NONE"',
    ]);
    const on = parseDockerfile('ONBUILD COPY --from=x ["a", "b"] /c').nodes[0]!;
    expect(dump(on)).toBe('onbuild (copy ["--from=x"] "a" "b")');
    expect(on.args).toEqual(['copy', 'a', 'b']);
    expect(refusal(() => parseDockerfile('ONBUILD CMD [1]'))).toMatch(/strings only/);
  });
});

describe('helpers', () => {
  it('parseWords keeps quotes and escapes, drops a trailing escape', () => {
    expect(parseWords('a "b c" \'d\\ e\' f\\ g h\\')).toEqual(['a', '"b c"', "'d\\ e'", 'f\\ g', 'h']);
    expect(parseWords('"" x')).toEqual(['""', 'x']);
    expect(parseWords('a`  b', '`')).toEqual(['a` ', 'b']);
  });

  it('jsonArray reads an array of strings or nothing', () => {
    expect(jsonArray('  ["a"]')).toEqual(['a']);
    expect(jsonArray('["a"] ["b"]')).toEqual(['a']);
    expect(jsonArray('["]"]')).toEqual([']']);
    expect(jsonArray('a')).toBeNull();
    expect(jsonArray('[')).toBeNull();
  });
});
