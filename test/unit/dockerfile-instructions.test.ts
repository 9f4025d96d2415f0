// Typed instructions, stages and the config instructions against dockerd
// 20.10's classic builder: its checks, its words, its dispatch.
import { describe, expect, it } from 'vitest';
import {
  applyConfigInstruction,
  goDurationString,
  nopCommand,
  type ConfigFields,
  type Instruction,
  isConfigInstruction,
  parseDockerfile,
  parseInstruction,
  parseStages,
  queryLabel,
  parseTrigger,
  expandArg,
  expandCopy,
  sourceCode,
} from '../../src/engine/dockerfile/index.js';
import { refusal } from '../harness/errors.js';

/** The one instruction of `line`, without its node. */
const instr = (line: string): Omit<Instruction, 'node'> => {
  const { node: _node, ...rest } = parseInstruction(parseDockerfile(line).nodes[0]!);
  return rest;
};
const refused = (line: string) => refusal(() => parseInstruction(parseDockerfile(line).nodes[0]!));
const BUILDKIT = (flag: string) =>
  `the --${flag} option requires BuildKit. Refer to https://docs.docker.com/go/buildkit/ to learn how to build images with BuildKit enabled`;

describe('parseInstruction', () => {
  it('FROM: image, AS name lower-cased, --platform', () => {
    expect(instr('FROM busybox')).toEqual({ kind: 'from', image: 'busybox' });
    expect(instr('FROM --platform=linux/amd64 busybox:1 as Build-1.x')).toEqual({
      kind: 'from',
      image: 'busybox:1',
      name: 'build-1.x',
      platform: 'linux/amd64',
    });
    expect(instr('FROM ${IMG} AS b')).toMatchObject({ image: '${IMG}', name: 'b' });
    expect(refused('FROM a b')).toBe('FROM requires either one or three arguments');
    expect(refused('FROM a AS b c')).toBe('FROM requires either one or three arguments');
    expect(refused('FROM')).toBe('FROM requires either one or three arguments');
    expect(refused('FROM a AS 1st')).toBe(
      'invalid name for build stage: "1st", name can\'t start with a number or contain symbols',
    );
    expect(refused('FROM --foo=x a')).toBe('Unknown flag: foo');
    expect(refused('FROM --platform a')).toBe('Missing a value on flag: platform');
  });

  it('RUN, CMD, ENTRYPOINT: JSON or shell form; RUN --mount taken (repeatable), the other BuildKit flags refused saying so', () => {
    expect(instr('RUN ["a", "b"]')).toEqual({ kind: 'run', args: ['a', 'b'], json: true, mounts: [], heredocs: [] });
    expect(instr('RUN a  b')).toEqual({ kind: 'run', args: ['a  b'], json: false, mounts: [], heredocs: [] });
    expect(instr('RUN --mount=type=cache,target=/x --mount=type=tmpfs,target=/t make')).toMatchObject({
      mounts: ['type=cache,target=/x', 'type=tmpfs,target=/t'],
    });
    expect(refused('RUN --mount=type=foo make')).toBe('unsupported mount type "foo"');
    expect(refused('RUN --mount make')).toBe('Missing a value on flag: mount');
    expect(instr('CMD')).toEqual({ kind: 'cmd', args: [], json: false });
    expect(instr('ENTRYPOINT []')).toEqual({ kind: 'entrypoint', args: [], json: true });
    expect(instr('RUN --network=none make')).toMatchObject({ network: 'none' });
    expect(instr('RUN --network=default make')).not.toHaveProperty('network');
    expect(refused('RUN --network=bridge make')).toBe('invalid network mode "bridge"');
    expect(refused('RUN --security=insecure make')).toBe(BUILDKIT('security'));
    expect(refused('RUN --foo make')).toBe('Unknown flag: foo');
    expect(refused('CMD --x a')).toBe('Unknown flag: x');
  });

  it('ENV, LABEL: pairs, words unexpanded', () => {
    expect(instr('ENV a=1 b="$a c"')).toEqual({
      kind: 'env',
      pairs: [
        ['a', '1'],
        ['b', '"$a c"'],
      ],
    });
    expect(instr('LABEL legacy value  here')).toEqual({ kind: 'label', pairs: [['legacy', 'value  here']] });
    expect(refused('ENV')).toBe('ENV requires at least one argument');
    expect(refused('ENV =x')).toBe('ENV names can not be blank');
    expect(refused('LABEL')).toBe('LABEL requires at least one argument');
  });

  it('ARG: names with or without defaults', () => {
    expect(instr('ARG a b=2 c="x y" d=')).toEqual({
      kind: 'arg',
      args: [{ name: 'a' }, { name: 'b', value: '2' }, { name: 'c', value: '"x y"' }, { name: 'd', value: '' }],
    });
    expect(refused('ARG')).toBe('ARG requires at least one argument');
    expect(refused('ARG =x')).toBe('ARG names can not be blank');
    // dockerd drops these flags unread: refused rather than ignored.
    expect(refused('ARG --x a')).toBe('Unknown flag: x');
    expect(refused('STOPSIGNAL --x TERM')).toBe('Unknown flag: x');
  });

  it('COPY, ADD: sources, destination, --from, --chown, --chmod, --link, ADD --checksum', () => {
    expect(instr('COPY --from=build --chown=1:2 --chmod=0755 --link a b /dst/')).toEqual({
      kind: 'copy',
      sources: ['a', 'b'],
      contents: [],
      dest: '/dst/',
      from: 'build',
      chown: '1:2',
      chmod: '0755',
      link: true,
      json: false,
    });
    expect(instr('ADD ["a b", "/c d"]')).toEqual({
      kind: 'add',
      sources: ['a b'],
      contents: [],
      dest: '/c d',
      json: true,
    });
    expect(instr('ADD --checksum=sha256:00 --chmod=644 http://x/y /z')).toMatchObject({
      checksum: 'sha256:00',
      chmod: '644',
    });
    expect(refused('COPY --chmod=u+x a b')).toBe('invalid chmod parameter: "u+x". it should be octal string');
    expect(refused('COPY --checksum=sha256:00 a b')).toBe('Unknown flag: checksum');
    expect(refused('COPY --parents a b')).toBe(BUILDKIT('parents'));
    expect(refused('COPY a')).toBe(
      'COPY requires at least two arguments, but only one was provided. Destination could not be determined',
    );
    expect(refused('ADD a')).toMatch(/^ADD requires at least two arguments/);
    expect(refused('ADD --from=x a b')).toBe('Unknown flag: from');
    expect(refused('COPY --from=a --from=b a b')).toBe('Duplicate flag specified: from');
    expect(refused('COPY --from a b')).toBe('Missing a value on flag: from');
  });

  it('EXPOSE sorted; USER, WORKDIR, STOPSIGNAL one argument; VOLUME trimmed and non-empty', () => {
    expect(instr('EXPOSE 8080 443 80/udp')).toEqual({ kind: 'expose', ports: ['443', '80/udp', '8080'] });
    expect(instr('USER a:b')).toEqual({ kind: 'user', value: 'a:b' });
    expect(instr('WORKDIR /a b')).toEqual({ kind: 'workdir', value: '/a b' });
    expect(instr('STOPSIGNAL SIGKILL')).toEqual({ kind: 'stopsignal', value: 'SIGKILL' });
    expect(instr('VOLUME ["/a ", " /b"]')).toEqual({ kind: 'volume', paths: ['/a', '/b'] });
    expect(refused('EXPOSE')).toBe('EXPOSE requires at least one argument');
    expect(refused('USER')).toBe('USER requires exactly one argument');
    expect(refused('WORKDIR')).toBe('WORKDIR requires exactly one argument');
    expect(refused('STOPSIGNAL')).toBe('STOPSIGNAL requires exactly one argument');
    expect(refused('VOLUME')).toBe('VOLUME requires at least one argument');
    expect(refused('VOLUME ["/a", " "]')).toBe('VOLUME specified can not be an empty string');
    expect(refused('VOLUME []')).toBe('VOLUME requires at least one argument');
  });

  it('HEALTHCHECK: NONE, CMD in both forms, durations and retries checked', () => {
    expect(instr('HEALTHCHECK NONE')).toEqual({ kind: 'healthcheck', test: 'NONE' });
    expect(instr('HEALTHCHECK CMD ["curl", "-f", "x"]')).toEqual({
      kind: 'healthcheck',
      test: ['CMD', 'curl', '-f', 'x'],
    });
    expect(
      instr(
        'HEALTHCHECK --interval=1m30s --timeout=1.5s --start-period=100ms --start-interval=2s --retries=4 cmd curl x',
      ),
    ).toEqual({
      kind: 'healthcheck',
      test: ['CMD-SHELL', 'curl x'],
      interval: 90e9,
      timeout: 1.5e9,
      startPeriod: 100e6,
      startInterval: 2e9,
      retries: 4,
    });
    expect(refused('HEALTHCHECK')).toBe('HEALTHCHECK requires at least one argument');
    expect(refused('HEALTHCHECK NONE x')).toBe('HEALTHCHECK NONE takes no arguments');
    expect(refused('HEALTHCHECK --interval=5s NONE')).toBe('HEALTHCHECK NONE takes no arguments');
    expect(refused('HEALTHCHECK CMD')).toBe('Missing command after HEALTHCHECK CMD');
    expect(refused('HEALTHCHECK RUN x')).toBe('Unknown type "RUN" in HEALTHCHECK (try CMD)');
    expect(refused('HEALTHCHECK --interval=1us CMD x')).toBe('Interval "interval" cannot be less than 1ms');
    expect(refused('HEALTHCHECK --timeout=-1s CMD x')).toBe('Interval "timeout" cannot be less than 1ms');
    expect(refused('HEALTHCHECK --interval=5 CMD x')).toBe('time: missing unit in duration "5"');
    expect(refused('HEALTHCHECK --interval=5x CMD x')).toBe('time: invalid duration "5x"');
    expect(refused('HEALTHCHECK --retries=0 CMD x')).toBe('--retries must be at least 1 (not 0)');
    expect(refused('HEALTHCHECK --retries=x CMD x')).toBe('strconv.ParseInt: parsing "x": invalid syntax');
    expect(refused('HEALTHCHECK --foo=1 CMD x')).toBe('Unknown flag: foo');
  });

  it('SHELL JSON only; ONBUILD triggers; MAINTAINER', () => {
    expect(instr('SHELL ["/bin/bash", "-c"]')).toEqual({ kind: 'shell', args: ['/bin/bash', '-c'] });
    expect(refused('SHELL /bin/bash -c')).toBe('SHELL requires the arguments to be in JSON form');
    expect(refused('SHELL []')).toBe('SHELL requires at least one argument');
    expect(instr('  onbuild   RUN echo "hi"')).toEqual({ kind: 'onbuild', expression: 'RUN echo "hi"' });
    expect(refused('ONBUILD')).toBe('ONBUILD requires at least one argument');
    expect(refused('ONBUILD ONBUILD RUN x')).toBe("Chaining ONBUILD via `ONBUILD ONBUILD` isn't allowed");
    expect(refused('ONBUILD from x')).toBe("FROM isn't allowed as an ONBUILD trigger");
    expect(refused('ONBUILD MAINTAINER x')).toBe("MAINTAINER isn't allowed as an ONBUILD trigger");
    expect(instr('MAINTAINER Jane Doe <j@d>')).toEqual({ kind: 'maintainer', name: 'Jane Doe <j@d>' });
    expect(refused('FOO bar')).toBe('unknown instruction: FOO');
  });
});

