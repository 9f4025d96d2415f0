import { describe, expect, it } from 'vitest';
import * as m from '../../src/api/buildkit/proto/messages.js';
import type { Msg } from '../../src/api/buildkit/proto/wire.js';
import {
  type BuildOptions,
  buildxBuild,
  Control,
  contextDir,
  fileOf as readFile,
  newId,
  Session,
  type SeenVertex,
} from '../harness/buildkit-client.js';
import { waitFor } from '../harness/daemon.js';
import { useEnv } from '../harness/env.js';
import { expectNoLeaks, expectNoLeaksAcross, holdings } from '../harness/leaks.js';

const ctx = useEnv();

const build = (o: BuildOptions) => buildxBuild(ctx.daemon.socket, o);
const names = (vs: SeenVertex[]) => vs.map((v) => v.name);
const vertex = (vs: SeenVertex[], name: string) => {
  const v = vs.find((x) => x.name === name);
  if (!v) throw new Error(`no vertex ${name} in ${JSON.stringify(names(vs))}`);
  return v;
};

const fileOf = (image: string, file: string) => readFile(ctx.daemon, image, file);

const containers = async () =>
  ((await ctx.daemon.request('GET', '/containers/json?all=1')).json as Array<{ Id: string; State: string }>) ?? [];

describe('docker build through BuildKit', () => {
  it('scratch + COPY: the files over FileSync, the image tagged, its digests answered', async () => {
    const dir = contextDir({ Dockerfile: 'FROM scratch\nCOPY a /a\n', a: 'hello\n', 'sub/b': 'b\n' });
    const r = await build({ context: dir, tags: 'bk-scratch' });
    expect(r.bridge?.code).toBe(0);
    expect(r.solve.code).toBe(0);
    expect(r.status.code).toBe(0);
    const exported = r.solve.messages[0]?.ExporterResponse as Record<string, string>;
    expect(exported['containerimage.digest']).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(exported['containerimage.config.digest']).toBe(exported['containerimage.digest']);
    const image = await ctx.daemon.request('GET', '/images/bk-scratch/json');
    expect(image.json.Id).toBe(exported['containerimage.digest']);
    expect(await fileOf('bk-scratch', '/a')).toBe('hello\n');
    // LLBBridge.Solve's result carries the image config, as the exporter reads it.
    const result = r.bridge?.messages[0]?.result as Msg;
    const config = JSON.parse(
      Buffer.from((result.metadata as Record<string, Buffer>)['containerimage.config']!).toString(),
    );
    expect(config.rootfs.type).toBe('layers');
    expect((result.ref as Msg).id).toMatch(/^[0-9a-f]{25}$/);
    // The Dockerfile from its own dir, then .dockerignore, then the context.
    expect(r.session.syncs.map((s) => [s.dirName, s.followPaths])).toEqual([
      ['dockerfile', ['Dockerfile', 'Dockerfile.dockerignore']],
      ['context', ['.dockerignore']],
      ['context', []],
    ]);
    expect(names(r.vertices)).toEqual([
      '[internal] load build definition from Dockerfile',
      '[internal] load .dockerignore',
      '[internal] load build context',
      '[1/1] COPY a /a',
      'exporting to image',
    ]);
    for (const v of r.vertices) expect(v.completed && !v.error).toBe(true);
    expect(vertex(r.vertices, '[internal] load build context').rows.get('transferring context:')?.completed).toBe(true);
    expect([...vertex(r.vertices, 'exporting to image').rows.keys()]).toEqual([
      'exporting layers',
      `writing image ${exported['containerimage.digest']}`,
      'naming to docker.io/library/bk-scratch',
    ]);
  });

  it('a multi-stage build: --target, build args, labels, .dockerignore, two tags, RUN output as logs', async () => {
    const dockerfile = [
      `FROM ${ctx.env.busybox} AS base`,
      'ARG V',
      'COPY . /ctx/',
      'RUN echo "out-$V" && echo err-$V >&2 && ls -A /ctx',
      'FROM base AS never',
      'RUN echo never',
      '',
    ].join('\n');
    const dir = contextDir({ Dockerfile: dockerfile, keep: 'k\n', 'skip.txt': 's\n', '.dockerignore': 'skip*\n' });
    const r = await build({
      context: dir,
      tags: 'bk-multi:v1,bk-multi:v2',
      frontendAttrs: { target: 'base', 'build-arg:V': '7', 'label:l1': 'v1', 'force-network-mode': 'none' },
    });
    expect(r.solve.message).toBe('');
    expect(r.solve.code).toBe(0);
    expect(r.session.syncs.at(-1)?.excludes).toEqual(['skip*']);
    expect(names(r.vertices)).toEqual([
      '[internal] load build definition from Dockerfile',
      '[internal] load .dockerignore',
      '[internal] load build context',
      `[internal] load metadata for ${ctx.env.busybox}`,
      `[base 1/4] FROM ${ctx.env.busybox}`,
      '[base 3/4] COPY . /ctx/',
      '[base 4/4] RUN echo "out-$V" && echo err-$V >&2 && ls -A /ctx',
      'exporting to image',
    ]);
    const run = vertex(r.vertices, '[base 4/4] RUN echo "out-$V" && echo err-$V >&2 && ls -A /ctx');
    // stdout and stderr, and the context without what .dockerignore leaves out.
    expect(run.logs.split('\n').sort()).toEqual(['', '.dockerignore', 'Dockerfile', 'err-7', 'keep', 'out-7']);
    expect(run.lateLog).toBe(false);
    const image = (await ctx.daemon.request('GET', '/images/bk-multi:v2/json')).json;
    expect(image.RepoTags.sort()).toEqual(['bk-multi:v1', 'bk-multi:v2']);
    expect(image.Config.Labels).toEqual({ l1: 'v1' });

    // Again: every step from the cache, said so.
    const again = await build({
      context: dir,
      tags: 'bk-multi:v3',
      frontendAttrs: { target: 'base', 'build-arg:V': '7', 'label:l1': 'v1', 'force-network-mode': 'none' },
    });
    expect(again.solve.code).toBe(0);
    for (const name of [
      `[base 1/4] FROM ${ctx.env.busybox}`,
      '[base 3/4] COPY . /ctx/',
      '[base 4/4] RUN echo "out-$V" && echo err-$V >&2 && ls -A /ctx',
    ])
      expect(vertex(again.vertices, name).cached).toBe(true);
    expect(again.imageId).toBe(image.Id);
  });

  it('--pull (image-resolve-mode=pull) pulls the base again: its FROM not cached, the layers as its rows', async () => {
    const dir = contextDir({ Dockerfile: `FROM ${ctx.env.busybox}\nCOPY a /a\n`, a: 'a\n' });
    const r = await build({ context: dir, frontendAttrs: { 'image-resolve-mode': 'pull' } });
    expect(r.solve.code).toBe(0);
    const from = vertex(r.vertices, `[1/2] FROM ${ctx.env.busybox}`);
    expect(from.cached).toBe(false);
    const rows = [...from.rows.entries()];
    expect(rows.length).toBeGreaterThan(0);
    for (const [id, row] of rows) {
      expect(id).toMatch(/^sha256:[0-9a-f]+$/);
      expect(row.completed).toBe(true);
    }
  });

  it('a Dockerfile parse error fails the frontend, then Solve, in dockerd words', async () => {
    const dir = contextDir({ Dockerfile: `FROM ${ctx.env.busybox}\nNOTANINSTRUCTION x\n` });
    const r = await build({ context: dir, tags: 'bk-bad' });
    const message =
      'failed to solve with frontend dockerfile.v0: failed to create LLB definition: dockerfile parse error line 2: unknown instruction: NOTANINSTRUCTION';
    expect(r.bridge).toMatchObject({ code: 2, message });
    expect(r.solve).toMatchObject({ code: 2, message: `rpc error: code = Unknown desc = ${message}` });
    expect(r.status.code).toBe(0);
    // Found before the context is sent, as dockerd's frontend finds it (recording 08).
    expect(names(r.vertices)).toEqual([
      '[internal] load build definition from Dockerfile',
      '[internal] load .dockerignore',
    ]);
    expect(r.session.syncs.map((s) => s.followPaths)).toEqual([
      ['Dockerfile', 'Dockerfile.dockerignore'],
      ['.dockerignore'],
    ]);
    expect((await ctx.daemon.request('GET', '/images/bk-bad/json')).status).toBe(404);
  });

  it('a failing RUN: its vertex marked with the error after its output, Solve failed with it', async () => {
    const dir = contextDir({ Dockerfile: `FROM ${ctx.env.busybox}\nRUN echo before && exit 3\n` });
    const before = (await containers()).length;
    const r = await build({ context: dir, tags: 'bk-fail', frontendAttrs: { 'force-network-mode': 'none' } });
    const message = 'executor failed running [/bin/sh -c echo before && exit 3]: exit code: 3';
    expect(r.solve).toMatchObject({ code: 2, message });
    const run = vertex(r.vertices, '[2/2] RUN echo before && exit 3');
    expect(run).toMatchObject({ completed: true, error: message, logs: 'before\n', lateLog: false });
    expect(r.vertices.map((v) => v.name)).not.toContain('exporting to image');
    expect((await containers()).length).toBe(before);
  });

  it('the session closed mid-build aborts it: the RUN stopped, its container gone, the daemon serving on', async () => {
    const dir = contextDir({ Dockerfile: `FROM ${ctx.env.busybox}\nRUN sleep 60\n` });
    const before = (await containers()).length;
    const held = holdings(ctx.daemon);
    const r = await build({
      context: dir,
      tags: 'bk-gone',
      frontendAttrs: { 'force-network-mode': 'none' },
      during: async ({ session }) => {
        await waitFor(async () => (await containers()).some((c) => c.State === 'running'), 'the RUN', 30_000);
        session.close();
      },
    });
    expect(r.solve.code).toBe(1); // CANCELLED
    expect(r.bridge?.code).not.toBe(0);
    await waitFor(async () => (await containers()).length === before, 'the RUN container gone', 15_000);
    expect((await ctx.daemon.request('GET', '/images/bk-gone/json')).status).toBe(404);
    // The job, its session's connection, the RUN's container and mounts: all freed.
    await expectNoLeaks(ctx.daemon, held, 20_000);
    // The daemon builds on.
    const next = await build({ context: contextDir({ Dockerfile: 'FROM scratch\nCOPY a /a\n', a: 'a\n' }) });
    expect(next.solve.code).toBe(0);
  });

  describe('a hostile FileSync sender is refused, and nothing is written', () => {
    const stat = (p: string, extra: Msg = {}): Msg => ({
      type: m.PacketType.STAT,
      stat: { path: p, mode: 0o644, size: 1n, modTime: 1n, ...extra },
    });
    const dir = 0x80000000 | 0o755;
    const cases: Array<[string, Msg[], RegExp]> = [
      ['an absolute path', [stat('/etc/passwd'), {}], /not a clean relative path/],
      ['a path with ..', [stat('../x'), {}], /not a clean relative path/],
      ['entries out of order', [stat('b'), stat('a'), {}], /out of order/],
      ['a file in a directory never listed', [stat('d/x'), {}], /not in a directory listed before it/],
      [
        'DATA for a file never listed',
        [stat('a'), stat('b'), {}, { type: m.PacketType.DATA, ID: 7, data: Buffer.from('x') }],
        /not asked for \(id 7\)/,
      ],
      [
        'more bytes than the STAT said',
        [stat('a'), {}, { type: m.PacketType.DATA, ID: 0, data: Buffer.from('abcdef') }],
        /longer than its 1 bytes/,
      ],
      ['a hard link to nothing', [stat('a', { size: 0n, linkname: 'zz' }), {}], /hard link/],
      [
        'a file sent twice',
        [
          stat('a'),
          stat('b'),
          {},
          { type: m.PacketType.DATA, ID: 0, data: Buffer.from('x') },
          { type: m.PacketType.DATA, ID: 0 },
          { type: m.PacketType.DATA, ID: 0, data: Buffer.from('y') },
        ],
        /not asked for \(id 0\)/,
      ],
      ['a directory then a file climbing out', [stat('d', { mode: dir, size: 0n }), stat('d/..'), {}], /clean/],
    ];
    expectNoLeaksAcross(() => ctx.daemon, 20_000);
    for (const [what, packets, error] of cases)
      it(what, async () => {
        const d = contextDir({ Dockerfile: 'FROM scratch\nCOPY . /\n' });
        const r = await build({
          context: d,
          tags: 'bk-hostile',
          raw: (sync) => (sync.dirName === 'context' && !sync.followPaths.length ? packets : undefined),
        });
        expect(r.solve.code).toBe(2);
        expect(r.bridge?.message).toMatch(/invalid file sync from the client/);
        expect(r.bridge?.message).toMatch(error);
        expect((await ctx.daemon.request('GET', '/images/bk-hostile/json')).status).toBe(404);
      });
  });
});

