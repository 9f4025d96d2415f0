// A depth-first walk of a directory that may be changing under us (a
// container's overlay upper dir, if the container runs while we read it).
//
// Paths are never resolved from the root again: each directory is held open,
// its regular files are opened relative to it (openat(2), in the native
// addon), and its other entries are named `/proc/self/fd/<dir fd>/<name>`,
// which the kernel resolves from the open directory the same way. So a
// directory swapped for a symlink to `/` halfway through cannot lead us out
// of the tree (the class of CVE-2018-15664, `docker cp`'s symlink-exchange
// race). Directories are opened with O_NOFOLLOW, names are single components,
// and files are opened with O_NOFOLLOW too.
import { lstat, open, readdir } from 'node:fs/promises';
import { constants as C, type BigIntStats } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { systemError } from '../../errors.js';
import { READ_FILES_FIELDS, readFiles as readRegularFiles } from '../os/files.js';

/** What the walk's users need of an entry's stats: BigIntStats has it, and so has FileStat. */
export type EntryStat = Pick<
  BigIntStats,
  | 'ino'
  | 'dev'
  | 'mode'
  | 'nlink'
  | 'uid'
  | 'gid'
  | 'rdev'
  | 'size'
  | 'mtimeNs'
  | 'isFile'
  | 'isDirectory'
  | 'isSymbolicLink'
  | 'isSocket'
  | 'isCharacterDevice'
  | 'isBlockDevice'
  | 'isFIFO'
>;

export interface WalkEntry {
  /** Path relative to the walked root, '/'-separated. */
  rel: string;
  /** Names this entry without following any link (valid until the walk moves past it). */
  path: string;
  st: EntryStat;
  /** A small regular file's bytes, read ahead (see WalkOptions.readAhead). */
  data?: Buffer;
  /** A regular file's extended attributes, all of them, read with its stats. */
  xattrs?: Array<[string, Buffer]>;
}

const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW;
// O_NONBLOCK: if the name was swapped for a fifo, opening must not hang us.
const FILE_FLAGS = C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK | C.O_NOCTTY;
/** Entries of a directory looked at together: their regular files in one native call, the others' lstats at once. */
const BATCH = 32;

export interface WalkOptions {
  /** Relative paths left out, with everything under them. */
  exclude?: ReadonlySet<string>;
  /** Regular files up to this many bytes are read as they are found (with their stats and xattrs). */
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
    const batch = names.slice(i, i + BATCH).filter((n) => !opts.exclude?.has(childOf(rel, n.name)));
    const files =
      opts.readAhead === undefined ? new Map<string, WalkEntry>() : readFiles(dir.fd, base, rel, batch, opts.readAhead);
    const entries = await Promise.all(batch.map(async (n) => files.get(n.name) ?? (await entry(base, rel, n.name))));
    for (const e of entries) {
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

const childOf = (rel: string, name: string) => (rel === '' ? name : `${rel}/${name}`);

/** An entry looked at the ordinary way (lstat); null when it is gone. */
async function entry(base: string, rel: string, name: string): Promise<WalkEntry | null> {
  const path = `${base}/${name}`;
  const st = await lstatIfPresent(path);
  if (st === null) return null; // removed while we walked: it is not part of the tree any more
  return { rel: childOf(rel, name), path, st };
}

/**
 * The entries of `names` that are regular files, by name: stats, xattrs and
 * (up to `limit` bytes) content, read in one native call. Synchronous on
 * purpose: for a small file the syscalls take a few microseconds, less than
 * one trip through the thread pool each would, and a batch of them holds the
 * loop for well under a millisecond. A name missing from the result (not a
 * regular file per its directory entry, or not any more, or unreadable) is
 * looked at again the ordinary way.
 */
function readFiles(
  dirFd: number,
  base: string,
  rel: string,
  names: readonly Name[],
  limit: number,
): Map<string, WalkEntry> {
  const out = new Map<string, WalkEntry>();
  const regular = names.filter((n) => n.file).map((n) => n.name);
  if (regular.length === 0) return out;
  const [stats, data, xattrs] = readRegularFiles(dirFd, regular, limit);
  regular.forEach((name, i) => {
    const st = FileStat.at(stats, i);
    if (st === null) return;
    out.set(name, {
      rel: childOf(rel, name),
      path: `${base}/${name}`,
      st,
      ...(data[i] ? { data: data[i]! } : {}),
      xattrs: xattrs[i] ?? [],
    });
  });
  return out;
}

const yes = (): boolean => true;
const no = (): boolean => false;

/** The stats of a regular file as os/files.ts readFiles reads them. */
class FileStat implements EntryStat {
  constructor(
    readonly ino: bigint,
    readonly dev: bigint,
    readonly mode: bigint,
    readonly nlink: bigint,
    readonly uid: bigint,
    readonly gid: bigint,
    readonly rdev: bigint,
    readonly size: bigint,
    readonly mtimeNs: bigint,
  ) {}

  /** The i-th file's stats in readFiles' array; null when it was not read. */
  static at(a: BigInt64Array, i: number): FileStat | null {
    const f = i * READ_FILES_FIELDS;
    if (a[f + 2] === 0n) return null;
    return new FileStat(
      a[f]!,
      a[f + 1]!,
      a[f + 2]!,
      a[f + 3]!,
      a[f + 4]!,
      a[f + 5]!,
      a[f + 6]!,
      a[f + 7]!,
      a[f + 8]! * 1_000_000_000n + a[f + 9]!,
    );
  }

  readonly isFile = yes;
  readonly isDirectory = no;
  readonly isSymbolicLink = no;
  readonly isSocket = no;
  readonly isCharacterDevice = no;
  readonly isBlockDevice = no;
  readonly isFIFO = no;
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