describe('parseStages', () => {
  it('collects meta ARGs before the first FROM and the instructions of each stage', () => {
    const { metaArgs, stages } = parseStages(
      parseDockerfile('ARG V=1\nARG B\nFROM busybox:$V AS Base\nARG B\nRUN x\nFROM base\nCOPY --from=base /a /b\n'),
    );
    expect(metaArgs.map((a) => a.args)).toEqual([[{ name: 'V', value: '1' }], [{ name: 'B' }]]);
    expect(stages.map((s) => [s.index, s.name, s.from.image, s.instructions.map((i) => i.kind)])).toEqual([
      [0, 'base', 'busybox:$V', ['arg', 'run']],
      [1, undefined, 'base', ['copy']],
    ]);
  });

  it("refuses what dockerd refuses, with the instruction's line", () => {
    expect(refusal(() => parseStages(parseDockerfile('FROM x\n\nFOO bar')))).toBe(
      'dockerfile parse error line 3: unknown instruction: FOO',
    );
    expect(refusal(() => parseStages(parseDockerfile('FROM x\nRUN a \\\n  b\nCOPY a')))).toMatch(
      /^dockerfile parse error line 4: COPY requires at least two arguments/,
    );
    // Flags only BuildKit knows are refused as dockerd does at dispatch: without the line.
    expect(refusal(() => parseStages(parseDockerfile('FROM x\nRUN --security=insecure x')))).toBe(BUILDKIT('security'));
    expect(refusal(() => parseStages(parseDockerfile('FROM x\nRUN --mount=type=tmpfs,uid=1,target=/t x')))).toBe(
      'dockerfile parse error line 2: uid not allowed for "tmpfs" type mounts',
    );
    expect(refusal(() => parseStages(parseDockerfile('ARG a\nRUN x\nFROM y')))).toBe(
      'no build stage in current context',
    );
  });
});

