// POST /build's stages as a graph (issue 29, M5), against a real berthd and runc:
// every stage up to the target is built (dockerd's classic builder; BuildKit skips
// the unneeded ones), independent stages run at the same time, each stage's lines
// kept together in the stream, and the first stage to fail stops the others.
import { randomBytes } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { buildRaw } from '../harness/build.js';
import { useEnv, type Env } from '../harness/env.js';
import { demuxText } from '../harness/streams.js';
import { type TarEntry, tarOf } from '../harness/tar.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;

beforeAll(() => {
  env = ctx.env;
  d = ctx.daemon;
});

/** POST /build of a Dockerfile alone; the answer must be a stream (200). */
async function build(lines: string[], params: Record<string, string> = {}) {
  const raw = await tarOf([{ name: 'Dockerfile', body: lines.join('\n'), mode: 0o644 } satisfies TarEntry]);
  const b = await buildRaw(d, raw, params);
  expect(b.status, b.response.text).toBe(200);
  return { status: b.status, messages: b.records, out: b.text, id: b.id, error: b.error };
}

/** A file of an image, read by running it. */
async function cat(image: string, file: string): Promise<string> {
  const c = await d.request('POST', '/containers/create', { body: { Image: image, Cmd: ['cat', file] } });
  expect(c.status, c.text).toBe(201);
  const id = c.json.Id as string;
  await d.request('POST', `/containers/${id}/start`);
  await d.request('POST', `/containers/${id}/wait`);
  const logs = await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`);
  await d.request('DELETE', `/containers/${id}?force=1`);
  return demuxText(logs.body);
}

/**
 * A RUN that marks `me` in a cache mount both stages share, then waits (at most
 * 10 s) for `other`'s mark: it succeeds only when the other stage's RUN runs at
 * the same time.
 */
const meet = (cache: string, me: string, other: string) =>
  `RUN --mount=type=cache,id=${cache},target=/c,sharing=shared echo in-${me}; touch /c/${me}; ` +
  `i=0; while [ $i -lt 100 ] && ! [ -e /c/${other} ]; do sleep 0.1; i=$((i+1)); done; ` +
  `test -e /c/${other} && echo ${me}-met-${other} > /met`;

describe('POST /build: the stages as a graph', () => {
  it('builds every stage up to the target, as dockerd’s classic builder does, the unneeded ones too', async () => {
    // moby's TestBuildMultiStageOnBuild counts an image per stage; BuildKit skips (buildkit-graph.test.ts).
    const r = await build([
      `FROM ${env.busybox} AS unneeded`,
      'RUN echo unneeded-ran',
      `FROM ${env.busybox} AS dep`,
      'RUN echo dep > /dep',
      'FROM dep',
      'RUN cat /dep > /all',
      `FROM ${env.busybox} AS after`,
      'RUN echo after-ran',
    ]);
    expect(r.error).toBeUndefined();
    expect(r.out).toContain('unneeded-ran');
    expect(r.out).toContain(`Step 1/8 : FROM ${env.busybox} AS unneeded\n`);
    expect(r.messages.filter((m) => m.aux).length).toBe(4);
    const failing = await build(
      [`FROM ${env.busybox} AS broken`, 'RUN exit 7', `FROM ${env.busybox} AS wanted`, 'RUN true', 'FROM broken'],
      {
        target: 'wanted',
      },
    );
    expect(failing.messages.at(-1)?.errorDetail?.code).toBe(7);
  });

  it('runs independent stages at the same time, each stage’s lines kept together', async () => {
    const cache = `graph-${randomBytes(6).toString('hex')}`;
    const r = await build(
      [
        `FROM ${env.busybox} AS a`,
        meet(cache, 'a', 'b'),
        `FROM ${env.busybox} AS b`,
        meet(cache, 'b', 'a'),
        `FROM ${env.busybox}`,
        'COPY --from=a /met /a',
        'COPY --from=b /met /b',
      ],
      { nocache: '1' },
    );
    expect(r.error).toBeUndefined();
    expect(await cat(r.id!, '/a')).toBe('a-met-b\n');
    expect(await cat(r.id!, '/b')).toBe('b-met-a\n');
    // Stage b ran while a did, yet its lines come after all of a's.
    const at = (s: string) => r.out.indexOf(s);
    expect(at('Step 1/7 : FROM')).toBeLessThan(at('in-a\n'));
    expect(at('in-a\n')).toBeLessThan(at('Step 3/7 : FROM'));
    expect(at('Step 3/7 : FROM')).toBeLessThan(at('in-b\n'));
    expect(at('in-b\n')).toBeLessThan(at('Step 5/7 : FROM'));
    expect(r.messages.filter((m) => m.aux).length).toBe(3);
  });

  it('a failing stage stops the others: the build fails with its error, its lines last', async () => {
    const cache = `graph-${randomBytes(6).toString('hex')}`;
    const containers = async () => (await d.request('GET', '/containers/json?all=1')).json.length as number;
    const before = await containers();
    const r = await build(
      [
        `FROM ${env.busybox} AS slow`,
        // Would hold the build for 10 minutes if nothing stopped it.
        `RUN --mount=type=cache,id=${cache},target=/c,sharing=shared touch /c/slow; sleep 600`,
        `FROM ${env.busybox} AS bad`,
        `RUN --mount=type=cache,id=${cache},target=/c,sharing=shared i=0; while [ $i -lt 100 ] && ! [ -e /c/slow ]; do sleep 0.1; i=$((i+1)); done; echo bad-says; exit 5`,
        `FROM ${env.busybox}`,
        'COPY --from=slow /etc/hostname /s',
        'COPY --from=bad /etc/hostname /b',
      ],
      { forcerm: '1' },
    );
    expect(r.messages.at(-1)?.errorDetail?.code).toBe(5);
    expect(r.error).toContain('returned a non-zero code: 5');
    expect(r.out).toContain('bad-says');
    expect(r.out.lastIndexOf('Step 4/7 : RUN')).toBeGreaterThan(r.out.lastIndexOf('Step 2/7 : RUN'));
    expect(r.out).not.toContain('Step 5/7');
    // The stopped RUN's container is gone with the failed one's (forcerm).
    expect(await containers()).toBe(before);
  }, 120_000);
});
