// `docker build --output type=local|tar` through BuildKit's API (docs/buildkit/protocol.md,
// recordings 05 and 06), played by the project's buildx stand-in: the result's files sent
// back over the session's FileSend (fsutil packets for local, a tar for tar), no image left
// behind, and a hostile receiver refused.
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import * as m from '../../src/api/buildkit/proto/messages.js';
import type { Msg } from '../../src/api/buildkit/proto/wire.js';
import {
  type BuildOptions,
  buildxBuild,
  Control,
  contextDir,
  newId,
  type Output,
  type SeenVertex,
} from '../harness/buildkit-client.js';
import { useEnv } from '../harness/env.js';
import { expectNoLeaks, expectNoLeaksAcross, holdings } from '../harness/leaks.js';
import { tarEntries } from '../harness/tar.js';
import { scratchDir } from '../harness/tmp.js';

const ctx = useEnv();

const build = (o: BuildOptions) => buildxBuild(ctx.daemon.socket, o);
const GO_DIR = 0x80000000;
const GO_SYMLINK = 1 << 27;

/** The local output's entries: path → [Go mode, linkname, bytes]. */
const listing = (out: Output) =>
  out.entries.map((e) => [
    String(e.stat.path),
    Number(e.stat.mode ?? 0) >>> 0,
    String(e.stat.linkname ?? ''),
    e.data?.toString() ?? null,
  ]);

const images = async () =>
  ((await ctx.daemon.request('GET', '/images/json?all=1')).json as Array<{ Id: string }>).length;
const rowsOf = (vs: SeenVertex[], name: string) => [...(vs.find((v) => v.name === name)?.rows.keys() ?? [])];

describe('--output type=local', () => {
  it('sends the image filesystem as fsutil packets: walk order, modes, symlinks, hard links, file bytes; no image kept', async () => {
    const dockerfile = [
      `FROM ${ctx.env.busybox} AS base`,
      'RUN mkdir -p /out/d && echo hi > /out/d/f && chmod 0750 /out/d/f && ln -s d/f /out/l && ln /out/d/f /out/h && ln -s / /out/root',
      'FROM scratch',
      'COPY --from=base /out/ /',
      'COPY a /a',
      '',
    ].join('\n');
    const dir = contextDir({ Dockerfile: dockerfile, a: 'A\n' });
    const before = await images();
    const r = await build({ context: dir, exporter: 'local', frontendAttrs: { 'force-network-mode': 'none' } });
    expect(r.solve.message).toBe('');
    expect(r.solve.code).toBe(0);
    expect(r.solve.messages[0]).toEqual({});
    const [out] = r.session.outputs;
    expect(out?.error).toBeUndefined();
    expect(out?.fault).toBeUndefined();
    expect(listing(out!)).toEqual([
      ['a', 0o644, '', 'A\n'],
      ['d', (GO_DIR | 0o755) >>> 0, '', null],
      ['d/f', 0o750, '', 'hi\n'],
      ['h', 0o750, 'd/f', null],
      ['l', (GO_SYMLINK | 0o777) >>> 0, 'd/f', null],
      // A link out of the tree is sent as the link: berthd never reads through it.
      ['root', (GO_SYMLINK | 0o777) >>> 0, '/', null],
    ]);
    expect(rowsOf(r.vertices, 'exporting to client')).toEqual(['copying files']);
    const exporting = r.vertices.find((v) => v.name === 'exporting to client')!;
    expect(exporting.completed && !exporting.error).toBe(true);
    expect(exporting.rows.get('copying files')?.completed).toBe(true);
    expect(r.vertices.map((v) => v.name)).not.toContain('exporting to image');
    // The base stage's RUN stays (a stage's image, the classic builder's cache); the exported
    // stage's images go: BuildKit's local exporter makes no image.
    expect(await images()).toBe(before + 1);
  });

  it('a cached build exports the same files and keeps the images that were there', async () => {
    const dir = contextDir({ Dockerfile: 'FROM scratch\nCOPY a /a\n', a: 'cached\n' });
    const first = await build({ context: dir, tags: 'bk-out-cached' });
    expect(first.solve.code).toBe(0);
    const r = await build({ context: dir, exporter: 'local' });
    expect(r.solve.code).toBe(0);
    expect(listing(r.session.outputs[0]!)).toEqual([['a', 0o644, '', 'cached\n']]);
    expect((await ctx.daemon.request('GET', '/images/bk-out-cached/json')).json.Id).toBe(first.imageId);
  });

  describe('a hostile receiver is refused with an ERR, and the build fails', () => {
    const cases: Array<[string, (stats: Msg[]) => Msg[], RegExp]> = [
      ['a REQ of a directory', () => [{ type: m.PacketType.REQ, ID: 1 }], /id 1, which is not a regular file/],
      ['a REQ of a symlink', (s) => [{ type: m.PacketType.REQ, ID: s.length - 1 }], /not a regular file/],
      ['a REQ out of range', () => [{ type: m.PacketType.REQ, ID: 99 }], /id 99/],
      [
        'the same file asked for twice',
        () => [
          { type: m.PacketType.REQ, ID: 2 },
          { type: m.PacketType.REQ, ID: 2 },
        ],
        /a second request for id 2/,
      ],
      ['a STAT from the receiver', () => [{ type: m.PacketType.STAT, stat: { path: 'x' } }], /a packet of type 0/],
      ['an ERR from the receiver', () => [{ type: m.PacketType.ERR, data: Buffer.from('disk full') }], /disk full/],
    ];
    expectNoLeaksAcross(() => ctx.daemon, 20_000);
    for (const [what, packets, error] of cases)
      it(what, async () => {
        const dir = scratchDir('bk-out-');
        mkdirSync(path.join(dir, 'd'));
        writeFileSync(path.join(dir, 'd/x'), 'x\n');
        writeFileSync(path.join(dir, 'Dockerfile'), 'FROM scratch\nCOPY . /\n');
        symlinkSync('d/x', path.join(dir, 'l'));
        const r = await build({ context: dir, exporter: 'local', serve: { receiverRaw: packets } });
        expect(r.solve.code).toBe(2);
        expect(r.solve.message).toMatch(error);
        // The tree it sent from: [Dockerfile, d, d/x, l].
        expect(r.session.outputs[0]?.entries.map((e) => e.stat.path)).toEqual(['Dockerfile', 'd', 'd/x', 'l']);
        const v = r.vertices.find((x) => x.name === 'exporting to client');
        expect(v?.error).toMatch(error);
        // berthd told the client why, as fsutil's sender does.
        expect(r.session.outputs[0]?.error).toMatch(error);
      });
  });

  it('a client that stops asking holds the export until its session goes: then the build is cancelled, the tree freed', async () => {
    const held = holdings(ctx.daemon);
    const dir = contextDir({ Dockerfile: 'FROM scratch\nCOPY . /\n', a: 'a\n', b: 'b\n' });
    const r = await build({
      context: dir,
      exporter: 'local',
      serve: {
        // Lists what it got and asks for nothing, never its FIN; then goes away.
        receiverRaw: (_stats, session) => {
          setTimeout(() => session.close(), 300);
          return [];
        },
      },
    });
    expect(r.solve.code).toBe(1); // CANCELLED
    await expectNoLeaks(ctx.daemon, held, 20_000);
    expect((await ctx.daemon.request('GET', '/_ping')).text).toBe('OK');
  });
});