describe('the calls in the order buildx makes them, and what is refused', () => {
  it('Ping and Status before their Solve wait for it; a job never made is not found', async () => {
    const control = await Control.open(ctx.daemon.socket);
    try {
      const ref = newId();
      const session = await Session.open(ctx.daemon.socket, { methods: [] });
      const status = control.start('/moby.buildkit.v1.Control/Status', m.StatusRequest, m.StatusResponse, { Ref: ref });
      const ping = control.call('/moby.buildkit.v1.frontend.LLBBridge/Ping', m.PingRequest, m.PongResponse, {}, ref);
      await new Promise((resolve) => setTimeout(resolve, 500));
      const solve = control.start('/moby.buildkit.v1.Control/Solve', m.SolveRequest, m.SolveResponse, {
        Ref: ref,
        Session: session.id,
        Internal: true,
      });
      const pong = await ping;
      expect(pong.code).toBe(0);
      const caps = ((pong.messages[0]?.FrontendAPICaps as Msg[] | undefined) ?? []).map((c) => c.ID);
      expect(caps).toContain('return');
      expect(caps).toContain('proto.refarray');
      await control.call(
        '/moby.buildkit.v1.frontend.LLBBridge/Return',
        m.ReturnRequest,
        m.ReturnResponse,
        { result: { ref: {} } },
        ref,
      );
      const [solved, statused] = await Promise.all([
        (async () => {
          const msgs: Msg[] = [];
          for (let x = await solve.next(); x; x = await solve.next()) msgs.push(x);
          return { msgs, ...(await solve.status) };
        })(),
        status.status,
      ]);
      expect(solved).toMatchObject({ code: 0, msgs: [{}] });
      expect(statused.code).toBe(0);
      // A Status that comes after its job ended still gets what there was, and its end.
      const late = await control.call('/moby.buildkit.v1.Control/Status', m.StatusRequest, m.StatusResponse, {
        Ref: ref,
      });
      expect(late.code).toBe(0);
      session.close();
      const nowhere = await control.call(
        '/moby.buildkit.v1.frontend.LLBBridge/Ping',
        m.PingRequest,
        m.PongResponse,
        {},
        newId(),
      );
      expect(nowhere.code).toBe(5);
      expect(nowhere.message).toMatch(/^no such job /);
    } finally {
      control.close();
    }
  });

  it('refuses by name what berthd does not do yet: other exporters, cache import, unknown frontend attrs, a session without FileSync', async () => {
    const control = await Control.open(ctx.daemon.socket);
    try {
      const oci = await control.call('/moby.buildkit.v1.Control/Solve', m.SolveRequest, m.SolveResponse, {
        Ref: newId(),
        Exporter: 'oci',
      });
      expect(oci.code).toBe(3);
      expect(oci.message).toMatch(/exporter "oci" is not supported/);
      const cache = await control.call('/moby.buildkit.v1.Control/Solve', m.SolveRequest, m.SolveResponse, {
        Ref: newId(),
        Exporter: 'moby',
        Cache: { Imports: [{ Type: 'registry' }] },
      });
      expect(cache.message).toMatch(/cache import is not supported/);
    } finally {
      control.close();
    }
    const dir = contextDir({ Dockerfile: 'FROM scratch\nCOPY a /a\n', a: 'a\n' });
    const attrs = await build({ context: dir, frontendAttrs: { 'cache-imports': '[]' } });
    expect(attrs.bridge).toMatchObject({ code: 3 });
    expect(attrs.bridge?.message).toMatch(/cache imports \(--cache-from\) are not supported/);
    const unknown = await build({ context: dir, frontendAttrs: { 'some-attr': 'x' } });
    expect(unknown.bridge?.message).toBe('the frontend attribute some-attr is not supported by berthd');
    const noSync = await build({ context: dir, methods: ['/grpc.health.v1.Health/Check'] });
    expect(noSync.solve.code).toBe(2);
    expect(noSync.bridge?.message).toMatch(/method \/moby.filesync.v1.FileSync\/DiffCopy not supported by the client/);
  });
});