describe('applyConfigInstruction', () => {
  const apply = (config: ConfigFields, text: string, extraEnv: string[] = []) => {
    const state = { cmdSet: false };
    for (const node of parseDockerfile(text).nodes) {
      const i = parseInstruction(node);
      if (!isConfigInstruction(i)) throw new Error(`not config: ${i.kind}`);
      applyConfigInstruction(config, i, [...(config.Env ?? []), ...extraEnv], state);
    }
    return config;
  };

  it('expands ENV, LABEL, USER, WORKDIR, VOLUME, EXPOSE, STOPSIGNAL from the env before each instruction', () => {
    const c = apply(
      { Env: ['PATH=/bin'] },
      [
        'ENV A=1 B=$A',
        'ENV B=${A}x C="$B"',
        'LABEL "l $A"=$B',
        'USER u$A',
        'WORKDIR /w',
        'WORKDIR ${A}/../sub',
        'VOLUME $A /v$B',
        'EXPOSE $P 53/udp',
        'STOPSIGNAL SIG$S',
      ].join('\n'),
      ['P=80 81', 'S=TERM'],
    );
    expect(c.Env).toEqual(['PATH=/bin', 'A=1', 'B=1x', 'C=']);
    expect(c.Labels).toEqual({ 'l 1': '1x' });
    expect(c.User).toBe('u1');
    expect(c.WorkingDir).toBe('/w/sub');
    expect(c.Volumes).toEqual({ '1': {}, '/v1x': {} });
    expect(c.ExposedPorts).toEqual({ '80/tcp': {}, '81/tcp': {}, '53/udp': {} });
    expect(c.StopSignal).toBe('SIGTERM');
  });

  it('does not expand CMD, ENTRYPOINT, HEALTHCHECK, ONBUILD; prepends the Shell to shell forms', () => {
    const c = apply(
      { Env: ['A=1'] },
      'SHELL ["/bin/bash", "-c"]\nCMD echo $A\nHEALTHCHECK CMD test $A\nONBUILD RUN $A',
    );
    expect(c.Shell).toEqual(['/bin/bash', '-c']);
    expect(c.Cmd).toEqual(['/bin/bash', '-c', 'echo $A']);
    expect(c.Healthcheck).toEqual({ Test: ['CMD-SHELL', 'test $A'] });
    expect(c.OnBuild).toEqual(['RUN $A']);
  });

  it("keeps dockerd's CMD/ENTRYPOINT rules: ENTRYPOINT clears a CMD not set in the stage", () => {
    expect(apply({ Cmd: ['old'] }, 'ENTRYPOINT ["/e"]')).toMatchObject({ Entrypoint: ['/e'], Cmd: null });
    expect(apply({ Cmd: ['old'] }, 'CMD ["c"]\nENTRYPOINT ["/e"]')).toMatchObject({ Entrypoint: ['/e'], Cmd: ['c'] });
    // An empty CMD does not count as set.
    expect(apply({}, 'CMD []\nENTRYPOINT /e')).toMatchObject({ Entrypoint: ['/bin/sh', '-c', '/e'], Cmd: null });
    expect(apply({}, 'CMD')).toMatchObject({ Cmd: ['/bin/sh', '-c'] });
    expect(apply({ Entrypoint: ['x'] }, 'ENTRYPOINT')).toMatchObject({ Entrypoint: null });
    expect(apply({ Entrypoint: ['x'] }, 'ENTRYPOINT []')).toMatchObject({ Entrypoint: null });
  });

  it('takes the escape directive into expansion', () => {
    const c = apply({ Env: ['A=1'] }, '# escape=`\nENV B=`$A C=c:\\$A');
    expect(c.Env).toEqual(['A=1', 'B=$A', 'C=c:\\1']);
  });

  it('refuses what dockerd refuses at dispatch', () => {
    expect(refusal(() => apply({}, 'EXPOSE 70000'))).toBe('invalid containerPort: 70000');
    expect(refusal(() => apply({}, 'EXPOSE 80/xyz'))).toBe('invalid proto: xyz');
    expect(refusal(() => apply({}, 'EXPOSE 9-8'))).toBe('invalid containerPort: 9-8');
    expect(refusal(() => apply({}, 'STOPSIGNAL SIGNOPE'))).toBe('Invalid signal: SIGNOPE');
    expect(refusal(() => apply({}, 'STOPSIGNAL 0'))).toBe('Invalid signal: 0');
    expect(refusal(() => apply({}, 'STOPSIGNAL SIGRTMIN+16'))).toBe('Invalid signal: SIGRTMIN+16');
    expect(apply({}, 'STOPSIGNAL SIGRTMIN+3\nSTOPSIGNAL rtmax-14\nSTOPSIGNAL 99').StopSignal).toBe('99');
    expect(apply({}, 'STOPSIGNAL SIGRTMIN+3').StopSignal).toBe('SIGRTMIN+3');
    expect(refusal(() => apply({}, 'WORKDIR $NOPE'))).toBe('cannot normalize nothing');
    expect(refusal(() => apply({}, 'VOLUME $NOPE'))).toBe('VOLUME specified can not be an empty string');
    expect(refusal(() => apply({}, 'ENV A=${B:?needed}'))).toBe('failed to process "${B:?needed}": B: needed');
  });

  it('leaves the config alone for MAINTAINER and tells config instructions apart', () => {
    expect(apply({ User: 'x' }, 'MAINTAINER me')).toEqual({ User: 'x' });
    const kinds = ['FROM x', 'RUN x', 'COPY a b', 'ADD a b', 'ARG a', 'USER x'].map((l) =>
      isConfigInstruction(parseInstruction(parseDockerfile(l).nodes[0]!)),
    );
    expect(kinds).toEqual([false, false, false, false, false, true]);
  });
});

