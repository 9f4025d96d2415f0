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
import fs, { constants as C, type BigIntStats } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { systemError } from '../../errors.js';

export interface WalkEntry {
  /** Path relative to the walked root, '/'-separated. */
  rel: string;
  /** Names this entry without following any link (valid until the walk moves past it). */
  path: string;
  st: BigIntStats;
  /** A small regular file's bytes, read ahead (see WalkOptions.readAhead), with the opened file's own stats. */
  content?: { st: BigIntStats; data: Buffer };
}

const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW;
// O_NONBLOCK: if the name was swapped for a fifo, opening must not hang us.
const FILE_FLAGS = C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK | C.O_NOCTTY;
/** Entries of a directory looked at (and small files read) at once: per-file latency overlaps. */
const BATCH = 32;

export interface WalkOptions {
  /** Relative paths left out, with everything under them. */
  exclude?: ReadonlySet<string>;
  /** Regular files up to this many bytes are read as they are found, several at a time. */
  readAhead?: number;
}

/** Every entry under `root` (not `root` itself), directories before their children, names in byte order. */
export async function* walkTree(root: string, opts: WalkOptions = {}): AsyncGenerator<WalkEntry> {
  const dir = await open(root, C.O_RDONLY | C.O_DIRECTORY);
  try {
    yield* walkDir(dir, '', opts);
  } finally {
    await dir.close();
  }
}

async function* walkDir(dir: FileHandle, rel: string, opts: WalkOptions): AsyncGenerator<WalkEntry> {
  const base = `/proc/self/fd/${dir.fd}`;
  const names = await sortedNames(base, rel);
  for (let i = 0; i < names.length; i += BATCH) {
    const batch = await Promise.all(names.slice(i, i + BATCH).map((n) => entry(base, rel, n, opts)));
    for (const e of batch) {
      if (e === null) continue;
      yield e;
      if (!e.st.isDirectory()) continue;
      const child = await open(e.path, DIR_FLAGS);
      try {
        yield* walkDir(child, e.rel, opts);
      } finally {
        await child.close();
      }
    }
  }
}

async function entry(base: string, rel: string, n: Name, opts: WalkOptions): Promise<WalkEntry | null> {
  const childRel = rel === '' ? n.name : `${rel}/${n.name}`;
  if (opts.exclude?.has(childRel)) return null;
  const path = `${base}/${n.name}`;
  // A regular file to read ahead is opened at once: its fstat stands for the lstat.
  if (n.file && opts.readAhead !== undefined) {
    const found = readRegular(path, opts.readAhead);
    if (found) return { rel: childRel, path, st: found.st, ...(found.data ? { content: { st: found.st, data: found.data } } : {}) };
  }
  const st = await lstatIfPresent(path);
  if (st === null) return null; // removed while we walked: it is not part of the tree any more
  return { rel: childRel, path, st };
}

/**
 * Opens the regular file an entry names, checking that it is still the inode
 * the walk found (a container may swap names while we read); null if not.
 */
export async function openListed(e: WalkEntry): Promise<{ fh: FileHandle; st: BigIntStats } | null> {
  const fh = await open(e.path, FILE_FLAGS);
  const st = await fh.stat({ bigint: true }).catch(async (err: unknown) => {
    await fh.close();
    throw err;
  });
  if (st.isFile() && st.ino === e.st.ino && st.dev === e.st.dev) return { fh, st };
  await fh.close();
  return null;
}

/**
 * The stats of the regular file at `path`, and its bytes when it has at most
 * `limit`; null when it is not a regular file (any more) or cannot be read,
 * and the caller looks again the ordinary way.
 *
 * Synchronous on purpose: for a small file the four syscalls take a few
 * microseconds, less than one trip through the thread pool each would, and a
 * batch of them holds the loop for well under a millisecond. (Thousands of
 * small files made the walk twice as slow through the pool.)
 */
function readRegular(path: string, limit: number): { st: BigIntStats; data?: Buffer } | null {
  let fd: number;
  try {
    fd = fs.openSync(path, FILE_FLAGS);
  } catch {
    return null;
  }
  try {
    const st = fs.fstatSync(fd, { bigint: true });
    if (!st.isFile()) return null;
    if (st.size > BigInt(limit)) return { st };
    const data = Buffer.allocUnsafe(Number(st.size));
    for (let got = 0; got < data.length; ) {
      const n = fs.readSync(fd, data, got, data.length - got, got);
      if (n === 0) return null; // it shrank
      got += n;
    }
    return { st, data };
  } catch {
    return null;
  } finally {
    fs.closeSync(fd);
  }
}

interface Name {
  name: string;
  /** The directory entry says regular file (d_type); to be confirmed by fstat. */
  file: boolean;
}

/** Names in byte order (stable output, and the order Go's filepath.Walk gives dockerd). */
async function sortedNames(dirPath: string, rel: string): Promise<Name[]> {
  const raw = await readdir(dirPath, { encoding: 'buffer', withFileTypes: true });
  const named = raw.map((d) => ({ bytes: d.name as unknown as Buffer, file: d.isFile() }));
  named.sort((a, b) => Buffer.compare(a.bytes, b.bytes));
  return named.map(({ bytes, file }) => {
    const name = bytes.toString('utf8');
    // Node paths are strings: a name that is not UTF-8 could not be opened again by its decoded form.
    if (!Buffer.from(name, 'utf8').equals(bytes)) {
      throw systemError(`file name ${JSON.stringify(name)} in ${JSON.stringify(rel || '/')} is not valid UTF-8`);
    }
    return { name, file };
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