describe('--output type=tar', () => {
  it('sends one tar of the filesystem, half-closes and waits for the client; no image kept', async () => {
    const dir = contextDir({ Dockerfile: 'FROM scratch\nCOPY . /\n', 'd/x': 'x\n', y: 'y\n' });
    symlinkSync('y', path.join(dir, 'ly'));
    const before = await images();
    const r = await build({ context: dir, exporter: 'tar' });
    expect(r.solve.code).toBe(0);
    expect(r.solve.messages[0]).toEqual({});
    const tar = r.session.outputs[0]?.tar;
    expect(tar?.length).toBeGreaterThan(0);
    expect(tar!.length % 512).toBe(0);
    const entries = await tarEntries(tar!);
    expect(entries.map(([name, body]) => [name, body])).toEqual([
      ['Dockerfile', 'FROM scratch\nCOPY . /\n'],
      ['d/', ''],
      ['d/x', 'x\n'],
      ['ly', ''],
      ['y', 'y\n'],
    ]);
    expect(rowsOf(r.vertices, 'exporting to client')).toEqual(['sending tarball']);
    expect(await images()).toBe(before);
  });

  it('a client gone mid-tar: the build cancelled, no more read, the tree freed', async () => {
    const held = holdings(ctx.daemon);
    const dir = contextDir({ Dockerfile: 'FROM scratch\nCOPY . /\n' });
    writeFileSync(path.join(dir, 'big'), Buffer.alloc(24 << 20, 7));
    const r = await build({ context: dir, exporter: 'tar', serve: { onOutput: (session) => session.close() } });
    expect(r.solve.code).toBe(1); // CANCELLED
    await expectNoLeaks(ctx.daemon, held, 20_000);
  });

  it('refuses exporter attributes it does not know, by name, and takes platform-split', async () => {
    const dir = contextDir({ Dockerfile: 'FROM scratch\nCOPY a /a\n', a: 'a\n' });
    const control = await Control.open(ctx.daemon.socket);
    try {
      const bad = await control.call('/moby.buildkit.v1.Control/Solve', m.SolveRequest, m.SolveResponse, {
        Ref: newId(),
        Exporter: 'tar',
        Session: newId(),
        ExporterAttrs: { compression: 'gzip' },
      });
      expect(bad.code).toBe(3);
      expect(bad.message).toBe("exporter attribute compression is not supported by berthd's tar exporter");
    } finally {
      control.close();
    }
    const split = await build({ context: dir, exporter: 'local', exporterAttrs: { 'platform-split': 'false' } });
    expect(split.solve.code).toBe(0);
    expect(listing(split.session.outputs[0]!)).toEqual([['a', 0o644, '', 'a\n']]);
  });

  it('a session that does not list FileSend: the export fails with dockerd words', async () => {
    const dir = contextDir({ Dockerfile: 'FROM scratch\nCOPY a /a\n', a: 'a\n' });
    const methods = ['/grpc.health.v1.Health/Check', '/moby.filesync.v1.FileSync/DiffCopy'];
    const r = await build({ context: dir, exporter: 'tar', methods });
    expect(r.solve.code).toBe(2);
    expect(r.solve.message).toMatch(/method \/moby.filesync.v1.FileSend\/DiffCopy not supported by the client/);
  });
});
