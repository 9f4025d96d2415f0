// `docker commit --change` parsing and dispatch, dockerd's config merge, and
// the commit reference rules, without a daemon.
import { describe, expect, it } from 'vitest';
import { commitReference } from '../../src/engine/commit/service.js';
import type { ContainerConfigFields } from '../../src/engine/images/config.js';
import { applyChanges, expandWord, mergeConfig } from '../../src/engine/commit/instructions.js';
import { refusal } from '../harness/errors.js';

const base: ContainerConfigFields = {
  Env: ['PATH=/bin', 'HOME=/root'],
  Cmd: ['sh'],
  Entrypoint: null,
  WorkingDir: '/app',
  Labels: { keep: 'me' },
};

describe('applyChanges', () => {
  it('takes CMD and ENTRYPOINT in JSON and shell form', () => {
    expect(applyChanges(base, ['CMD ["echo", "a b"]']).Cmd).toEqual(['echo', 'a b']);
    expect(applyChanges(base, ['CMD echo "$HOME"']).Cmd).toEqual(['/bin/sh', '-c', 'echo "$HOME"']);
    expect(applyChanges({ ...base, Shell: ['/bin/bash', '-xc'] }, ['CMD run it']).Cmd).toEqual([
      '/bin/bash',
      '-xc',
      'run it',
    ]);
    // A JSON-looking line that is not JSON is the shell form.
    expect(applyChanges(base, ['CMD [not json']).Cmd).toEqual(['/bin/sh', '-c', '[not json']);
    // ENTRYPOINT without a CMD in the same changes drops the Cmd (dockerd's rule)...
    expect(applyChanges(base, ['ENTRYPOINT ["/init"]'])).toMatchObject({ Entrypoint: ['/init'], Cmd: null });
    // ...but not when the changes set one.
    expect(applyChanges(base, ['CMD ["x"]', 'ENTRYPOINT ["/init"]'])).toMatchObject({
      Entrypoint: ['/init'],
      Cmd: ['x'],
    });
    expect(refusal(() => applyChanges(base, ['CMD ["a", 1]']))).toBe(
      'when using JSON array syntax, arrays must be comprised of strings only',
    );
  });

  it('takes ENV and LABEL pairs, quoted, expanded from the env before the instruction, and the legacy form', () => {
    const c = applyChanges(base, [
      'ENV A=1 B="two words" C=${A}x',
      'ENV D=$A$B',
      'ENV LEGACY value with  spaces',
      'LABEL \'k 1\'=v "q"="$HOME"',
    ]);
    expect(c.Env).toEqual([
      'PATH=/bin',
      'HOME=/root',
      'A=1',
      'B=two words',
      'C=x',
      'D=1two words',
      'LEGACY=value with  spaces',
    ]);
    expect(c.Labels).toEqual({ keep: 'me', 'k 1': 'v', q: '/root' });
    expect(applyChanges(base, ['ENV HOME=/home/x']).Env).toEqual(['PATH=/bin', 'HOME=/home/x']);
    expect(refusal(() => applyChanges(base, ['ENV A=1 B']))).toMatch(/^Syntax error - can't find = in "B"/);
    expect(refusal(() => applyChanges(base, ['ENV ONLY']))).toBe('ENV must have two arguments');
  });

  it('takes EXPOSE, USER, WORKDIR, VOLUME, STOPSIGNAL, ONBUILD and HEALTHCHECK', () => {
    const c = applyChanges(base, [
      'EXPOSE 80 53/udp 8000-8002',
      'USER app:app',
      'WORKDIR rel/../dir',
      'VOLUME ["/a", "/b"]',
      'VOLUME /c /d',
      'STOPSIGNAL 9',
      'onbuild run echo hi',
      'HEALTHCHECK --interval=30s --retries=3 CMD curl -f http://localhost/',
    ]);
    expect(c.ExposedPorts).toEqual({ '80/tcp': {}, '53/udp': {}, '8000/tcp': {}, '8001/tcp': {}, '8002/tcp': {} });
    expect(c.User).toBe('app:app');
    expect(c.WorkingDir).toBe('/app/dir');
    expect(c.Volumes).toEqual({ '/a': {}, '/b': {}, '/c': {}, '/d': {} });
    expect(c.StopSignal).toBe('9');
    expect(c.OnBuild).toEqual(['run echo hi']);
    expect(c.Healthcheck).toEqual({ Test: ['CMD-SHELL', 'curl -f http://localhost/'], Interval: 30e9, Retries: 3 });
    expect(applyChanges(base, ['WORKDIR /abs']).WorkingDir).toBe('/abs');
    expect(applyChanges(base, ['HEALTHCHECK NONE']).Healthcheck).toEqual({ Test: ['NONE'] });
  });

  it('joins continued lines, skips comments, and refuses what dockerd refuses', () => {
    expect(applyChanges(base, ['# a comment', 'ENV A=1 \\', '  B=2']).Env).toEqual([
      'PATH=/bin',
      'HOME=/root',
      'A=1',
      'B=2',
    ]);
    expect(refusal(() => applyChanges(base, ['RUN make']))).toBe('run is not a valid change command');
    expect(refusal(() => applyChanges(base, ['FROM x']))).toBe('from is not a valid change command');
    expect(refusal(() => applyChanges(base, ['EXPOSE 99999']))).toMatch(/invalid containerPort/);
    expect(refusal(() => applyChanges(base, ['EXPOSE 80/xyz']))).toMatch(/invalid proto/);
    expect(refusal(() => applyChanges(base, ['STOPSIGNAL SIGNOPE']))).toBe('Invalid signal: SIGNOPE');
    expect(refusal(() => applyChanges(base, ['ONBUILD ONBUILD RUN x']))).toMatch(/Chaining ONBUILD/);
    expect(refusal(() => applyChanges(base, ['USER --chown=1 x']))).toBe('Unknown flag: chown');
    expect(refusal(() => applyChanges(base, ['HEALTHCHECK --retries=0 CMD x']))).toMatch(
      /--retries must be at least 1/,
    );
    // Only comments: dockerd's parser finds no instruction.
    expect(refusal(() => applyChanges(base, ['# nothing']))).toBe('file with no instructions');
    // As dockerd 20.10 at `docker commit --change ENTRYPOINT`: no entrypoint, the container's Cmd kept by the merge.
    const bare = mergeConfig(applyChanges({ Cmd: ['x'] }, ['ENTRYPOINT']), { Cmd: ['x'] });
    expect([bare.Entrypoint, bare.Cmd]).toEqual([null, ['x']]);
    // The config given is not changed.
    applyChanges(base, ['ENV X=1', 'LABEL a=b']);
    expect(base.Env).toEqual(['PATH=/bin', 'HOME=/root']);
    expect(base.Labels).toEqual({ keep: 'me' });
  });
});

describe('expandWord', () => {
  const env = ['A=1', 'EMPTY='];
  it.each([
    ['$A', '1'],
    ['${A}b', '1b'],
    ['${NOPE:-dflt}', 'dflt'],
    ['${EMPTY:-dflt}', 'dflt'],
    ['${EMPTY-dflt}', ''],
    ['${A:+alt}', 'alt'],
    ['${NOPE:+alt}', ''],
    ["'$A'", '$A'],
    ['"$A and \\$A"', '1 and $A'],
    ['\\$A', '$A'],
    ['a\\ b', 'a b'],
    ['$', '$'],
    ['cost $5', 'cost '],
  ])('%s → %s', (word, out) => expect(expandWord(word, env)).toBe(out));
});

describe('mergeConfig (dockerd daemon/commit.go merge)', () => {
  const ctr: ContainerConfigFields = {
    User: 'ctr',
    Env: ['PATH=/bin', 'A=ctr'],
    Cmd: ['ctr-cmd'],
    Entrypoint: ['/ctr-entry'],
    ExposedPorts: { '80/tcp': {} },
    Labels: { a: 'ctr', b: 'ctr' },
    WorkingDir: '/ctr',
    Volumes: { '/v': {} },
    StopSignal: 'SIGQUIT',
  };

  it('fills what the new config leaves unset from the container', () => {
    expect(mergeConfig({}, ctr)).toMatchObject({ ...ctr });
    const m = mergeConfig(
      { Env: ['A=new', 'B=1'], Labels: { a: 'new' }, ExposedPorts: { '443/tcp': {} }, Volumes: { '/w': {} } },
      ctr,
    );
    expect(m.Env).toEqual(['A=new', 'B=1', 'PATH=/bin']);
    expect(m.Labels).toEqual({ a: 'new', b: 'ctr' });
    expect(m.ExposedPorts).toEqual({ '80/tcp': {}, '443/tcp': {} });
    expect(m.Volumes).toEqual({ '/w': {}, '/v': {} });
  });

  it('takes the container Cmd only when neither Cmd nor Entrypoint is set', () => {
    expect(mergeConfig({ Cmd: ['mine'] }, ctr)).toMatchObject({ Cmd: ['mine'], Entrypoint: ['/ctr-entry'] });
    const entry = mergeConfig({ Entrypoint: ['/mine'] }, ctr);
    expect(entry.Entrypoint).toEqual(['/mine']);
    expect(entry.Cmd).toBeUndefined();
    expect(mergeConfig({ Entrypoint: ['/mine'], Cmd: null }, ctr).Cmd).toBeNull();
  });
});

describe('commitReference (dockerd RepoTagReference)', () => {
  it('normalises, defaults the tag, and lets `tag` win', () => {
    expect(commitReference(undefined, 'x')).toBeUndefined();
    expect(commitReference('', '')).toBeUndefined();
    expect(commitReference('app', undefined)).toBe('docker.io/library/app:latest');
    expect(commitReference('me/app:v1', undefined)).toBe('docker.io/me/app:v1');
    expect(commitReference('me/app:v1', 'v2')).toBe('docker.io/me/app:v2');
    expect(commitReference('127.0.0.1:5000/app', 'x')).toBe('127.0.0.1:5000/app:x');
  });

  it('refuses what dockerd refuses', () => {
    expect(refusal(() => commitReference('Bad Repo', undefined))).toMatch(/^invalid reference format/);
    expect(refusal(() => commitReference('Upper', undefined))).toMatch(/must be lowercase/);
    expect(refusal(() => commitReference('ok', 'bad tag'))).toBe('invalid tag format');
    expect(refusal(() => commitReference(`ok@sha256:${'a'.repeat(64)}`, undefined))).toBe(
      'cannot commit to digest reference',
    );
  });
});
