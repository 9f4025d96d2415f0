// testcontainers-node (11.x) `GenericContainer.fromDockerfile` against berthd:
// it packs the context itself (applying .dockerignore), sends version=1, its
// session labels and buildargs/target through dockerode's buildImage, waits
// for the stream's end and then checks that the image exists. Multi-stage
// with a target and COPY --from, ARG/ENV with build args, ONBUILD, the cache
// (withCache(false) too), a failing RUN. Ryuk is off; what the tests start
// they stop.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenericContainer, type StartedTestContainer } from 'testcontainers';
import {
  ARG_ENV_OUT,
  argEnv,
  buildLeftovers,
  cacheSteps,
  contextDirs,
  DOCKERIGNORE_LISTING,
  dockerignore,
  failingRun,
  MULTI_STAGE_OUT,
  multiStage,
  ONBUILD_OUT,
  onbuildBase,
  onbuildChild,
  writeContext,
} from '../harness/build.js';
import { runToEnd, useEnv } from '../harness/env.js';
import { networkSetup, tearDownAfterAll } from '../harness/network.js';

const net = networkSetup();
tearDownAfterAll(net);
const ctx = useEnv({ args: net.args });
const started: StartedTestContainer[] = [];

beforeAll(() => {
  process.env.DOCKER_HOST = ctx.daemon.host;
  process.env.TESTCONTAINERS_RYUK_DISABLED = 'true';
});

afterAll(async () => {
  for (const c of started.splice(0)) await c.stop({ timeout: 1 }).catch(() => undefined);
});

const context = contextDirs();

/** Starts the image with `cmd` kept alive, then runs `cat` of `file` in it. */
async function catIn(c: GenericContainer, file: string): Promise<string> {
  const s = await c.withCommand(['sleep', '300']).start();
  started.push(s);
  const r = await s.exec(['cat', file]);
  await s.stop({ timeout: 1 });
  started.splice(started.indexOf(s), 1);
  expect(r.exitCode).toBe(0);
  return r.output;
}

/** The image's own CMD, run to its end: the container's logs. */
const runCmd = (image: string) => runToEnd(ctx.daemon, { Image: image });

describe('testcontainers fromDockerfile', () => {
  it('multi-stage with a target and COPY --from, then started', async () => {
    const image = 'localhost/tc-multi:1';
    const c = await GenericContainer.fromDockerfile(context(multiStage(ctx.env.busybox)))
      .withTarget('final')
      .build(image, { deleteOnExit: false });
    expect(await catIn(c, '/copied.txt')).toBe(MULTI_STAGE_OUT);
    const inspected = (await ctx.daemon.request('GET', `/images/${image}/json`)).json;
    // testcontainers labels what it builds.
    expect(Object.keys(inspected.Config.Labels)).toContain('org.testcontainers');
  });

  it('build args: ARG before FROM, ARG/ENV substitution', async () => {
    const image = 'localhost/tc-argenv:1';
    await GenericContainer.fromDockerfile(context(argEnv()))
      .withBuildArgs({ BASE_IMAGE: ctx.env.busybox, DIR: '/srv' })
      .build(image, { deleteOnExit: false });
    expect(await runCmd(image)).toBe(ARG_ENV_OUT);
  });

  it('.dockerignore', async () => {
    const c = await GenericContainer.fromDockerfile(context(dockerignore(ctx.env.busybox))).build(
      'localhost/tc-ignore:1',
      { deleteOnExit: false },
    );
    const listing = await catIn(c, '/listing.txt');
    // testcontainers packs files, not the empty directory a `**` exclusion leaves.
    expect(listing.split('\n').filter((l) => !l.endsWith('/deeper'))).toEqual(
      DOCKERIGNORE_LISTING.split('\n').filter((l) => !l.endsWith('/deeper')),
    );
  });

  it('ONBUILD triggers run in the child build', async () => {
    await GenericContainer.fromDockerfile(context(onbuildBase(ctx.env.busybox))).build('localhost/tc-onbuild:parent', {
      deleteOnExit: false,
    });
    await GenericContainer.fromDockerfile(context(onbuildChild('localhost/tc-onbuild:parent'))).build(
      'localhost/tc-onbuild:child',
      { deleteOnExit: false },
    );
    expect(await runCmd('localhost/tc-onbuild:child')).toBe(ONBUILD_OUT);
  });

  it('the cache: a rebuild gives the same image, a changed file a new one, withCache(false) a new one', async () => {
    const dir = context(cacheSteps(ctx.env.busybox));
    writeContext(dir, { 'a.txt': 'a-testcontainers\n' });
    const id = async (image: string) => (await ctx.daemon.request('GET', `/images/${image}/json`)).json.Id as string;
    // testcontainers' session label is fixed per process: the same context builds the same image.
    await GenericContainer.fromDockerfile(dir).build('localhost/tc-cache:1', { deleteOnExit: false });
    await GenericContainer.fromDockerfile(dir).build('localhost/tc-cache:2', { deleteOnExit: false });
    expect(await id('localhost/tc-cache:2')).toBe(await id('localhost/tc-cache:1'));
    writeContext(dir, { 'b.txt': 'b-2\n' });
    await GenericContainer.fromDockerfile(dir).build('localhost/tc-cache:3', { deleteOnExit: false });
    expect(await id('localhost/tc-cache:3')).not.toBe(await id('localhost/tc-cache:1'));
    expect(await runCmd('localhost/tc-cache:3')).toBe('a-testcontainers\nb-2\n');
    // The history shows what was reused: the RUN layer of :1 is :3's too.
    const hist = async (image: string) =>
      ((await ctx.daemon.request('GET', `/images/${image}/history`)).json as { Id: string; CreatedBy: string }[])
        .filter((h) => h.CreatedBy.includes('cat /a.txt > /ran.txt'))
        .map((h) => h.Id);
    expect(await hist('localhost/tc-cache:3')).toEqual(await hist('localhost/tc-cache:1'));
    await GenericContainer.fromDockerfile(dir).withCache(false).build('localhost/tc-cache:4', { deleteOnExit: false });
    expect(await hist('localhost/tc-cache:4')).not.toEqual(await hist('localhost/tc-cache:1'));
  });

  it('a failing RUN: build() rejects, no image', async () => {
    await expect(
      GenericContainer.fromDockerfile(context(failingRun(ctx.env.busybox))).build('localhost/tc-fail:1', {
        deleteOnExit: false,
      }),
    ).rejects.toThrow();
    expect((await ctx.daemon.request('GET', '/images/localhost/tc-fail:1/json')).status).toBe(404);
  });

  it("leaves no build container behind but the failed RUN step's (testcontainers builds without forcerm)", async () => {
    expect(await buildLeftovers(ctx.daemon)).toEqual({ others: [], failedSteps: ["/bin/sh -c 'exit 3'"] });
  });
});
