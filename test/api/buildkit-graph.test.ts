// `docker build` through BuildKit's API (the harness client, a buildx stand-in) on a
// multi-stage Dockerfile (issue 29, M5): a stage nothing needs is not run and has
// no vertex; independent stages run at the same time, each stage's vertices told
// together; a failing stage's step carries the build's error.
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildxBuild, type BuildOptions } from '../harness/buildkit-client.js';
import { useEnv } from '../harness/env.js';
import { scratchDir } from '../harness/tmp.js';

const ctx = useEnv();

function contextOf(dockerfile: string[]): string {
  const dir = scratchDir('bk-graph-');
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'Dockerfile'), `${dockerfile.join('\n')}\n`);
  return dir;
}

const build = (o: BuildOptions) => buildxBuild(ctx.daemon.socket, o);

/** Marks `me` in a cache mount both stages share, then waits (at most 10 s) for `other`'s mark: only a RUN running alongside the other's passes. */
const meet = (cache: string, me: string, other: string) =>
  `RUN --mount=type=cache,id=${cache},target=/c,sharing=shared echo in-${me}; touch /c/${me}; ` +
  `i=0; while [ $i -lt 100 ] && ! [ -e /c/${other} ]; do sleep 0.1; i=$((i+1)); done; test -e /c/${other} && echo ${me} > /met`;

describe('docker build through BuildKit: the stages as a graph', () => {
  it('skips the stages nothing needs (FROM, COPY --from by name or index, RUN --mount=from count) and runs the independent ones at the same time', async () => {
    const cache = `bk-graph-${randomBytes(6).toString('hex')}`;
    const dir = contextOf([
      `FROM ${ctx.env.busybox} AS unused`,
      'RUN echo unused-ran && exit 3',
      `FROM ${ctx.env.busybox} AS a`,
      meet(cache, 'a', 'b'),
      `FROM ${ctx.env.busybox} AS b`,
      meet(cache, 'b', 'a'),
      `FROM ${ctx.env.busybox} AS mounted`,
      'RUN echo m > /m',
      `FROM ${ctx.env.busybox}`,
      'COPY --from=1 /met /a',
      'COPY --from=b /met /b',
      'RUN --mount=type=bind,from=mounted,target=/mnt cat /a /b /mnt/m',
    ]);
    const r = await build({ context: dir, tags: 'bk-graph:1', frontendAttrs: { 'force-network-mode': 'none' } });
    expect(r.solve.message).toBe('');
    expect(r.solve.code).toBe(0);
    const steps = r.vertices.map((v) => v.name).filter((n) => n.startsWith('['));
    expect(steps.some((n) => n.includes('unused'))).toBe(false);
    expect(r.vertices.some((v) => v.logs.includes('unused-ran'))).toBe(false);
    // Each stage's vertices together, in Dockerfile order, though a and b ran at once.
    const staged = steps.filter((n) => !n.startsWith('[internal]'));
    expect(staged).toEqual([
      `[a 1/2] FROM ${ctx.env.busybox}`,
      `[a 2/2] ${meet(cache, 'a', 'b')}`,
      `[b 1/2] FROM ${ctx.env.busybox}`,
      `[b 2/2] ${meet(cache, 'b', 'a')}`,
      `[mounted 1/2] FROM ${ctx.env.busybox}`,
      '[mounted 2/2] RUN echo m > /m',
      `[stage-4 1/4] FROM ${ctx.env.busybox}`,
      '[stage-4 2/4] COPY --from=1 /met /a',
      '[stage-4 3/4] COPY --from=b /met /b',
      '[stage-4 4/4] RUN --mount=type=bind,from=mounted,target=/mnt cat /a /b /mnt/m',
    ]);
    expect(r.vertices.find((v) => v.name.startsWith('[stage-4 4/4]'))?.logs).toBe('a\nb\nm\n');
    for (const me of ['a', 'b']) {
      const run = r.vertices.find((v) => v.name.startsWith(`[${me} 2/2]`))!;
      expect(run).toMatchObject({ completed: true, logs: `in-${me}\n` });
      expect(run.error).toBeUndefined();
    }
    expect((await ctx.daemon.request('GET', '/images/bk-graph:1/json')).status).toBe(200);
  });

  it('a failing stage stops the others and fails the build with its step’s error, its vertex the one marked', async () => {
    const cache = `bk-graph-${randomBytes(6).toString('hex')}`;
    const containers = async () => (await ctx.daemon.request('GET', '/containers/json?all=1')).json.length as number;
    const before = await containers();
    const dir = contextOf([
      `FROM ${ctx.env.busybox} AS slow`,
      // Would hold the build for 10 minutes if nothing stopped it.
      `RUN --mount=type=cache,id=${cache},target=/c,sharing=shared touch /c/slow; sleep 600`,
      `FROM ${ctx.env.busybox} AS bad`,
      `RUN --mount=type=cache,id=${cache},target=/c,sharing=shared i=0; while [ $i -lt 100 ] && ! [ -e /c/slow ]; do sleep 0.1; i=$((i+1)); done; echo bad-ran; exit 4`,
      'FROM slow',
      'COPY --from=bad /bin/busybox /b',
    ]);
    const r = await build({ context: dir, tags: 'bk-graph:bad', frontendAttrs: { 'force-network-mode': 'none' } });
    expect(r.solve.code).toBe(2);
    expect(r.solve.message).toMatch(/^executor failed running \[\/bin\/sh -c .*echo bad-ran; exit 4\]: exit code: 4$/);
    const failed = r.vertices.filter((v) => v.error);
    expect(failed.map((v) => v.name)).toEqual([expect.stringMatching(/^\[bad 2\/2\] RUN /)]);
    expect(failed[0]!.logs).toBe('bad-ran\n');
    expect((await ctx.daemon.request('GET', '/images/bk-graph:bad/json')).status).toBe(404);
    // The stopped RUN's container is gone, as the failed one's.
    expect(await containers()).toBe(before);
  }, 120_000);
});
