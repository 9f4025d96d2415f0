// `docker build` (CLI 28, no buildx) against berthd: with DOCKER_BUILDKIT=0,
// and plain, which without buildx falls back to the same classic builder
// (POST /build) after a deprecation notice. Multi-stage with --target and
// COPY --from, cache hits and misses, .dockerignore, ARG/ENV substitution,
// ONBUILD, a failing RUN, an unconsumed build arg, -q; the output is dockerd
// 20.10's (see the captures in the builder's tests).
import { beforeAll, describe, expect, it } from 'vitest';
import {
  ARG_ENV_OUT,
  argEnv,
  buildArgs,
  buildLeftovers,
  cacheHits,
  cacheSteps,
  contextDirs,
  DOCKERIGNORE_LISTING,
  dockerignore,
  FAILING_RUN_ERROR,
  failingRun,
  MULTI_STAGE_OUT,
  multiStage,
  ONBUILD_OUT,
  onbuildBase,
  onbuildChild,
  steps,
  UNUSED_WARNING,
  writeContext,
} from '../harness/build.js';
import { type Cli, dockerCli } from '../harness/cli.js';
import { useEnv } from '../harness/env.js';

const ctx = useEnv();
let docker: Cli;

beforeAll(() => {
  docker = dockerCli(ctx.daemon);
});

const context = contextDirs();

/** The two ways the CLI reaches the classic builder on these machines. */
const MODES = [
  { name: 'DOCKER_BUILDKIT=0', env: { DOCKER_BUILDKIT: '0' }, notice: 'BuildKit is currently disabled' },
  { name: 'plain (no buildx)', env: {}, notice: 'Install the buildx component to build images with BuildKit' },
] as const;

/** `docker build ARGS DIR` with `env` (DOCKER_BUILDKIT unset unless given); its result, whatever the exit code. */
const build = (env: Record<string, string>, dir: string, args: string[]) =>
  docker(['build', ...args, dir], { timeoutMs: 120_000, env: { DOCKER_BUILDKIT: '', ...env } });

const run = async (image: string) => docker.ok(['run', '--rm', image]);

