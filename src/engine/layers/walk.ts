// A depth-first walk of a directory that may be changing under us (a
// container's overlay upper dir, if the container runs while we read it).
//
// Paths are never resolved from the root again: each directory is held open,
// and its entries are named `/proc/self/fd/<dir fd>/<name>` — the kernel
// resolves that from the open directory, like openat(2), so a directory
// swapped for a symlink to `/` halfway through cannot lead us out of the tree
// (the class of CVE-2018-15664, `docker cp`'s symlink-exchange race).
// Directories are opened with O_NOFOLLOW, names are single components, and
// callers open files with O_NOFOLLOW too.
import { lstat, open, readdir } from 'node:fs/promises';
import { constants as C, type BigIntStats } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { systemError } from '../../errors.js';

export interface WalkEntry {
  /** Path relative to the walked root, '/'-separated. */
  rel: string;
  /** Names this entry without following any link (valid until the walk moves past it). */
  path: string;
  st: BigIntStats;
}

const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW;

/** Every entry under `root` (not `root` itself), directories before their children, names in byte order. */
export async function* walkTree(root: string): AsyncGenerator<WalkEntry> {
  const dir = await open(root, C.O_RDONLY | C.O_DIRECTORY);
  try {
    yield* walkDir(dir, '');
  } finally {
    await dir.close();
  }
}

async function* walkDir(dir: FileHandle, rel: string): AsyncGenerator<WalkEntry> {
  const base = `/proc/self/fd/${dir.fd}`;
  for (const name of await sortedNames(base, rel)) {
    const path = `${base}/${name}`;
    const st = await lstatIfPresent(path);
    if (st === null) continue; // removed while we walked: it is not part of the tree any more
    const childRel = rel === '' ? name : `${rel}/${name}`;
    yield { rel: childRel, path, st };
    if (!st.isDirectory()) continue;
    const child = await open(path, DIR_FLAGS);
    try {
      yield* walkDir(child, childRel);
    } finally {
      await child.close();
    }
  }
}

/** Names in byte order (stable output, and the order Go's filepath.Walk gives dockerd). */
async function sortedNames(dirPath: string, rel: string): Promise<string[]> {
  const raw = await readdir(dirPath, { encoding: 'buffer' });
  raw.sort(Buffer.compare);
  return raw.map((name) => {
    const text = name.toString('utf8');
    // Node paths are strings: a name that is not UTF-8 could not be opened again by its decoded form.
    if (!Buffer.from(text, 'utf8').equals(name)) {
      throw systemError(`file name ${JSON.stringify(text)} in ${JSON.stringify(rel || '/')} is not valid UTF-8`);
    }
    return text;
  });
}

export async function lstatIfPresent(path: string): Promise<BigIntStats | null> {
  try {
    return await lstat(path, { bigint: true });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}
