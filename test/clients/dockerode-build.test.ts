// dockerode 5 `buildImage` against berthd, read with followProgress as its
// users do: with `{ context, src }` (dockerode packs and gzips the files,
// applying .dockerignore itself) and with a tar stream of our own holding
// every file (berthd applies .dockerignore). Multi-stage with target and COPY
// --from, cache hits and misses, ARG/ENV, ONBUILD, a failing RUN, an
// unconsumed build arg, X-Registry-Config.
import Docker from 'dockerode';
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  ARG_ENV_OUT,
  argEnv,
  type BuildRecord,
  buildArgs,
  buildLeftovers,
  cacheHits,
  cacheSteps,
  contextDirs,
  contextTar,
  DOCKERIGNORE_LISTING,
  dockerignore,
  FAILING_RUN_ERROR,
  failingRun,
  MULTI_STAGE_OUT,
  multiStage,
  ONBUILD_OUT,
  onbuildBase,
  onbuildChild,
  UNUSED_WARNING,
  writeContext,
} from '../harness/build.js';
import { useEnv } from '../harness/env.js';
import { demuxText } from '../harness/streams.js';

const ctx = useEnv();
let docker: Docker;

beforeAll(() => {
  docker = new Docker({ socketPath: ctx.daemon.socket });
});

const context = contextDirs();

/** Every file under `dir`, relative: dockerode's `src`. */
function filesUnder(dir: string, rel = ''): string[] {
  return readdirSync(path.join(dir, rel)).flatMap((n) => {
    const r = rel ? `${rel}/${n}` : n;
    return statSync(path.join(dir, r)).isDirectory() ? filesUnder(dir, r) : [r];
  });
}

/** buildImage, then followProgress to the end; resolves with every record and the printed text. */
async function build(
  file: string | NodeJS.ReadableStream,
  opts: Docker.ImageBuildOptions = {},
): Promise<{ records: BuildRecord[]; text: string; err?: Error }> {
  const stream = await docker.buildImage(
    typeof file === 'string' ? { context: file, src: filesUnder(file) } : file,
    opts,
  );
  return new Promise((resolve) => {
    docker.modem.followProgress(stream, (err: Error | null, records: BuildRecord[]) =>
      resolve({
        records,
        text: records.map((r) => r.stream ?? '').join(''),
        err: err ?? undefined,
      }),
    );
  });
}

/** Runs `image` (its CMD, or `cmd`) to its end; resolves with its stdout. */
async function run(image: string, cmd?: string[]): Promise<string> {
  const c = await docker.createContainer({ Image: image, Cmd: cmd });
  await c.start();
  await c.wait();
  const out = demuxText((await c.logs({ stdout: true })) as unknown as Buffer);
  await c.remove();
  return out;
}

