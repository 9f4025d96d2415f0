// An image's filesystem as one tree, read-only, for exporters that hand a
// build's files to the client (BuildKit's `--output type=local|tar`): its
// layers overlaid on a private mount point, listed in walk order, each file
// opened again when the client asks for it.
//
// The tree is made of layer directories nobody writes to, so it does not change
// while it is read; still, files are opened without following a link and must
// be the inode the listing found, so that nothing a layer holds (a symlink to
// `/`, say) can make berthd read outside the tree.
import { constants as C } from 'node:fs';
import { mkdtemp, open, readlink, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { systemError } from '../../errors.js';
import { isWhiteoutDevice } from '../layers/overlay.js';
import { walkTree } from '../layers/walk.js';
import { mountOverlay, unmountAsync } from '../os/mount.js';

export type TreeEntryKind = 'dir' | 'file' | 'symlink' | 'link' | 'fifo' | 'char' | 'block';

/** One entry of the tree, as an exporter lists it. */
export interface TreeEntry {
  /** '/'-separated, relative to the tree's root. */
  rel: string;
  kind: TreeEntryKind;
  /** Permission bits with setuid, setgid and sticky (a Unix mode without its type). */
  mode: number;
  uid: number;
  gid: number;
  /** A regular file's bytes (0 for the rest, and for a second name of a file). */
  size: number;
  /** Unix nanoseconds. */
  mtimeNs: bigint;
  /** A symlink's target, or for `link` the rel of the file's first name in the tree. */
  linkname?: string;
  devMajor?: number;
  devMinor?: number;
}

export interface ImageTree {
  /** Every entry, parents before children, names in byte order (Go's filepath.Walk, fsutil's order). */
  entries: TreeEntry[];
  /** A regular file's bytes; `entry` is one of `entries`. */
  read(entry: TreeEntry): Promise<Readable>;
  /** Unmounts the tree (once; later calls do nothing). */
  release(): Promise<void>;
}

/** Directory names mounted here start so (the builder's sweep unmounts them after a crash). */
const MOUNT_PREFIX = 'from-';
const FILE_FLAGS = C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK | C.O_NOCTTY;

/**
 * The tree of an image whose layer directories (topmost first) are `layerDirs`:
 * one layer is read where it is, several are overlaid on a mount point under
 * `tmpDir`, none is an empty tree.
 */
export async function openImageTree(layerDirs: string[], tmpDir: string): Promise<ImageTree> {
  let root: string | undefined = layerDirs[0];
  let release = async (): Promise<void> => undefined;
  if (layerDirs.length > 1) {
    const target = await mkdtemp(path.join(tmpDir, MOUNT_PREFIX));
    mountOverlay({ lowerDirs: layerDirs, target });
    root = target;
    let released = false;
    release = async () => {
      if (released) return;
      released = true;
      await unmountAsync(target);
      await rm(target, { recursive: true, force: true });
    };
  }
  try {
    const listed = new Map((root ? await list(root) : []).map((l) => [l.entry, l]));
    return {
      entries: [...listed.keys()],
      async read(entry) {
        const at = listed.get(entry);
        if (!at || entry.kind !== 'file' || !root) throw systemError(`${entry.rel} is not a file of the tree`);
        const fh = await open(path.join(root, entry.rel), FILE_FLAGS);
        const st = await fh.stat({ bigint: true });
        if (!st.isFile() || st.ino !== at.ino || st.dev !== at.dev) {
          await fh.close();
          throw systemError(`${entry.rel} changed while the image's files were exported`);
        }
        return fh.createReadStream();
      },
      release,
    };
  } catch (e) {
    await release();
    throw e;
  }
}

interface Listed {
  entry: TreeEntry;
  ino: bigint;
  dev: bigint;
}

async function list(root: string): Promise<Listed[]> {
  const out: Listed[] = [];
  const firstName = new Map<string, string>(); // dev:ino of files with several names → the first one's rel
  for await (const e of walkTree(root)) {
    const { st } = e;
    // A whiteout in a lone layer, or a socket: nothing an exporter can hand over.
    if (st.isSocket() || (st.isCharacterDevice() && isWhiteoutDevice(st))) continue;
    const entry: TreeEntry = {
      rel: e.rel,
      kind: 'file',
      mode: Number(st.mode & 0o7777n),
      uid: Number(st.uid),
      gid: Number(st.gid),
      size: 0,
      mtimeNs: st.mtimeNs,
    };
    if (st.isDirectory()) entry.kind = 'dir';
    else if (st.isSymbolicLink()) {
      entry.kind = 'symlink';
      entry.linkname = await readlink(e.path);
    } else if (st.isFIFO()) entry.kind = 'fifo';
    else if (st.isCharacterDevice() || st.isBlockDevice()) {
      entry.kind = st.isCharacterDevice() ? 'char' : 'block';
      entry.devMajor = Number((st.rdev >> 8n) & 0xfffn);
      entry.devMinor = Number((st.rdev & 0xffn) | ((st.rdev >> 12n) & 0xfff00n));
    } else if (st.nlink > 1n && firstName.has(`${st.dev}:${st.ino}`)) {
      entry.kind = 'link';
      entry.linkname = firstName.get(`${st.dev}:${st.ino}`)!;
    } else {
      if (st.nlink > 1n) firstName.set(`${st.dev}:${st.ino}`, e.rel);
      entry.size = Number(st.size);
    }
    out.push({ entry, ino: st.ino, dev: st.dev });
  }
  return out;
}