describe('step comments (history and cache key), as dockerd 20.10 writes them', () => {
  const history = (text: string, config: ConfigFields = {}) => {
    const state = { cmdSet: false };
    return parseDockerfile(text).nodes.map((node) => {
      const i = parseInstruction(node);
      if (!isConfigInstruction(i)) throw new Error(`not config: ${i.kind}`);
      return nopCommand(config, applyConfigInstruction(config, i, config.Env ?? [], state)).join(' ');
    });
  };

  it('prints expanded values after `#(nop) `', () => {
    expect(
      history(
        [
          'ENV A=1 B="two words"',
          "LABEL 'k 1'=v q=$A",
          'EXPOSE 80 53/udp $A',
          'USER app:$A',
          'WORKDIR rel/../dir',
          'VOLUME ["/a", "/b"]',
          'STOPSIGNAL SIGRTMIN+3',
          'MAINTAINER me <m@e>',
          'ONBUILD run echo hi',
        ].join('\n'),
      ),
    ).toEqual([
      '/bin/sh -c #(nop)  ENV A=1 B=two words',
      '/bin/sh -c #(nop)  LABEL k 1=v q=1',
      // Sorted before expansion, as dockerd sorts them.
      '/bin/sh -c #(nop)  EXPOSE 1 53/udp 80',
      '/bin/sh -c #(nop)  USER app:1',
      '/bin/sh -c #(nop) WORKDIR /dir',
      '/bin/sh -c #(nop)  VOLUME [/a /b]',
      '/bin/sh -c #(nop)  STOPSIGNAL SIGRTMIN+3',
      '/bin/sh -c #(nop)  MAINTAINER me <m@e>',
      '/bin/sh -c #(nop)  ONBUILD run echo hi',
    ]);
  });

  it("quotes commands as Go's %q and runs the comment through the current Shell", () => {
    expect(
      history('CMD echo "hi"\tthere\nENTRYPOINT ["a", "b\\tc"]\nSHELL ["/bin/bash", "-xc"]\nCMD x\nENTRYPOINT'),
    ).toEqual([
      '/bin/sh -c #(nop)  CMD ["/bin/sh" "-c" "echo \\"hi\\"\\tthere"]',
      '/bin/sh -c #(nop)  ENTRYPOINT ["a" "b\\tc"]',
      '/bin/bash -xc #(nop)  SHELL [/bin/bash -xc]',
      '/bin/bash -xc #(nop)  CMD ["/bin/bash" "-xc" "x"]',
      '/bin/bash -xc #(nop)  ENTRYPOINT []',
    ]);
  });

  it('prints HEALTHCHECK as the Go struct dockerd prints', () => {
    expect(
      history(
        [
          'HEALTHCHECK --interval=1m30s --timeout=1.5s --start-period=100ms --retries=3 CMD ["a","b"]',
          'HEALTHCHECK NONE',
          'HEALTHCHECK --retries=65 CMD x',
          'HEALTHCHECK --interval=2h0m1s --timeout=1500us CMD x',
        ].join('\n'),
      ),
    ).toEqual([
      `/bin/sh -c #(nop)  HEALTHCHECK &{["CMD" "a" "b"] "1m30s" "1.5s" "100ms" '\\x03'}`,
      `/bin/sh -c #(nop)  HEALTHCHECK &{["NONE"] "0s" "0s" "0s" '\\x00'}`,
      `/bin/sh -c #(nop)  HEALTHCHECK &{["CMD-SHELL" "x"] "0s" "0s" "0s" 'A'}`,
      `/bin/sh -c #(nop)  HEALTHCHECK &{["CMD-SHELL" "x"] "2h0m1s" "1.5ms" "0s" '\\x00'}`,
    ]);
  });

  it("formats durations as Go's time.Duration", () => {
    expect([0, 1, 1500, 2e6, 1.5e9, 60e9, 3600e9, 3661e9, -5e9].map(goDurationString)).toEqual([
      '0s',
      '1ns',
      '1.5µs',
      '2ms',
      '1.5s',
      '1m0s',
      '1h0m0s',
      '1h1m1s',
      '-5s',
    ]);
  });
});

