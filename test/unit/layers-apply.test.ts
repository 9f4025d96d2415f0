// applyLayer against hostile archives (the breakout catalogue behind docs/security.md's "Hostile images", after
// moby's testBreakout and containerd's TestBreakouts) and for correctness.
// Real filesystem, run as root: owners, devices and trusted.* xattrs are real.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  mkdtemp,
  mkdir,
  writeFile,
  readFile,
  readdir,
  lstat,
  stat,
  rm,
  utimes,
  readlink,
  chmod,
} from 'node:fs/promises';
import { constants } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { randomBytes } from 'node:crypto';
import { applyLayer } from '../../src/engine/layers/apply.js';
import { encodeEntryHeader, bodyPadding, endOfArchive } from '../../src/engine/layers/tarformat.js';
import { native } from '../../src/engine/os/native.js';
import { isEngineError } from '../../src/errors.js';
import { tarOf, type TarEntry } from '../harness/tar.js';

type Entry = TarEntry;

const apply = async (entries: Entry[], dir: string, opts?: { trusted?: boolean }) =>
  applyLayer(Readable.from([await tarOf(entries)]), dir, opts);

/** Every path under `dir` (relative), not following symlinks. */
async function walk(dir: string, rel = ''): Promise<string[]> {
  const out: string[] = [];
  for (const name of (await readdir(path.join(dir, rel))).sort()) {
    const r = rel ? `${rel}/${name}` : name;
    out.push(r);
    if ((await lstat(path.join(dir, r))).isDirectory()) out.push(...(await walk(dir, r)));
  }
  return out;
}

let base: string;
let dest: string;
let victim: string;
let hello: string;
const HELLO = Buffer.from(`hello from the victim ${randomBytes(16).toString('hex')}\n`);