describe.each(MODES)('docker build, $name', ({ name, env, notice }) => {
  const tag = (t: string) => `cli-build-${name.startsWith('plain') ? 'plain' : 'bk0'}-${t}`;

  it('goes through the classic builder (the notice the CLI prints, the steps)', async () => {
    const r = await build(env, context(cacheSteps(ctx.env.busybox)), ['--no-cache', '-t', tag('notice')]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain('DEPRECATED: The legacy builder is deprecated');
    expect(r.stderr).toContain(notice);
    expect(r.stdout).toMatch(/^Sending build context to Docker daemon {2}\d/m);
    expect(steps(r.stdout)).toEqual([
      `Step 1/5 : FROM ${ctx.env.busybox}`,
      'Step 2/5 : COPY a.txt /a.txt',
      'Step 3/5 : RUN cat /a.txt > /ran.txt',
      'Step 4/5 : COPY b.txt /b.txt',
      'Step 5/5 : CMD ["cat", "/ran.txt", "/b.txt"]',
    ]);
    expect(r.stdout).toMatch(/^ ---> Running in [0-9a-f]{12}$/m);
    expect(r.stdout).toMatch(/^Removing intermediate container [0-9a-f]{12}$/m);
    const built = /^Successfully built ([0-9a-f]{12})$/m.exec(r.stdout)?.[1];
    expect(built).toBeDefined();
    expect(r.stdout).toContain(`Successfully tagged ${tag('notice')}:latest\n`);
    expect((await docker.ok(['images', '-q', tag('notice')])).trim()).toBe(built);
    expect(await run(tag('notice'))).toBe('a-1\nb-1\n');
  });

  it('multi-stage with --target and COPY --from', async () => {
    const r = await build(env, context(multiStage(ctx.env.busybox)), ['--target', 'final', '-t', tag('multi')]);
    expect(r.code, r.stderr).toBe(0);
    // The stage past the target is neither built nor counted.
    expect(r.stdout).not.toContain('past the target');
    expect(steps(r.stdout).at(-1)).toBe('Step 6/6 : CMD ["cat", "/copied.txt"]');
    expect(steps(r.stdout)).toContain('Step 5/6 : COPY --from=builder /out.txt /copied.txt');
    expect(await run(tag('multi'))).toBe(MULTI_STAGE_OUT);
    // Without --target the last stage is built, and its RUN fails.
    const all = await build(env, context(multiStage(ctx.env.busybox)), []);
    expect(all.code).toBe(7);
    expect(all.stderr).toContain(
      "The command '/bin/sh -c echo this stage is past the target; exit 7' returned a non-zero code: 7",
    );
  });

  it('uses the cache, and a changed file invalidates from its COPY on', async () => {
    const dir = context(cacheSteps(ctx.env.busybox));
    // A first build on this daemon with these contents: nothing to use.
    writeContext(dir, { 'a.txt': `a-${name}\n` });
    const first = await build(env, dir, ['-t', tag('cache')]);
    expect(first.code, first.stderr).toBe(0);
    expect(cacheHits(first.stdout)).toBe(0);

    const again = await build(env, dir, ['-t', tag('cache')]);
    expect(again.code, again.stderr).toBe(0);
    expect(cacheHits(again.stdout)).toBe(4);
    expect(again.stdout).not.toContain('Running in');
    const id = (s: string) => /^Successfully built ([0-9a-f]{12})$/m.exec(s)?.[1];
    expect(id(again.stdout)).toBe(id(first.stdout));

    // b.txt changed: steps 2 and 3 still come from the cache, 4 and 5 are made again.
    writeContext(dir, { 'b.txt': 'b-2\n' });
    const b = await build(env, dir, ['-t', tag('cache')]);
    expect(b.code, b.stderr).toBe(0);
    expect(cacheHits(b.stdout)).toBe(2);
    expect(b.stdout).toMatch(/Step 3\/5 : RUN cat \/a.txt > \/ran.txt\n ---> Using cache\n/);
    expect(b.stdout).toMatch(/Step 4\/5 : COPY b.txt \/b.txt\n ---> [0-9a-f]{12}\n/);
    expect(await run(tag('cache'))).toBe(`a-${name}\nb-2\n`);

    // a.txt changed: nothing after FROM is cached, the RUN runs again.
    writeContext(dir, { 'a.txt': `a-3-${name}\n` });
    const a = await build(env, dir, ['-t', tag('cache')]);
    expect(a.code, a.stderr).toBe(0);
    expect(cacheHits(a.stdout)).toBe(0);
    expect(a.stdout).toContain('Running in');
    expect(await run(tag('cache'))).toBe(`a-3-${name}\nb-2\n`);

    // --no-cache: every step made again.
    const none = await build(env, dir, ['--no-cache', '-t', tag('cache')]);
    expect(none.code, none.stderr).toBe(0);
    expect(cacheHits(none.stdout)).toBe(0);
  });

  it('leaves out what .dockerignore names', async () => {
    const r = await build(env, context(dockerignore(ctx.env.busybox)), ['-t', tag('ignore')]);
    expect(r.code, r.stderr).toBe(0);
    expect(await docker.ok(['run', '--rm', tag('ignore'), 'cat', '/listing.txt'])).toBe(DOCKERIGNORE_LISTING);
  });

  it('substitutes ARG and ENV values, with build args and ARG before FROM', async () => {
    const r = await build(env, context(argEnv()), [
      '--build-arg',
      `BASE_IMAGE=${ctx.env.busybox}`,
      '--build-arg',
      'DIR=/srv',
      '-t',
      tag('argenv'),
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).not.toContain('[Warning]');
    expect(await run(tag('argenv'))).toBe(ARG_ENV_OUT);
    const cfg = JSON.parse(await docker.ok(['image', 'inspect', '--format', '{{json .Config}}', tag('argenv')]));
    expect(cfg.WorkingDir).toBe('/srv/app');
    expect(cfg.Env).toEqual(expect.arrayContaining(['APP=/srv/app', 'NAME=berth']));
    // A build arg is not part of the image's environment.
    expect(cfg.Env.some((e: string) => e.startsWith('DIR='))).toBe(false);
  });

  it('runs ONBUILD triggers in a child build', async () => {
    const parent = tag('onbuild-parent');
    const p = await build(env, context(onbuildBase(ctx.env.busybox)), ['-t', parent]);
    expect(p.code, p.stderr).toBe(0);
    const onbuild = JSON.parse(await docker.ok(['image', 'inspect', '--format', '{{json .Config.OnBuild}}', parent]));
    expect(onbuild).toEqual(['COPY trigger.txt /trigger.txt', 'RUN echo ran the RUN trigger >> /trigger.txt']);
    const c = await build(env, context(onbuildChild(parent)), ['-t', tag('onbuild-child')]);
    expect(c.code, c.stderr).toBe(0);
    expect(c.stdout).toContain('# Executing 2 build triggers\n');
    expect(await run(tag('onbuild-child'))).toBe(ONBUILD_OUT);
    // Triggers are not inherited by the child's own children.
    expect(await docker.ok(['image', 'inspect', '--format', '{{json .Config.OnBuild}}', tag('onbuild-child')])).toMatch(
      /^(null|\[\])\n$/,
    );
  });

  it('fails on a failing RUN with its exit code in the message', async () => {
    // No cache: the output of the step before the failure is printed only when it runs.
    const r = await build(env, context(failingRun(ctx.env.busybox)), ['--no-cache', '-t', tag('fail')]);
    // The CLI exits with the code of the errorDetail record: the RUN's own.
    expect(r.code).toBe(3);
    expect(r.stdout).toContain('before the failure\n');
    expect(r.stdout).not.toContain('never');
    expect(r.stderr).toContain(FAILING_RUN_ERROR);
    expect(r.stdout).not.toContain('Successfully built');
    expect((await docker.ok(['images', '-q', tag('fail')])).trim()).toBe('');
  });

  it('warns about a build arg no ARG consumed', async () => {
    const r = await build(env, context(buildArgs(ctx.env.busybox)), [
      '--build-arg',
      'USED=given',
      '--build-arg',
      'UNUSED=x',
      '--build-arg',
      'HTTP_PROXY=http://proxy.invalid:3128',
      '-t',
      tag('args'),
    ]);
    expect(r.code, r.stderr).toBe(0);
    // The predefined proxy args are never reported.
    expect(r.stdout).toContain(`${UNUSED_WARNING}\n`);
    expect(r.stdout.indexOf(UNUSED_WARNING)).toBeLessThan(r.stdout.indexOf('Successfully built'));
    expect(await run(tag('args'))).toBe('used=given\n');
  });

  it('-q prints only the image id', async () => {
    const r = await build(env, context(buildArgs(ctx.env.busybox)), ['-q']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^sha256:[0-9a-f]{64}\n$/);
  });

  it("leaves no build container behind but the failed RUN steps' (no --force-rm)", async () => {
    const left = await buildLeftovers(ctx.daemon);
    expect(left.others).toEqual([]);
    expect(left.failedSteps).toContain("/bin/sh -c 'exit 3'");
    for (const c of (await docker.ok(['ps', '-a', '-q'])).split('\n').filter(Boolean)) await docker.ok(['rm', c]);
  });
});

describe('docker build errors', () => {
  it('an unknown instruction', async () => {
    const r = await build({ DOCKER_BUILDKIT: '0' }, context({ Dockerfile: `FROM ${ctx.env.busybox}\nFOO bar\n` }), []);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('Error response from daemon: dockerfile parse error line 2: unknown instruction: FOO');
  });

  it('COPY of a file the context lacks', async () => {
    const r = await build(
      { DOCKER_BUILDKIT: '0' },
      context({ Dockerfile: `FROM ${ctx.env.busybox}\nCOPY nothere.txt /x\n` }),
      [],
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      'COPY failed: file not found in build context or excluded by .dockerignore: stat nothere.txt: file does not exist',
    );
  });

  it('DOCKER_BUILDKIT=1 without buildx fails in the CLI, before any request', async () => {
    const r = await build({ DOCKER_BUILDKIT: '1' }, context(buildArgs(ctx.env.busybox)), []);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('BuildKit is enabled but the buildx component is missing or broken');
  });
});