describe('sourceCode', () => {
  it('is the logical line, continuations joined, trimmed', () => {
    const { stages } = parseStages(parseDockerfile('FROM  x  AS b \nRUN a \\\n    b  \n'));
    expect([sourceCode(stages[0]!.from), sourceCode(stages[0]!.instructions[0]!)]).toEqual([
      'FROM  x  AS b',
      'RUN a     b',
    ]);
  });
});

describe('parseTrigger, expandArg, expandCopy', () => {
  it('parses an ONBUILD trigger alone, refusing what dockerd refuses', () => {
    expect(parseTrigger('RUN echo hi')).toMatchObject({ kind: 'run', args: ['echo hi'] });
    expect(parseTrigger('COPY --from=x a b')).toMatchObject({ kind: 'copy', from: 'x', sources: ['a'], dest: 'b' });
    expect(refusal(() => parseTrigger('RUN a\nRUN b'))).toBe('onbuild trigger should be a single expression');
    expect(refusal(() => parseTrigger('BOGUS x'))).toBe('unknown instruction: BOGUS');
    expect(refusal(() => parseTrigger('FROM x'))).toBe('*instructions.Stage is not a command type');
  });

  it('expands ARG names and defaults, and words the step', () => {
    const arg = parseInstruction(parseDockerfile('ARG a=$X b c="${X}y"').nodes[0]!);
    if (arg.kind !== 'arg') throw new Error(arg.kind);
    expect(expandArg(arg, ['X=1'])).toEqual({
      args: [{ name: 'a', value: '1' }, { name: 'b' }, { name: 'c', value: '1y' }],
      comment: 'ARG a=1 b c=1y',
    });
  });

  it('expands COPY sources, destination and --chown, not --from', () => {
    const copy = parseInstruction(parseDockerfile('COPY --from=$S --chown=$U:$U a$X "b"c /d$X/').nodes[0]!);
    if (copy.kind !== 'copy') throw new Error(copy.kind);
    expect(copy.from).toBe('$S');
    expect(expandCopy(copy, ['X=1', 'U=app'])).toEqual({
      sources: ['a1', 'bc'],
      dest: '/d1/',
      chown: 'app:app',
      contents: [],
    });
    // The shell form splits on blanks before expansion: quotes do not hold a blank, as in dockerd.
    const quoted = parseInstruction(parseDockerfile('COPY "b c" /d').nodes[0]!);
    if (quoted.kind !== 'copy') throw new Error(quoted.kind);
    expect(refusal(() => expandCopy(quoted, []))).toBe(
      'failed to process "\\"b": unexpected end of statement while looking for matching double-quote',
    );
  });
});

describe('queryLabel', () => {
  it("is the build's `labels` query as dockerd's LABEL step: as given, never expanded", () => {
    const l = queryLabel('a b', '$HOME "q"');
    expect(sourceCode(l)).toBe('LABEL a b=$HOME "q"');
    const config: ConfigFields = { Env: ['HOME=/root'] };
    expect(applyConfigInstruction(config, l, config.Env!)).toBe('LABEL a b=$HOME "q"');
    expect(config.Labels).toEqual({ 'a b': '$HOME "q"' });
  });
});