describe('dockerode buildImage', () => {
  it('multi-stage with target and COPY --from, the aux record carrying the id', async () => {
    const r = await build(context(multiStage(ctx.env.busybox)), { t: 'dockerode-multi', target: 'final' });
    expect(r.err).toBeUndefined();
    expect(r.records.find((x) => x.error)).toBeUndefined();
    expect(r.text).not.toContain('past the target');
    const id = r.records.filter((x) => x.aux?.ID).at(-1)?.aux?.ID;
    expect(id).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect((await docker.getImage('dockerode-multi').inspect()).Id).toBe(id);
    expect(r.text).toContain(`Successfully built ${id!.slice(7, 19)}\n`);
    expect(r.text).toContain('Successfully tagged dockerode-multi:latest\n');
    expect(await run('dockerode-multi')).toBe(MULTI_STAGE_OUT);
  });

  it('uses the cache, and a changed file invalidates from its COPY on', async () => {
    const dir = context(cacheSteps(ctx.env.busybox));
    writeContext(dir, { 'a.txt': 'a-dockerode\n' });
    expect(cacheHits((await build(dir, { t: 'dockerode-cache' })).text)).toBe(0);
    expect(cacheHits((await build(dir, { t: 'dockerode-cache' })).text)).toBe(4);
    writeContext(dir, { 'b.txt': 'b-2\n' });
    expect(cacheHits((await build(dir, { t: 'dockerode-cache' })).text)).toBe(2);
    expect(await run('dockerode-cache')).toBe('a-dockerode\nb-2\n');
    writeContext(dir, { 'a.txt': 'a-3\n' });
    expect(cacheHits((await build(dir, { t: 'dockerode-cache' })).text)).toBe(0);
    expect(await run('dockerode-cache')).toBe('a-3\nb-2\n');
    expect(cacheHits((await build(dir, { t: 'dockerode-cache', nocache: true })).text)).toBe(0);
  });

  it('.dockerignore applied by dockerode (context and src)', async () => {
    const r = await build(context(dockerignore(ctx.env.busybox)), { t: 'dockerode-ignore' });
    expect(r.err).toBeUndefined();
    // dockerode's packing leaves out the empty directory a `**` exclusion emptied; the files are the point.
    const listing = await run('dockerode-ignore', ['cat', '/listing.txt']);
    expect(listing.split('\n').filter((l) => !l.endsWith('/deeper'))).toEqual(
      DOCKERIGNORE_LISTING.split('\n').filter((l) => !l.endsWith('/deeper')),
    );
  });

  it('.dockerignore applied by berthd to a tar holding every file', async () => {
    const tar = await contextTar(dockerignore(ctx.env.busybox));
    const r = await build(Readable.from([tar]), { t: 'dockerode-ignore-raw' });
    expect(r.err).toBeUndefined();
    const listing = await run('dockerode-ignore-raw', ['cat', '/listing.txt']);
    expect(listing.split('\n').filter((l) => !l.endsWith('/deeper'))).toEqual(
      DOCKERIGNORE_LISTING.split('\n').filter((l) => !l.endsWith('/deeper')),
    );
  });

  it('substitutes ARG and ENV values, with buildargs and ARG before FROM', async () => {
    const r = await build(context(argEnv()), {
      t: 'dockerode-argenv',
      buildargs: { BASE_IMAGE: ctx.env.busybox, DIR: '/srv' },
    });
    expect(r.records.find((x) => x.error)).toBeUndefined();
    expect(await run('dockerode-argenv')).toBe(ARG_ENV_OUT);
  });

  it('runs ONBUILD triggers in a child build', async () => {
    await build(context(onbuildBase(ctx.env.busybox)), { t: 'dockerode-onbuild-parent' });
    const r = await build(context(onbuildChild('dockerode-onbuild-parent')), { t: 'dockerode-onbuild-child' });
    expect(r.text).toContain('# Executing 2 build triggers\n');
    expect(await run('dockerode-onbuild-child')).toBe(ONBUILD_OUT);
  });

  it('a failing RUN: the last record is the error, with the exit code', async () => {
    const r = await build(context(failingRun(ctx.env.busybox)), { t: 'dockerode-fail' });
    expect(r.text).toContain('before the failure\n');
    expect(r.records.at(-1)).toEqual({
      errorDetail: { code: 3, message: FAILING_RUN_ERROR },
      error: FAILING_RUN_ERROR,
    });
    // dockerode 5's followProgress hands back the records, the error among them, and no error of its own.
    expect(r.err).toBeUndefined();
    await expect(docker.getImage('dockerode-fail').inspect()).rejects.toMatchObject({ statusCode: 404 });
  });

  it('warns about a build arg no ARG consumed', async () => {
    const r = await build(context(buildArgs(ctx.env.busybox)), {
      t: 'dockerode-args',
      buildargs: { USED: 'given', UNUSED: 'x', no_proxy: 'localhost' },
    });
    expect(r.text).toContain(`${UNUSED_WARNING}\n`);
    expect(await run('dockerode-args')).toBe('used=given\n');
  });

  it('takes registryconfig (X-Registry-Config) and labels', async () => {
    const r = await build(context(buildArgs(ctx.env.busybox)), {
      t: 'dockerode-labels',
      labels: { 'org.example.built-by': 'dockerode' },
      registryconfig: { [ctx.env.registry.host]: { username: 'u', password: 'p' } },
    } as Docker.ImageBuildOptions);
    expect(r.records.find((x) => x.error)).toBeUndefined();
    expect((await docker.getImage('dockerode-labels').inspect()).Config.Labels).toEqual({
      'org.example.built-by': 'dockerode',
    });
  });

  it('an unknown instruction: buildImage rejects with the 400', async () => {
    const tar = await contextTar({ Dockerfile: 'FROM busybox\nFOO bar\n' });
    // docker-modem keeps a streamed request's error body in the message, not in `json`.
    await expect(docker.buildImage(Readable.from([tar]), {})).rejects.toMatchObject({
      statusCode: 400,
      message: '(HTTP code 400) unexpected - dockerfile parse error line 2: unknown instruction: FOO ',
    });
  });

  it("leaves no build container behind but the failed RUN step's (rm without forcerm)", async () => {
    expect(await buildLeftovers(ctx.daemon)).toEqual({ others: [], failedSteps: ["/bin/sh -c 'exit 3'"] });
  });
});
