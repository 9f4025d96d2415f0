// The Dockerfile 1.x syntax in the parser: here-documents as BuildKit's parser
// reads them, and RUN --mount's fields as its parseMount checks them.
import { describe, expect, it } from 'vitest';
import {
  builtinSyntax,
  expandCopy,
  mountKey,
  parseDockerfile,
  parseHeredocWord,
  parseInstruction,
  parseMount,
  parseStages,
} from '../../src/engine/dockerfile/index.js';

const refusal = (f: () => unknown): string => {
  try {
    f();
  } catch (e) {
    return (e as Error).message;
  }
  throw new Error('not refused');
};

describe('here-documents', () => {
  it('reads the bodies after a RUN, COPY or ADD line, up to each terminator, in order', () => {
    const df = parseDockerfile(
      ['FROM x', 'RUN cat <<A <<-"B"', 'a1', 'a2', 'A', '\tb1', '\t\tB', 'COPY <<EOF /f', 'EOF', 'RUN ["a"]'].join(
        '\n',
      ),
    );
    const run = df.nodes[1]!;
    expect(run.heredocs).toEqual([
      { name: 'A', chomp: false, expand: true, content: 'a1\na2\n' },
      { name: 'B', chomp: true, expand: false, content: '\tb1\n' },
    ]);
    expect([run.startLine, run.endLine]).toEqual([2, 7]);
    expect(df.nodes[2]!.heredocs).toEqual([{ name: 'EOF', chomp: false, expand: true, content: '' }]);
    expect(df.nodes.map((n) => n.command)).toEqual(['from', 'run', 'copy', 'run']);
    // The JSON form has none: its `<<` is a word.
    expect(parseDockerfile('FROM x\nRUN ["cat", "<<EOF"]').nodes[1]!.heredocs).toBeUndefined();
  });

  it('takes `<<WORD` words only: quotes mean no expansion, a bare `<<` or `<<a b` is none', () => {
    expect(parseHeredocWord('<<EOF')).toMatchObject({ name: 'EOF', expand: true, chomp: false });
    expect(parseHeredocWord("<<'EOF'")).toMatchObject({ name: 'EOF', expand: false });
    expect(parseHeredocWord('<<-E"O"F')).toMatchObject({ name: 'EOF', expand: false, chomp: true });
    expect(parseHeredocWord('2<<EOF')).toMatchObject({ name: 'EOF' });
    expect(parseHeredocWord('<<')).toBeNull();
    expect(parseHeredocWord('a<<EOF')).toBeNull();
  });

  it('COPY: heredoc sources are inline files, expanded (quotes kept) unless the word was quoted', () => {
    const copy = parseStages(
      parseDockerfile(['FROM x', "COPY a <<A <<-'B' /d/", '"$V" \\$V', 'A', '\t$V', 'B'].join('\n')),
    ).stages[0]!.instructions[0]!;
    if (copy.kind !== 'copy') throw new Error(copy.kind);
    expect(copy.sources).toEqual(['a']);
    expect(expandCopy(copy, ['V=1']).contents).toEqual([
      { name: 'A', data: '"1" $V\n' },
      { name: 'B', data: '$V\n' },
    ]);
    expect(refusal(() => parseInstruction(parseDockerfile('COPY a <<EOF\nEOF').nodes[0]!))).toBe(
      'COPY cannot accept a heredoc as a destination',
    );
  });

  it('an unterminated heredoc is refused', () => {
    expect(refusal(() => parseDockerfile('FROM x\nRUN <<EOF\necho', { name: 'Dockerfile' }))).toBe(
      'failed to parse Dockerfile: unterminated heredoc',
    );
  });
});

describe('RUN --mount', () => {
  it('parses each type with BuildKit’s defaults and aliases', () => {
    expect(parseMount('type=cache,target=/root/.cache,id=pip,sharing=locked,uid=1,gid=2,mode=0700')).toEqual({
      type: 'cache',
      target: '/root/.cache',
      id: 'pip',
      sharing: 'locked',
      uid: 1,
      gid: 2,
      mode: 0o700,
      readOnly: false,
      required: false,
    });
    expect(parseMount('target=/src,from=build,source=/out')).toEqual({
      type: 'bind',
      target: '/src',
      from: 'build',
      source: '/out',
      readOnly: true,
      required: false,
    });
    expect(parseMount('dst=/src,rw')).toMatchObject({ type: 'bind', readOnly: false });
    expect(parseMount('type=tmpfs,dst=/t,size=64m')).toMatchObject({ size: 64 << 20, readOnly: false });
    expect(parseMount('type=secret,id=tok,required')).toMatchObject({ type: 'secret', id: 'tok', required: true });
    expect(parseMount('type=ssh')).toMatchObject({ type: 'ssh', required: false });
    expect(parseMount('"type=bind","target=/a,b"')).toMatchObject({ target: '/a,b' });
    expect(parseMount('type=cache,target=$D', (w) => w.replace('$D', '/dir'))).toMatchObject({ target: '/dir' });
  });

  it('refuses what BuildKit refuses, in its words', () => {
    expect(refusal(() => parseMount('type=nfs'))).toBe('unsupported mount type "nfs"');
    expect(refusal(() => parseMount('type=bind,target=/a,mode=0700'))).toBe('mode not allowed for "bind" type mounts');
    expect(refusal(() => parseMount('type=cache,target=/a,sharing=x'))).toBe('unsupported sharing value "x"');
    expect(refusal(() => parseMount('type=bind,sharing=locked,target=/a'))).toBe(
      'invalid cache sharing set for bind mount',
    );
    expect(refusal(() => parseMount('type=bind,required'))).toBe("unexpected key 'required' for mount type 'bind'");
    expect(refusal(() => parseMount('type=secret'))).toBe('invalid secret mount. one of source, target required');
    expect(refusal(() => parseMount('type=cache,foo=1'))).toBe("unexpected key 'foo' in 'foo=1'");
    expect(refusal(() => parseMount('type=cache,target'))).toBe("invalid field 'target' must be a key=value pair");
    expect(refusal(() => parseMount('type=cache,uid=x'))).toBe('invalid value x for uid');
    expect(refusal(() => parseMount('type=tmpfs,size=lots'))).toBe('invalid value for size: lots');
  });

  it('keys a mount on its options alone', () => {
    expect(mountKey(parseMount('type=secret,id=tok,target=/t'))).toBe('type=secret,id=tok,target=/t,ro');
    expect(mountKey(parseMount('type=cache,target=/c,mode=0700'))).toBe('type=cache,target=/c,mode=700');
  });
});

describe('the syntax directive', () => {
  it('takes docker/dockerfile:1… as the built-in syntax and refuses any other frontend image by name', () => {
    const syntax = (v: string) => builtinSyntax(new Map([['syntax', v]]));
    for (const ok of [
      'docker/dockerfile:1',
      'docker/dockerfile:1.4',
      'docker.io/docker/dockerfile:1.6.0',
      'docker/dockerfile:1-labs',
      `docker/dockerfile:1@sha256:${'a'.repeat(64)}`,
      'docker/dockerfile',
    ])
      expect(syntax(ok)).toBe(ok);
    expect(builtinSyntax(new Map())).toBeUndefined();
    for (const bad of ['docker/dockerfile:2', 'docker/dockerfile-upstream:master', 'tonistiigi/x:1'])
      expect(refusal(() => syntax(bad))).toMatch(
        `the syntax directive names the frontend image ${bad}: berthd runs no`,
      );
  });
});
