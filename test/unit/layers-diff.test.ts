// diffLayer and changes on a real overlayfs (run as root): a base layer is
// applied, a container's changes are made through an overlay mount, and the
// upper dir is turned into a layer tar that must reproduce the same tree.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  mkdtemp,
  mkdir,
  writeFile,
  readFile,
  readdir,
  lstat,
  rm,
  utimes,
  readlink,
  chmod,
  chown,
  symlink,
  link,
  unlink,
  appendFile,
  lutimes,
} from 'node:fs/promises';
import { createHash, randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import * as tarStream from 'tar-stream';
import { applyLayer } from '../../src/engine/layers/apply.js';
import { changes, diffLayer } from '../../src/engine/layers/diff.js';
import { isPrivateXattr } from '../../src/engine/layers/overlay.js';
import { MNT_DETACH, MS_RDONLY, native } from '../../src/engine/os/native.js';
import { isEngineError } from '../../src/errors.js';
import { tarOf as tarOfEntries, type TarEntry } from '../harness/tar.js';

let base: string;
const mounted: string[] = [];
const dir = (name: string) => path.join(base, name);
const T = new Date('2020-01-02T03:04:05Z');

beforeEach(async () => {
  base = await mkdtemp(path.join(tmpdir(), 'berth-diff-'));
});

afterEach(async () => {
  for (const m of mounted.splice(0)) native.umount2(m, MNT_DETACH);
  await rm(base, { recursive: true, force: true });
});

async function overlay(lowers: string[], upper?: string): Promise<string> {
  const merged = await mkdtemp(path.join(base, 'merged-'));
  let opts = `lowerdir=${lowers.join(':')}`;
  if (upper) {
    const work = await mkdtemp(path.join(base, 'work-'));
    opts += `,upperdir=${upper},workdir=${work}`;
  }
  native.mount('overlay', merged, 'overlay', upper ? 0 : MS_RDONLY, opts);
  mounted.push(merged);
  return merged;
}

function unmount(merged: string): void {
  native.umount2(merged, 0);
  mounted.splice(mounted.indexOf(merged), 1);
}

const collect = async (r: Readable): Promise<Buffer> => {
  const chunks: Buffer[] = [];
  for await (const c of r) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
};

const tarOf = (entries: TarEntry[]) => tarOfEntries(entries, { mtime: T });

/** The image's base layer. */
async function baseLayer(): Promise<string> {
  const lower = dir('lower');
  await mkdir(lower);
  const tar = await tarOf([
    { name: 'etc/', type: 'directory', mode: 0o755 },
    { name: 'etc/motd', type: 'file', body: 'welcome\n', mode: 0o644 },
    { name: 'etc/old', type: 'file', body: 'to be deleted\n' },
    { name: 'etc/chmod-me', type: 'file', body: 'same bytes\n', mode: 0o644 },
    { name: 'etc/apt/', type: 'directory', mode: 0o755 },
    { name: 'etc/apt/sources.list', type: 'file', body: 'deb http://deb.debian.org/debian bookworm main\n' },
    { name: 'etc/apt/keep', type: 'file', body: 'k' },
    { name: 'usr/bin/', type: 'directory', mode: 0o755 },
    { name: 'usr/bin/tool', type: 'file', body: 'tool', mode: 0o755 },
    { name: 'usr/bin/tool-alias', type: 'link', linkname: 'usr/bin/tool' },
    { name: 'bin', type: 'symlink', linkname: 'usr/bin' },
    { name: 'var/cache/', type: 'directory' },
    { name: 'var/cache/junk', type: 'file', body: 'junk' },
    { name: 'untouched/', type: 'directory' },
    { name: 'untouched/file', type: 'file', body: 'u' },
  ]);
  await applyLayer(Readable.from([tar]), lower);
  return lower;
}

/** A container's changes, made through the overlay the way a process in it would. */
async function containerChanges(root: string): Promise<void> {
  const p = (rel: string) => path.join(root, rel);
  await appendFile(p('etc/motd'), 'have fun\n');
  await chmod(p('etc/chmod-me'), 0o600);
  await unlink(p('etc/old'));
  await rm(p('var/cache'), { recursive: true });
  await mkdir(p('var/cache'));
  await writeFile(p('var/cache/fresh'), 'fresh');
  await rm(p('etc/apt'), { recursive: true }); // a directory gone entirely
  await mkdir(p('new/deeper'), { recursive: true });
  await writeFile(p('new/deeper/file'), 'new file\n');
  await writeFile(p('new/setuid'), '#!/bin/sh\n');
  await writeFile(p('new/large.bin'), randomBytes(300_000)); // over the read-ahead size: streamed
  await chown(p('new/setuid'), 1000, 1000);
  await chmod(p('new/setuid'), 0o4750);
  await link(p('new/deeper/file'), p('new/hardlink'));
  await symlink('/etc/passwd', p('new/to-host-passwd'));
  native.lsetxattr(p('new/deeper/file'), 'user.comment', Buffer.from([0x80, 0, 0xff]));
  const longName = `new/${'long-directory-name-'.repeat(8)}/${'f'.repeat(200)}`;
  await mkdir(path.dirname(p(longName)), { recursive: true });
  await writeFile(p(longName), 'long');
  native.mknod(p('new/fifo'), 0o010644, 0, 0);
  await utimes(p('new/deeper/file'), T, T);
  await lutimes(p('new/to-host-passwd'), T, T);
}

interface Node {
  desc: string;
  ino: number;
  nlink: number;
  isWhiteout: boolean;
}

/** Everything a layer must reproduce about a tree, per path; hardlinks as "same inode as <first path>". */
async function snapshot(root: string): Promise<string[]> {
  const nodes = new Map<string, Node>();
  const visit = async (rel: string) => {
    for (const name of (await readdir(path.join(root, rel))).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const abs = path.join(root, r);
      const st = await lstat(abs);
      const xattrs = native
        .llistxattr(abs)
        .filter((n) => !isPrivateXattr(n))
        .sort()
        .map((n) => `${n}=${native.lgetxattr(abs, n)?.toString('hex')}`);
      let body = '';
      if (st.isFile())
        body = createHash('sha256')
          .update(await readFile(abs))
          .digest('hex');
      if (st.isSymbolicLink()) body = `-> ${await readlink(abs)}`;
      if (st.isCharacterDevice() || st.isBlockDevice()) body = `dev ${st.rdev}`;
      const mtime = st.isDirectory() ? '' : String(Math.floor(st.mtimeMs / 1000)); // dir mtimes move as the overlay is used
      nodes.set(r, {
        desc: `${(st.mode & 0o170000).toString(8)} ${(st.mode & 0o7777).toString(8)} ${st.uid}:${st.gid} ${mtime} ${st.isDirectory() ? '' : st.size} ${body} [${xattrs.join(' ')}]`,
        ino: st.ino,
        nlink: st.nlink,
        isWhiteout: st.isCharacterDevice() && st.rdev === 0,
      });
      if (st.isDirectory()) await visit(r);
    }
  };
  await visit('');
  const firstOfInode = new Map<number, string>();
  return [...nodes].map(([rel, n]) => {
    if (n.nlink < 2 || n.isWhiteout || n.desc.startsWith('40000')) return `${rel}: ${n.desc}`;
    const first = firstOfInode.get(n.ino) ?? rel;
    firstOfInode.set(n.ino, first);
    return `${rel}: ${n.desc} links:${first}`;
  });
}

/** A base layer, and an overlay upper dir holding what a container changed over it. */
async function changedUpper(): Promise<{ lower: string; upper: string; containerView: string[] }> {
  const lower = await baseLayer();
  const upper = dir('upper');
  await mkdir(upper);
  const merged = await overlay([lower], upper);
  await containerChanges(merged);
  const containerView = await snapshot(merged);
  unmount(merged);
  return { lower, upper, containerView };
}

describe('diffLayer', () => {
  it('turns an overlay upper dir into a layer that reproduces it', async () => {
    const { lower, upper, containerView } = await changedUpper();

    const tar = await collect(diffLayer(upper));
    const applied = dir('applied');
    await mkdir(applied);
    await applyLayer(Readable.from([tar]), applied, { trusted: true }); // our own commit: its fifo is kept

    // The new layer holds what the upper dir holds (overlay's private xattrs aside)...
    expect(await snapshot(applied)).toEqual(await snapshot(upper));
    // ...and an image made of base + new layer looks exactly like the container did.
    expect(await snapshot(await overlay([applied, lower]))).toEqual(containerView);
    // Spot checks of the encoding itself.
    expect(native.lgetxattr(path.join(applied, 'var/cache'), 'trusted.overlay.opaque')).toEqual(Buffer.from('y'));
    const wh = await lstat(path.join(applied, 'etc/old'));
    expect([wh.isCharacterDevice(), wh.rdev]).toEqual([true, 0]);
    expect(await readlink(path.join(applied, 'new/to-host-passwd'))).toBe('/etc/passwd');
    const setuid = await lstat(path.join(applied, 'new/setuid'));
    expect([setuid.mode & 0o7777, setuid.uid, setuid.gid]).toEqual([0o4750, 1000, 1000]);
  });

  it('lists entries in a stable order with whiteout and opaque markers, hardlinks and PAX names', async () => {
    const { upper } = await changedUpper();

    const entries: Array<{ name: string; type: string; linkname: string | null }> = [];
    const extract = tarStream.extract();
    const done = (async () => {
      for await (const e of extract) {
        entries.push({ name: e.header.name, type: e.header.type, linkname: e.header.linkname ?? null });
        e.resume();
      }
    })();
    diffLayer(upper).pipe(extract as unknown as NodeJS.WritableStream);
    await done;
    const names = entries.map((e) => e.name);
    expect(names).toContain('etc/.wh.old');
    expect(names).toContain('etc/.wh.apt');
    expect(names.indexOf('var/cache/.wh..wh..opq')).toBe(names.indexOf('var/cache/') + 1);
    expect(entries.find((e) => e.name === 'new/hardlink')).toEqual({
      name: 'new/hardlink',
      type: 'link',
      linkname: 'new/deeper/file',
    });
    expect(names.some((n) => n.endsWith('f'.repeat(200)))).toBe(true);
    // Depth first, names in byte order, whiteouts where the name they hide would be.
    const upperNames = names
      .filter((n) => !n.endsWith('/.wh..wh..opq'))
      .map((n) =>
        n
          .replace(/\/$/, '')
          .replace(/(^|\/)\.wh\./, '$1')
          .split('/'),
      );
    const byComponents = (a: string[], b: string[]): number => {
      for (let i = 0; i < Math.min(a.length, b.length); i++) {
        const c = Buffer.compare(Buffer.from(a[i]!), Buffer.from(b[i]!));
        if (c !== 0) return c;
      }
      return a.length - b.length;
    };
    expect(upperNames).toEqual([...upperNames].sort(byComponents));
  });

  it('gives byte-identical tars for the same tree', async () => {
    const { upper } = await changedUpper();
    const first = await collect(diffLayer(upper));
    const second = await collect(diffLayer(upper));
    expect(second.equals(first)).toBe(true);
    expect(first.length % 512).toBe(0);
  });

  it('refuses files whose data lives in a lower layer (overlay metacopy/redirect), small or large', async () => {
    for (const [name, size] of [
      ['small', 10],
      ['large', 1 << 20],
    ] as const) {
      const upper = dir(`upper-${name}`);
      await mkdir(upper);
      await writeFile(path.join(upper, 'copied-up-metadata-only'), Buffer.alloc(size));
      native.lsetxattr(path.join(upper, 'copied-up-metadata-only'), 'trusted.overlay.metacopy', Buffer.alloc(0));
      const error = await collect(diffLayer(upper)).catch((e: unknown) => e);
      expect(isEngineError(error, 'system')).toBe(true);
      expect((error as Error).message).toMatch(/"copied-up-metadata-only" uses overlayfs metacopy/);
    }
  });

  it('fails with a system error on a name that is not UTF-8', async () => {
    const upper = dir('upper');
    await mkdir(upper);
    await writeFile(Buffer.from(`${upper}/bad-\xff-name`, 'latin1'), 'x');
    await expect(collect(diffLayer(upper))).rejects.toSatisfy((e) => isEngineError(e, 'system'));
  });
});

describe('changes', () => {
  it('reports what dockerd reports for an overlay upper dir', async () => {
    const { lower, upper } = await changedUpper();

    const list = await changes(upper, [lower]);
    const kinds = Object.fromEntries(list.map((c) => [c.Path, c.Kind]));
    expect(kinds).toMatchObject({
      '/etc': 0,
      '/etc/motd': 0,
      '/etc/chmod-me': 0,
      '/etc/old': 2,
      '/etc/apt': 2,
      '/var': 0,
      '/var/cache': 2, // dockerd reports a directory made opaque as deleted...
      '/var/cache/fresh': 1, // ...and what it holds now as added
      '/new': 1,
      '/new/deeper': 1,
      '/new/deeper/file': 1,
      '/new/hardlink': 1,
      '/new/to-host-passwd': 1,
    });
    expect(kinds['/untouched']).toBeUndefined();
    expect(new Set(list.map((c) => c.Path)).size).toBe(list.length);
    // Parents come before what changed in them.
    const at = (p: string) => list.findIndex((c) => c.Path === p);
    expect(at('/etc')).toBeLessThan(at('/etc/old'));
    expect(at('/var')).toBeLessThan(at('/var/cache'));
  });

  it('sees through several lower layers, their whiteouts and opaque dirs', async () => {
    const bottom = dir('bottom');
    const middle = dir('middle');
    const upper = dir('upper');
    for (const d of [bottom, middle, upper]) await mkdir(d);
    await applyLayer(
      Readable.from([
        await tarOf([
          { name: 'a/x', type: 'file' },
          { name: 'b/y', type: 'file' },
          { name: 'c', type: 'file' },
        ]),
      ]),
      bottom,
    );
    // The middle layer deletes a/x and makes b opaque.
    await applyLayer(
      Readable.from([
        await tarOf([
          { name: 'a/.wh.x', type: 'file' },
          { name: 'b/', type: 'directory' },
          { name: 'b/.wh..wh..opq', type: 'file' },
        ]),
      ]),
      middle,
    );
    await mkdir(path.join(upper, 'a'));
    await writeFile(path.join(upper, 'a/x'), 'back again');
    await mkdir(path.join(upper, 'b'));
    await writeFile(path.join(upper, 'b/y'), 'new');
    await writeFile(path.join(upper, 'c'), 'modified');
    const kinds = Object.fromEntries((await changes(upper, [middle, bottom])).map((c) => [c.Path, c.Kind]));
    expect(kinds).toMatchObject({ '/a/x': 1, '/b/y': 1, '/c': 0 });
  });

  it('never follows a symlink in a lower layer', async () => {
    const lower = dir('lower');
    const upper = dir('upper');
    await mkdir(lower);
    await mkdir(path.join(upper, 'etc-link'), { recursive: true });
    await symlink('/etc', path.join(lower, 'etc-link'));
    await writeFile(path.join(upper, 'etc-link/passwd'), 'x');
    const kinds = Object.fromEntries((await changes(upper, [lower])).map((c) => [c.Path, c.Kind]));
    // Through the symlink, /etc/passwd exists on the host; in the image it does not.
    expect(kinds['/etc-link/passwd']).toBe(1);
  });
});