beforeEach(async () => {
  base = await mkdtemp(path.join(tmpdir(), 'berth-apply-'));
  dest = path.join(base, 'dest');
  victim = path.join(base, 'victim');
  hello = path.join(victim, 'hello');
  await mkdir(dest);
  await mkdir(victim, { mode: 0o755 });
  await writeFile(hello, HELLO, { mode: 0o644 });
  await chmod(hello, 0o644);
  await utimes(hello, 1_000_000, 1_000_000);
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

describe('applyLayer: breakouts', () => {
  /** moby's testBreakout checks, plus inode checks against hardlinks to the victim or a host file. */
  async function assertNoBreakout(): Promise<void> {
    expect((await readdir(victim)).sort()).toEqual(['hello']);
    const v = await stat(victim);
    expect(v.mode & 0o7777).toBe(0o755);
    const h = await lstat(hello);
    expect(h.isFile()).toBe(true);
    expect(h.mode & 0o7777).toBe(0o644);
    expect(h.size).toBe(HELLO.length);
    expect(h.mtimeMs).toBe(1_000_000_000);
    expect(h.nlink).toBe(1);
    expect(await readFile(hello)).toEqual(HELLO);
    const passwd = await lstat('/etc/passwd');
    for (const rel of await walk(dest)) {
      const st = await lstat(path.join(dest, rel));
      expect(st.ino === passwd.ino && st.dev === passwd.dev, `${rel} is /etc/passwd`).toBe(false);
      if (st.isFile())
        expect((await readFile(path.join(dest, rel))).equals(HELLO), `${rel} has hello's bytes`).toBe(false);
    }
    expect((await readdir(base)).sort()).toEqual(['dest', 'victim']);
  }

  /** The name that would reach `victim/<rest>` through a symlink to `target` placed at dest/<link>. */
  const through = (link: string, target: string, rest: string) => {
    const hostDir = path.resolve(path.dirname(path.join(dest, link)), target);
    return path.join(link, path.relative(hostDir, path.join(victim, rest)));
  };

  const file = (name: string, body = 'pwned', mode = 0o644): Entry => ({ name, type: 'file', body, mode });
  const sym = (name: string, linkname: string): Entry => ({ name, type: 'symlink', linkname });
  const hard = (name: string, linkname: string): Entry => ({ name, type: 'link', linkname });
  const dir = (name: string, mode = 0o777): Entry => ({ name, type: 'directory', mode });

  // Each case may be refused or may land inside the layer; it must never touch the victim.
  const cases: Array<[string, () => Entry[], 'rejects'?]> = [
    ['dot-dot name', () => [file('../victim/x'), file('../victim/hello')]],
    ['absolute name', () => [file(`${victim}/x`), file(`${hello}`)]],
    ['dot-dot after a component', () => [file('a/../../victim/x')]],
    ['many dot-dots', () => [file(`../../../../../../..${victim}/x`)]],
    ['symlink to / then write through', () => [sym('evil', '/'), file(`evil${victim}/x`), file(`evil${hello}`)]],
    [
      'symlink up and out',
      () => [sym('evil', '..'), file(through('evil', '..', 'x')), file(through('evil', '..', 'hello'))],
    ],
    ['symlink ../../.. then write through', () => [sym('evil', '../../..'), file(through('evil', '../../..', 'x'))]],
    ['symlink to the victim dir, absolute', () => [sym('v', victim), file('v/x'), file('v/hello')]],
    ['symlink to the victim dir, relative', () => [sym('v', '../victim'), file('v/x'), file('v/hello')]],
    [
      'relative symlink chain',
      () => [dir('d', 0o755), sym('d/l1', '..'), sym('l2', 'd/l1/..'), file('l2/victim/x'), file('l2/victim/hello')],
    ],
    [
      'symlink chain absolute then relative',
      () => [sym('a', '/b/..'), sym('b', '..'), file(`a/../victim/x`), file('b/victim/x')],
    ],
    [
      'file entry over a symlink to the victim file',
      () => [sym('h', '../victim/hello'), file('h', 'overwritten', 0o777)],
    ],
    ['symlink over a symlink', () => [sym('h', '../victim/hello'), sym('h', '/etc/passwd'), file('h')]],
    ['directory over a symlink to the victim dir', () => [sym('s', '../victim'), dir('s'), file('s/x')]],
    ['directory over a symlink to the victim file', () => [sym('s', hello), dir('s')]],
    ['directory over a symlink, absolute', () => [sym('s', victim), dir('s/')]],
    ['hardlink to ../victim/hello', () => [hard('l', '../victim/hello')], 'rejects'],
    ['hardlink to an absolute victim path', () => [hard('l', hello)], 'rejects'],
    ['hardlink to /etc/passwd', () => [hard('l', '/etc/passwd')], 'rejects'],
    ['hardlink relative long', () => [hard('l', `../../../../../../../../..${hello}`)], 'rejects'],
    ['hardlink through a symlink', () => [sym('s', '../victim'), hard('l', 's/hello')], 'rejects'],
    ['hardlink through an absolute symlink', () => [sym('s', victim), hard('l', 's/hello')], 'rejects'],
    [
      'hardlink to a symlink, then chmod it',
      () => [sym('s', hello), hard('l', 's'), { name: 'l', type: 'link', linkname: 's', mode: 0o777 }, dir('l')],
    ],
    ['hardlink to a directory', () => [dir('d'), hard('l', 'd')], 'rejects'],
    ['hardlink replacing its own target', () => [dir('d'), file('d/f'), hard('d', 'd/f')], 'rejects'],
    ['whiteout .wh..', () => [file('.wh..')], 'rejects'],
    ['whiteout .wh...', () => [file('.wh...')], 'rejects'],
    ['whiteout .wh.', () => [file('.wh.')], 'rejects'],
    ['whiteout etc/.wh..', () => [dir('etc'), file('etc/.wh..')], 'rejects'],
    ['whiteout through a symlinked parent', () => [sym('s', '../victim'), file('s/.wh.hello')], 'rejects'],
    ['whiteout through an absolute symlinked parent', () => [sym('s', victim), file('s/.wh.hello')], 'rejects'],
    ['opaque marker through a symlinked parent', () => [sym('s', victim), file('s/.wh..wh..opq')], 'rejects'],
    ['whiteout with a dot-dot parent', () => [file('../.wh.victim'), file('a/../../victim/.wh.hello')]],
    ['parent is a regular file', () => [file('f'), file('f/x')], 'rejects'],
    ['symlink loop', () => [sym('a', 'b'), sym('b', 'a'), file('a/x')], 'rejects'],
    ['self-referencing symlink', () => [sym('a', '/a'), file('a/x')], 'rejects'],
    [
      'device node to /dev/mem',
      () => [{ name: 'mem', type: 'character-device', devmajor: 1, devminor: 1, mode: 0o666 }],
    ],
  ];

  for (const [name, entries, expectation] of cases) {
    it(name, async () => {
      const result = apply(entries(), dest);
      if (expectation === 'rejects') await expect(result).rejects.toSatisfy((e) => isEngineError(e, 'invalid'));
      else await result.catch((e) => expect(isEngineError(e, 'invalid'), String(e)).toBe(true));
      await assertNoBreakout();
    });
  }

  it('re-roots symlinked parents inside the layer', async () => {
    await apply([sym('evil', '/'), file(`evil/etc/x`, 'inside'), sym('up', '../../..'), file('up/y', 'inside')], dest);
    expect(await readFile(path.join(dest, 'etc/x'), 'utf8')).toBe('inside');
    expect(await readFile(path.join(dest, 'y'), 'utf8')).toBe('inside');
    await assertNoBreakout();
  });

  it('replaces a symlink by a directory without touching its target', async () => {
    await apply([sym('s', '../victim'), dir('s', 0o700)], dest);
    const st = await lstat(path.join(dest, 's'));
    expect(st.isDirectory()).toBe(true);
    expect(st.mode & 0o7777).toBe(0o700);
    await assertNoBreakout();
  });

  it('skips device nodes from untrusted layers', async () => {
    await apply(
      [
        { name: 'dev/null', type: 'character-device', devmajor: 1, devminor: 3, mode: 0o666 },
        { name: 'p', type: 'fifo' },
      ],
      dest,
    );
    expect(await walk(dest)).toEqual([]);
  });

  it('refuses names and components over the kernel limits', async () => {
    const tooLong = Array.from({ length: 20 }, () => 'd'.repeat(250)).join('/');
    await expect(apply([file(tooLong)], dest)).rejects.toSatisfy((e) => isEngineError(e, 'invalid'));
    await expect(apply([file('x'.repeat(256))], dest)).rejects.toSatisfy((e) => isEngineError(e, 'invalid'));
    await expect(apply([sym('s', 'x'.repeat(4097))], dest)).rejects.toSatisfy((e) => isEngineError(e, 'invalid'));
  });
});

describe('applyLayer: correctness', () => {
  const T1 = new Date('2001-02-03T04:05:06Z');
  const T2 = new Date('2011-12-13T14:15:16Z');

  it('keeps owners, modes (setuid, setgid, sticky) and mtimes', async () => {
    const { size } = await apply(
      [
        { name: 'bin/', type: 'directory', mode: 0o755, uid: 0, gid: 0, mtime: T1 },
        { name: 'bin/su', type: 'file', mode: 0o4755, uid: 0, gid: 0, mtime: T2, body: 'su binary' },
        { name: 'bin/wall', type: 'file', mode: 0o2755, uid: 0, gid: 5, mtime: T2, body: 'wall' },
        { name: 'home/user/file', type: 'file', mode: 0o640, uid: 1000, gid: 2000, mtime: T2, body: 'mine' },
        { name: 'tmp/', type: 'directory', mode: 0o1777, uid: 0, gid: 0, mtime: T1 },
        { name: 'tmp/child', type: 'file', mode: 0o600, mtime: T2, body: '' },
        { name: 'shared/', type: 'directory', mode: 0o2770, uid: 1000, gid: 3000, mtime: T1 },
      ],
      dest,
    );
    expect(size).toBe('su binary'.length + 'wall'.length + 'mine'.length);
    const check = async (rel: string, mode: number, uid: number, gid: number, mtime: Date) => {
      const st = await lstat(path.join(dest, rel));
      expect([st.mode & 0o7777, st.uid, st.gid, st.mtimeMs], rel).toEqual([mode, uid, gid, mtime.getTime()]);
    };
    await check('bin', 0o755, 0, 0, T1); // set after bin/su and bin/wall were created in it
    await check('bin/su', 0o4755, 0, 0, T2);
    await check('bin/wall', 0o2755, 0, 5, T2);
    await check('home/user/file', 0o640, 1000, 2000, T2);
    await check('tmp', 0o1777, 0, 0, T1);
    await check('shared', 0o2770, 1000, 3000, T1);
    expect((await lstat(path.join(dest, 'home'))).mode & 0o7777).toBe(0o755); // implied parents
  });

  it('creates symlinks as given, with owner and mtime, never following them', async () => {
    await apply(
      [
        { name: 'etc/passwd-link', type: 'symlink', linkname: '/etc/passwd', uid: 12, gid: 34, mtime: T1 },
        { name: 'rel', type: 'symlink', linkname: '../../outside', mtime: T2 },
      ],
      dest,
    );
    const st = await lstat(path.join(dest, 'etc/passwd-link'));
    expect(st.isSymbolicLink()).toBe(true);
    expect([st.uid, st.gid, st.mtimeMs]).toEqual([12, 34, T1.getTime()]);
    expect(await readlink(path.join(dest, 'etc/passwd-link'))).toBe('/etc/passwd');
    expect(await readlink(path.join(dest, 'rel'))).toBe('../../outside');
  });

  it('creates hardlinks to files in the layer, including through a symlinked parent (re-rooted)', async () => {
    await apply(
      [
        { name: 'usr/bin/a', type: 'file', body: 'same inode', mode: 0o755 },
        { name: 'usr/bin/b', type: 'link', linkname: 'usr/bin/a' },
        { name: 'bin', type: 'symlink', linkname: '/usr/bin' },
        { name: 'c', type: 'link', linkname: '/bin/a' },
        { name: 'sl', type: 'symlink', linkname: 'usr/bin/a' },
        { name: 'sl2', type: 'link', linkname: 'sl' },
      ],
      dest,
    );
    const a = await lstat(path.join(dest, 'usr/bin/a'));
    expect((await lstat(path.join(dest, 'usr/bin/b'))).ino).toBe(a.ino);
    expect((await lstat(path.join(dest, 'c'))).ino).toBe(a.ino);
    expect(a.nlink).toBe(3);
    const sl = await lstat(path.join(dest, 'sl'));
    expect((await lstat(path.join(dest, 'sl2'))).ino).toBe(sl.ino); // a second name for the symlink itself
  });

  it('applies xattrs from PAX records, binary values intact, never trusted.overlay.*', async () => {
    // security.capability v2 with CAP_SETFCAP (bit 31): a 0x80 byte that a UTF-8 round trip would break.
    const cap = Buffer.from([1, 0, 0, 2, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    const binary = Buffer.from([0, 0xff, 0xfe, 0x80, 0x0a, 0x3d]);
    const body = Buffer.from('#!/bin/true\n');
    const tar = Buffer.concat([
      encodeEntryHeader({
        name: 'd',
        type: 'dir',
        mode: 0o755,
        uid: 0,
        gid: 0,
        size: 0,
        mtime: 1,
        xattrs: [
          ['user.dir', Buffer.from('on a dir')],
          ['trusted.overlay.opaque', Buffer.from('y')],
        ],
      }),
      encodeEntryHeader({
        name: 'd/f',
        type: 'file',
        mode: 0o755,
        uid: 0,
        gid: 0,
        size: body.length,
        mtime: 1,
        xattrs: [
          ['security.capability', cap],
          ['user.bin', binary],
          ['trusted.overlay.redirect', Buffer.from('/etc')],
          ['trusted.berth', Buffer.from('t')],
        ],
      }),
      body,
      bodyPadding(body.length),
      endOfArchive(),
    ]);
    await applyLayer(Readable.from([tar]), dest);
    const f = path.join(dest, 'd/f');
    expect(native.lgetxattr(f, 'security.capability')).toEqual(cap);
    expect(native.lgetxattr(f, 'user.bin')).toEqual(binary);
    expect(native.lgetxattr(f, 'trusted.berth')).toEqual(Buffer.from('t'));
    expect(native.lgetxattr(f, 'trusted.overlay.redirect')).toBeNull();
    expect(native.lgetxattr(path.join(dest, 'd'), 'user.dir')).toEqual(Buffer.from('on a dir'));
    expect(native.lgetxattr(path.join(dest, 'd'), 'trusted.overlay.opaque')).toBeNull();
  });

  it('applies xattrs given as tar-stream PAX text', async () => {
    await apply([{ name: 'x', type: 'file', body: 'x', pax: { 'SCHILY.xattr.user.note': 'hello' } }], dest);
    expect(native.lgetxattr(path.join(dest, 'x'), 'user.note')).toEqual(Buffer.from('hello'));
  });

  it('turns whiteouts into overlay whiteouts and opaque markers', async () => {
    await apply(
      [
        { name: 'etc/.wh.gone', type: 'file', uid: 1000, gid: 1000 },
        { name: 'var/', type: 'directory', mode: 0o2775, gid: 50 },
        { name: 'var/.wh.cache', type: 'file' },
        { name: 'opq/', type: 'directory' },
        { name: 'opq/.wh..wh..opq', type: 'file' },
        { name: 'opq/kept', type: 'file', body: 'k' },
        { name: '.wh..wh.plnk/123.456', type: 'file', body: 'aufs' },
        { name: 'etc/.wh..wh.aufs', type: 'file' },
      ],
      dest,
    );
    for (const rel of ['etc/gone', 'var/cache']) {
      const st = await lstat(path.join(dest, rel));
      expect(st.mode, rel).toBe(constants.S_IFCHR);
      expect([st.rdev, st.uid, st.gid], rel).toEqual([0, 0, 0]);
    }
    expect(native.lgetxattr(path.join(dest, 'opq'), 'trusted.overlay.opaque')).toEqual(Buffer.from('y'));
    expect(await walk(dest)).toEqual(['etc', 'etc/gone', 'opq', 'opq/kept', 'var', 'var/cache']);
  });

  it('creates device nodes and fifos for trusted layers', async () => {
    await apply(
      [
        { name: 'dev/null', type: 'character-device', devmajor: 1, devminor: 3, mode: 0o666, mtime: T1 },
        { name: 'dev/loop', type: 'block-device', devmajor: 7, devminor: 0, mode: 0o660, gid: 6 },
        { name: 'run/fifo', type: 'fifo', mode: 0o620 },
      ],
      dest,
      { trusted: true },
    );
    const nul = await lstat(path.join(dest, 'dev/null'));
    expect([nul.isCharacterDevice(), nul.rdev, nul.mode & 0o7777, nul.mtimeMs]).toEqual([
      true,
      (1 << 8) | 3,
      0o666,
      T1.getTime(),
    ]);
    const loop = await lstat(path.join(dest, 'dev/loop'));
    expect([loop.isBlockDevice(), loop.rdev, loop.mode & 0o7777, loop.gid]).toEqual([true, 7 << 8, 0o660, 6]);
    const fifo = await lstat(path.join(dest, 'run/fifo'));
    expect([fifo.isFIFO(), fifo.mode & 0o7777]).toEqual([true, 0o620]);
  });

  it('later entries replace earlier ones; a directory re-declared keeps its children', async () => {
    await apply(
      [
        { name: 'a', type: 'file', body: 'file first' },
        { name: 'a/', type: 'directory', mode: 0o700 },
        { name: 'a/child', type: 'file', body: 'c' },
        { name: 'a/', type: 'directory', mode: 0o750, mtime: T1 },
        { name: 'b/', type: 'directory' },
        { name: 'b/x', type: 'file', body: 'gone with b' },
        { name: 'b', type: 'symlink', linkname: 'a' },
        { name: 'b/y', type: 'file', body: 'through the new symlink: lands in a/' },
      ],
      dest,
    );
    const a = await lstat(path.join(dest, 'a'));
    expect([a.isDirectory(), a.mode & 0o7777, a.mtimeMs]).toEqual([true, 0o750, T1.getTime()]);
    expect(await walk(dest)).toEqual(['a', 'a/child', 'a/y', 'b']);
  });

  it('applies the metadata of a root entry to the layer directory', async () => {
    await apply(
      [
        { name: './', type: 'directory', mode: 0o751, mtime: T1 },
        { name: './x', type: 'file', body: 'x' },
      ],
      dest,
    );
    const st = await lstat(dest);
    expect([st.mode & 0o7777, st.mtimeMs]).toEqual([0o751, T1.getTime()]);
    await expect(apply([{ name: '/', type: 'file', body: 'x' }], dest)).rejects.toSatisfy((e) =>
      isEngineError(e, 'invalid'),
    );
  });

  it('handles PAX long names', async () => {
    const long = `${'deep/'.repeat(60)}${'n'.repeat(200)}`;
    await apply(
      [
        { name: long, type: 'file', body: 'long' },
        { name: 'l', type: 'link', linkname: long },
      ],
      dest,
    );
    expect(await readFile(path.join(dest, long), 'utf8')).toBe('long');
    expect(await readFile(path.join(dest, 'l'), 'utf8')).toBe('long');
  });

  it('accepts an empty archive and an empty stream', async () => {
    expect(await apply([], dest)).toEqual({ size: 0 });
    expect(await applyLayer(Readable.from([]), dest)).toEqual({ size: 0 });
  });

  it('reports malformed and truncated archives as invalid', async () => {
    const good = await tarOf([{ name: 'f', type: 'file', body: Buffer.alloc(5000, 1) }]);
    const truncated = good.subarray(0, 1536);
    await expect(applyLayer(Readable.from([truncated]), dest)).rejects.toSatisfy(
      (e) => isEngineError(e, 'invalid') && /Error processing tar file/.test(e.message),
    );
    const garbage = Buffer.alloc(1024, 0x41);
    await expect(applyLayer(Readable.from([garbage]), path.join(base, 'dest'))).rejects.toSatisfy((e) =>
      isEngineError(e, 'invalid'),
    );
  });

  it('passes on the input stream error (an EngineError as is, others as system errors)', async () => {
    const head = (await tarOf([{ name: 'f', type: 'file', body: Buffer.alloc(100_000, 1) }])).subarray(0, 4096);
    const failing = (err: Error) =>
      new Readable({
        read() {
          this.push(head);
          this.destroy(err);
        },
      });
    const { invalidParameter } = await import('../../src/errors.js');
    const digest = invalidParameter('filesystem layer verification failed');
    await expect(applyLayer(failing(digest), dest)).rejects.toBe(digest);
    await rm(dest, { recursive: true });
    await mkdir(dest);
    await expect(applyLayer(failing(new Error('ECONNRESET')), dest)).rejects.toSatisfy((e) =>
      isEngineError(e, 'system'),
    );
    // A stream closed early without an error must not hang.
    const closed = new Readable({
      read() {
        this.push(head);
        this.destroy();
      },
    });
    await expect(applyLayer(closed, dest)).rejects.toSatisfy((e) => isEngineError(e));
  });

  it('reports a failure of a file written in the background, even with more entries after it', async () => {
    const entries: Entry[] = [
      { name: 'bad', type: 'file', body: 'x', pax: { [`SCHILY.xattr.user.${'n'.repeat(300)}`]: 'v' } },
    ];
    for (let i = 0; i < 50; i++) entries.push({ name: `more/f${i}`, type: 'file', body: 'y' });
    await expect(apply(entries, dest)).rejects.toSatisfy((e) => isEngineError(e, 'invalid') && /xattr/.test(e.message));
  });

  it('rejects unknown entry types', async () => {
    const tar = Buffer.from(await tarOf([{ name: 'v', type: 'file', body: '' }]));
    tar[156] = 'V'.charCodeAt(0); // a GNU volume header
    let sum = 0;
    tar.fill(0x20, 148, 156);
    for (let i = 0; i < 512; i++) sum += tar[i]!;
    tar.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'latin1');
    await expect(applyLayer(Readable.from([tar]), dest)).rejects.toSatisfy((e) => isEngineError(e, 'invalid'));
  });
});
