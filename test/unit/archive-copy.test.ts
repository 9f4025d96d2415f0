// docker cp's engine parts, on a real filesystem (run as root): applyLayer
// into a live directory through descriptors (rooted-tree.ts), paths resolved
// with openat2 inside a root, and dockerd's PathStat encoding. A "container"
// here is a temp dir with symlinks planted to host paths outside it.
import { execFileSync } from 'node:child_process';
import { closeSync, constants as C, lstatSync, openSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { followInScope, goFileMode, goTime } from '../../src/engine/archive/pathstat.js';
import { applyLayer } from '../../src/engine/layers/apply.js';
import { createFileAt } from '../../src/engine/os/files.js';
import { O_PATH, openDirInRoot, openInRoot, openRootView } from '../../src/engine/os/rooted.js';
import { tarOf, type TarEntry } from '../harness/tar.js';

/** The container's root, its descriptor, and a host directory outside it with a file that must stay untouched. */
let [base, root, host, rootFd] = ['', '', '', -1];

beforeEach(async () => {
  base = await mkdtemp(path.join(tmpdir(), 'berth-cp-unit-'));
  [root, host] = [path.join(base, 'root'), path.join(base, 'host')];
  await mkdir(path.join(root, 'dest'), { recursive: true });
  await mkdir(host);
  await writeFile(path.join(host, 'sentinel'), 'host');
  rootFd = openSync(root, O_PATH | C.O_DIRECTORY);
});

afterEach(async () => {
  closeSync(rootFd);
  await rm(base, { recursive: true, force: true });
});

/** Extracts into /dest of the root, as PUT does. */
async function copyIn(entries: TarEntry[], opts: { noOverwriteDirNonDir?: boolean } = {}): Promise<void> {
  const dirFd = openDirInRoot(rootFd, '/dest');
  try {
    await applyLayer(Readable.from([await tarOf(entries)]), '', {
      copy: { dirFd, name: '/dest', noOverwriteDirNonDir: opts.noOverwriteDirNonDir ?? false },
    });
  } finally {
    closeSync(dirFd);
  }
}

const hostUntouched = async () => {
  expect(await readdir(host)).toEqual(['sentinel']);
  expect(await readFile(path.join(host, 'sentinel'), 'utf8')).toBe('host');
};

describe('openat2 inside a root', () => {
  it('keeps absolute links and `..` chains inside the root', async () => {
    await symlink(host, path.join(root, 'abs'));
    await symlink(`../../../../../../..${host}`, path.join(root, 'dots'));
    for (const p of ['/abs/sentinel', 'dots/sentinel', '/../../host/sentinel']) {
      expect(() => openInRoot(rootFd, p, C.O_RDONLY), p).toThrow(/ENOENT/);
    }
    expect(followInScope(rootFd, '/abs')).toBe(host);
    expect(followInScope(rootFd, '/dots/sentinel')).toBe(`${host}/sentinel`);
  });
});

// The view as a detached mount tree (where the kernel makes one), and as a private mount namespace (older kernels).
describe.each([
  { name: 'detached tree', namespace: false },
  { name: 'mount namespace', namespace: true },
])('a container view ($name)', (way) => {
  it('sees a mount bound in the view, which the host does not', async () => {
    await mkdir(path.join(root, 'mnt'));
    const view = openRootView(root, [{ source: host, destination: '/mnt', readonly: true }], way);
    try {
      const fd = openInRoot(view.rootFd, '/mnt/sentinel', C.O_RDONLY);
      expect(readFileSync(fd, 'utf8')).toBe('host');
      closeSync(fd);
      const dir = openDirInRoot(view.rootFd, '/mnt');
      expect(() => openSync(`/proc/self/fd/${dir}/new`, C.O_CREAT | C.O_WRONLY)).toThrow(/EROFS/);
      closeSync(dir);
      expect(await readdir(path.join(root, 'mnt'))).toEqual([]);
    } finally {
      closeSync(view.rootFd);
      closeSync(view.nsFd);
    }
    expect(await readdir(path.join(root, 'mnt'))).toEqual([]);
  });

  it('keeps its mounts off the host even when the rootfs is a shared mount', async () => {
    // A rootfs under a shared `/` (systemd's default) is shared: what the view attaches must not propagate back.
    await mkdir(path.join(root, 'mnt'));
    execFileSync('mount', ['--bind', root, root]);
    try {
      execFileSync('mount', ['--make-shared', root]);
      const view = openRootView(root, [{ source: host, destination: '/mnt', readonly: false }], way);
      try {
        const fd = openInRoot(view.rootFd, '/mnt/sentinel', C.O_RDONLY);
        expect(readFileSync(fd, 'utf8')).toBe('host');
        closeSync(fd);
        expect(await readdir(path.join(root, 'mnt'))).toEqual([]);
      } finally {
        closeSync(view.rootFd);
        closeSync(view.nsFd);
      }
    } finally {
      execFileSync('umount', [root]);
    }
    expect(await readdir(path.join(root, 'mnt'))).toEqual([]);
  });

  it('makes a missing mount point inside the root; one behind a dangling link is left out', async () => {
    await symlink(host, path.join(root, 'abs'));
    const file = path.join(base, 'file-source');
    await writeFile(file, 'file');
    const view = openRootView(
      root,
      [
        { source: host, destination: '/new/deep', readonly: false },
        { source: file, destination: '/abs/file', readonly: false },
      ],
      way,
    );
    try {
      const fd = openInRoot(view.rootFd, '/new/deep/sentinel', C.O_RDONLY);
      expect(readFileSync(fd, 'utf8')).toBe('host');
      closeSync(fd);
    } finally {
      closeSync(view.rootFd);
      closeSync(view.nsFd);
    }
    expect(await readdir(path.join(root, 'new'))).toEqual(['deep']);
    expect(await readdir(root)).toEqual(['abs', 'dest', 'new']);
    await hostUntouched();
  });
});

describe('applyLayer into a live directory (docker cp)', () => {
  it('refuses names and hardlinks that climb out of the destination', async () => {
    await expect(copyIn([{ name: 'a/../../x', body: 'x' }])).rejects.toThrow('invalid entry name "a/../../x"');
    await expect(copyIn([{ name: 'h', type: 'link', linkname: '../sentinel' }])).rejects.toThrow(
      'invalid hardlink target "../sentinel"',
    );
    expect(await readdir(root)).toEqual(['dest']);
  });

  it('keeps absolute names and writes through planted links inside the destination', async () => {
    await symlink(host, path.join(root, 'dest', 'planted'));
    await symlink('../../../../../../..', path.join(root, 'dest', 'up'));
    await copyIn([
      { name: '/abs', body: 'abs' },
      { name: 'planted/through', body: 'p' },
      { name: `up${host}/sentinel`, body: 'overwritten?' },
      { name: 'own', type: 'symlink', linkname: host },
      { name: 'own/sentinel', body: 'again?' },
    ]);
    await hostUntouched();
    expect(await readFile(path.join(root, 'dest', 'abs'), 'utf8')).toBe('abs');
    expect(await readFile(path.join(root, 'dest', host, 'through'), 'utf8')).toBe('p');
    expect(await readFile(path.join(root, 'dest', host, 'sentinel'), 'utf8')).toBe('again?');
  });

  it('replaces a directory holding a link to the host without following it, and honours noOverwriteDirNonDir', async () => {
    await mkdir(path.join(root, 'dest', 'd'));
    await symlink(host, path.join(root, 'dest', 'd', 'link'));
    await expect(copyIn([{ name: 'd', body: 'file' }], { noOverwriteDirNonDir: true })).rejects.toThrow(
      'cannot overwrite directory "d" with non-directory "/dest"',
    );
    await copyIn([{ name: 'd', body: 'file' }]);
    expect(await readFile(path.join(root, 'dest', 'd'), 'utf8')).toBe('file');
    await hostUntouched();
  });

  it('makes small files in one call with the archive owner, mode and time; a link in the way is replaced, not followed', async () => {
    await symlink(path.join(host, 'sentinel'), path.join(root, 'dest', 'link'));
    await writeFile(path.join(root, 'dest', 'old'), 'old');
    const mtime = new Date(1_234_567_890_000);
    await copyIn([
      { name: 'sub/suid', body: 'x', mode: 0o4755, uid: 1000, gid: 1001, mtime },
      { name: 'empty', body: '', mode: 0o600, uid: 7, gid: 8, mtime },
      { name: 'link', body: 'not through the link', mode: 0o644 },
      { name: 'old', body: 'new', mode: 0o640 },
    ]);
    await hostUntouched();
    const st = lstatSync(path.join(root, 'dest', 'sub', 'suid'));
    expect([st.mode & 0o7777, st.uid, st.gid, st.mtimeMs]).toEqual([0o4755, 1000, 1001, 1_234_567_890_000]);
    const empty = lstatSync(path.join(root, 'dest', 'empty'));
    expect([empty.size, empty.mode & 0o7777, empty.uid, empty.gid]).toEqual([0, 0o600, 7, 8]);
    expect(lstatSync(path.join(root, 'dest', 'link')).isFile()).toBe(true);
    expect(await readFile(path.join(root, 'dest', 'link'), 'utf8')).toBe('not through the link');
    expect(await readFile(path.join(root, 'dest', 'old'), 'utf8')).toBe('new');
  });

  it('createFileAt makes only a new file of one name: never through a link, never over anything', async () => {
    const dir = openSync(path.join(root, 'dest'), O_PATH | C.O_DIRECTORY);
    try {
      await symlink(path.join(host, 'sentinel'), path.join(root, 'dest', 'link'));
      const owner = { uid: 0, gid: 0 };
      expect(() => createFileAt(dir, 'link', [Buffer.from('x')], owner, 0o644, 0)).toThrow(/EEXIST/);
      for (const name of ['', '.', '..', 'a/b', '../host']) {
        expect(() => createFileAt(dir, name, [], owner, 0o644, 0), name).toThrow(/EINVAL/);
      }
      expect(createFileAt(dir, 'f', [Buffer.from('ab'), Buffer.from('c')], owner, 0o600, 0)).toBe(3);
      expect(readFileSync(path.join(root, 'dest', 'f'), 'utf8')).toBe('abc');
      await hostUntouched();
    } finally {
      closeSync(dir);
    }
  });
});

describe('PathStat', () => {
  it('encodes modes as Go os.FileMode and times as Go JSON', () => {
    expect(goFileMode(C.S_IFDIR | 0o755)).toBe(2 ** 31 + 0o755);
    expect(goFileMode(C.S_IFLNK | 0o777)).toBe(2 ** 27 + 0o777);
    expect(goFileMode(C.S_IFREG | 0o4755)).toBe(2 ** 23 + 0o755);
    expect(goFileMode(C.S_IFCHR | 0o666)).toBe(2 ** 26 + 2 ** 21 + 0o666);
    expect(goFileMode(C.S_IFDIR | 0o1777)).toBe(2 ** 31 + 2 ** 20 + 0o777);
    expect(goTime(1_700_000_000_000_000_000n)).toBe('2023-11-14T22:13:20Z');
    expect(goTime(1_700_000_000_120_000_000n)).toBe('2023-11-14T22:13:20.12Z');
  });
});
