// From an overlayfs upper directory back to a layer: the tar for `docker
// commit` (diffLayer) and the list for `GET /containers/{id}/changes`
// (changes).
//
// The upper dir belongs to a container that may still be running, so it is
// read through walk.ts (held directory fds, no path re-resolution) and every
// file is opened with O_NOFOLLOW and checked to be the inode we listed: a
// container cannot make us pack a host file into its image.
import { Readable } from 'node:stream';
import { readlinkSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { isEngineError, messageOf, systemError } from '../../errors.js';
import { lgetxattr, llistxattr } from '../os/xattrs.js';
import { sharedBuffer, sharedConcat } from './extractor.js';
import { isOpaque, isPrivateXattr, isWhiteoutDevice } from './overlay.js';
import { bodyPadding, encodeEntryHeader, endOfArchive, type EntryHeader } from './tarformat.js';
import { WHITEOUT_OPAQUE, WHITEOUT_PREFIX } from './tarpath.js';
import { lstatIfPresent, openListed, walkTree, type EntryStat, type WalkEntry, type WalkOptions } from './walk.js';

/**
 * The uncompressed layer tar of `upperDir`, produced in one streaming pass.
 * Entries come in a stable order (depth first, names in byte order), so the
 * same tree always gives the same bytes. Whiteouts become `.wh.<name>`
 * entries, opaque directories get a `.wh..wh..opq` entry right after their
 * own. Errors surface as an `error` event carrying an EngineError.
 *
 * On a directory that holds no overlay whiteouts (a mounted rootfs) this is
 * simply a tar of the tree, which is what `export` uses it for.
 */
export function diffLayer(upperDir: string, opts: DiffOptions = {}): Readable {
  return Readable.from(layerTar(upperDir, { ...opts, readAhead: READ_AHEAD }), {
    objectMode: false,
    highWaterMark: 1 << 20,
  });
}

export interface DiffOptions extends Pick<WalkOptions, 'exclude'> {
  /** Counts the bytes of file content as they are read (the layer's size, as extraction would count it). */
  stats?: { size: number };
}

/**
 * A plain tar of a directory (`docker cp` out): an entry for the directory
 * itself named `name`, then everything under it as `name/...` (under `/...`
 * for the name ''), as dockerd's rebased tars. Overlay whiteouts mean nothing
 * here (the tree is a container's merged view).
 */
export function treeTar(dir: string, name: string, root: EntryStat): Readable {
  return Readable.from(layerTar(dir, { readAhead: READ_AHEAD, base: { name, st: root } }), {
    objectMode: false,
    highWaterMark: 1 << 20,
  });
}

/** A tar of one entry that is not a directory, found at `path` (parent held, name not followed). */
export function entryTar(path: string, name: string, st: EntryStat): Readable {
  return Readable.from(singleTar({ rel: name, path, st }), { objectMode: false, highWaterMark: 1 << 20 });
}

async function* singleTar(e: WalkEntry): AsyncGenerator<Buffer> {
  const stats = { size: 0 };
  try {
    const blocks = entryBlocks(e, new Map(), stats, false);
    if (blocks) yield* blocks;
    else yield* streamedFile(e, stats);
    yield endOfArchive();
  } catch (err) {
    throw isEngineError(err) ? err : systemError(`reading ${e.rel}: ${messageOf(err)}`, err);
  }
}

interface TarOptions extends WalkOptions, DiffOptions {
  /** A tree tar (treeTar) rather than a layer: the root's own entry and name. */
  base?: { name: string; st: EntryStat };
}

async function* layerTar(upperDir: string, opts: TarOptions): AsyncGenerator<Buffer> {
  const stats = opts.stats ?? { size: 0 };
  const gather = new Gatherer();
  const base = opts.base;
  const named = base ? (e: WalkEntry): WalkEntry => ({ ...e, rel: `${base.name}/${e.rel}` }) : (e: WalkEntry) => e;
  try {
    const firstNames = new Map<string, string>(); // "dev:ino" → first path, for hardlinks
    if (base)
      for (const out of gather.add(encodeEntryHeader({ ...metadata(base.st), name: base.name, type: 'dir', size: 0 })))
        yield out;
    for await (const walked of walkTree(upperDir, opts)) {
      const entry = named(walked);
      const blocks = entryBlocks(entry, firstNames, stats, !base);
      // Plain loops: `yield*` over an array would cost a trip through the microtask queue even when empty.
      for (const b of blocks ?? []) for (const out of gather.add(b)) yield out;
      if (!blocks) for await (const b of streamedFile(entry, stats)) for (const out of gather.add(b)) yield out;
    }
    for (const out of [...gather.add(endOfArchive()), ...gather.flush()]) yield out;
  } catch (e) {
    throw isEngineError(e) ? e : systemError(`reading container changes in ${upperDir}: ${messageOf(e)}`, e);
  }
}

/**
 * Headers, small bodies and paddings gathered into blocks of at least GATHER
 * bytes: every chunk costs each stage downstream (hashes, gzip, file writes)
 * a call of its own. Pieces that large already pass through as they are.
 * Blocks, like file reads, are in shared memory: a commit hands them to an
 * extraction thread (extractor.ts), which then needs no copy.
 */
class Gatherer {
  private held: Buffer[] = [];
  private heldBytes = 0;

  /** The blocks ready to go out once `b` is added. */
  add(b: Buffer): Buffer[] {
    if (b.length >= GATHER) return [...this.flush(), b];
    this.held.push(b);
    this.heldBytes += b.length;
    return this.heldBytes >= GATHER ? this.flush() : [];
  }

  /** What is held, as one block (none when nothing is). */
  flush(): Buffer[] {
    if (this.heldBytes === 0) return [];
    const block = sharedConcat(this.held, this.heldBytes);
    this.held = [];
    this.heldBytes = 0;
    return [block];
  }
}

const READ_CHUNK = 1 << 20;
/** Pieces smaller than this are gathered into blocks of at least this size. */
const GATHER = 256 << 10;
/** Files this small are read while the walk looks at their directory, several at once. */
const READ_AHEAD = 64 << 10;
const NS = 1_000_000_000n;

/**
 * An entry's tar pieces, made at once (no awaits: thousands of small files
 * would pay a trip through the microtask queue per piece); null for a regular
 * file too large to have been read ahead, which streamedFile() reads.
 */
function entryBlocks(
  e: WalkEntry,
  firstNames: Map<string, string>,
  stats: { size: number },
  layer = true,
): Buffer[] | null {
  const { st, rel } = e;
  if (st.isSocket()) return []; // live endpoints, not content (dockerd skips them too)
  if (layer && isWhiteoutDevice(st)) {
    // Checked before hardlinks: overlayfs may share one whiteout inode among many names.
    return [encodeEntryHeader({ ...metadata(st), name: whiteoutName(rel), type: 'file', mode: 0o600, size: 0 })];
  }
  if (st.isDirectory()) {
    const dir = encodeEntryHeader({ ...metadata(st), name: rel, type: 'dir', size: 0, xattrs: exportedXattrs(e) });
    if (!layer || !isOpaque(e.path)) return [dir];
    return [dir, encodeEntryHeader({ ...metadata(st), name: `${rel}/${WHITEOUT_OPAQUE}`, type: 'file', size: 0 })];
  }
  if (st.nlink > 1n) {
    const key = `${st.dev}:${st.ino}`;
    const first = firstNames.get(key);
    if (first !== undefined)
      return [encodeEntryHeader({ ...metadata(st), name: rel, type: 'link', linkname: first, size: 0 })];
    firstNames.set(key, rel);
  }
  if (st.isFile()) {
    const { data } = e;
    if (!data) return null;
    stats.size += data.length;
    return [
      encodeEntryHeader({ ...metadata(st), name: rel, type: 'file', size: data.length, xattrs: exportedXattrs(e) }),
      data,
      bodyPadding(data.length),
    ];
  }
  if (st.isSymbolicLink()) {
    const linkname = readlinkSync(e.path);
    return [
      encodeEntryHeader({ ...metadata(st), name: rel, type: 'symlink', linkname, size: 0, xattrs: exportedXattrs(e) }),
    ];
  }
  const type = st.isCharacterDevice() ? 'char' : st.isBlockDevice() ? 'block' : 'fifo';
  return [
    encodeEntryHeader({
      ...metadata(st),
      name: rel,
      type,
      size: 0,
      ...deviceNumbers(st.rdev),
      xattrs: exportedXattrs(e),
    }),
  ];
}

/** A regular file too large to read ahead: header from the opened file's own fstat, then exactly that many bytes. */
async function* streamedFile(e: WalkEntry, stats: { size: number }): AsyncGenerator<Buffer> {
  const opened = await openListed(e);
  if (!opened) throw changedWhileReading(e.rel);
  const { fh, st } = opened;
  try {
    const size = Number(st.size);
    yield encodeEntryHeader({ ...metadata(st), name: e.rel, type: 'file', size, xattrs: exportedXattrs(e) });
    for (let left = size; left > 0; ) {
      const buf = sharedBuffer(Math.min(left, READ_CHUNK));
      const { bytesRead } = await fh.read(buf, 0, buf.length, size - left);
      if (bytesRead === 0) throw changedWhileReading(e.rel); // it shrank: the header would lie
      left -= bytesRead;
      yield buf.subarray(0, bytesRead);
    }
    yield bodyPadding(size);
    stats.size += size;
  } finally {
    await fh.close();
  }
}

const changedWhileReading = (rel: string) =>
  systemError(`${JSON.stringify(rel)} changed while it was being read; pause the container`);

function whiteoutName(rel: string): string {
  const slash = rel.lastIndexOf('/');
  return `${rel.slice(0, slash + 1)}${WHITEOUT_PREFIX}${rel.slice(slash + 1)}`;
}

type Metadata = Pick<EntryHeader, 'mode' | 'uid' | 'gid' | 'mtime'>;

function metadata(st: EntryStat): Metadata {
  return { mode: Number(st.mode) & 0o7777, uid: Number(st.uid), gid: Number(st.gid), mtime: floorSeconds(st.mtimeNs) };
}

/** Whole seconds, rounding down (Docker's layer tars carry mtimes in seconds). */
function floorSeconds(ns: bigint): number {
  const s = ns / NS;
  return Number(ns < 0n && s * NS !== ns ? s - 1n : s);
}

/** glibc's major()/minor() for a 64-bit dev_t. */
function deviceNumbers(rdev: bigint): { devmajor: number; devminor: number } {
  return {
    devmajor: Number(((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & ~0xfffn)),
    devminor: Number((rdev & 0xffn) | ((rdev >> 12n) & ~0xffn)),
  };
}

/** The entry's xattrs that belong in an image, sorted by name for reproducible output. */
function exportedXattrs(e: WalkEntry): Array<[string, Buffer]> {
  const all = e.xattrs ?? llistxattr(e.path).map((name): [string, Buffer | null] => [name, lgetxattr(e.path, name)]);
  const out: Array<[string, Buffer]> = [];
  for (const [name, value] of all) {
    // With these, the upper dir alone no longer describes the change (data or names live in a lower layer).
    if (name === 'trusted.overlay.metacopy' || name === 'trusted.overlay.redirect') {
      throw systemError(
        `${JSON.stringify(e.rel)} uses overlayfs ${name.slice(16)}, which berth cannot export; mount without metacopy/redirect_dir`,
      );
    }
    if (value !== null && !isPrivateXattr(name)) out.push([name, value]);
  }
  return out.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

// ---- changes ---------------------------------------------------------------

export const ChangeKind = { Modified: 0, Added: 1, Deleted: 2 } as const;
export type ChangeKind = (typeof ChangeKind)[keyof typeof ChangeKind];

/** Docker's container change record, field names as on the wire. */
export interface Change {
  Path: string;
  Kind: ChangeKind;
}

/**
 * What a container changed, as dockerd's overlay2 driver reports it: upper
 * entries are Added unless the path exists in a lower layer (then Modified);
 * a directory that only exists because its children changed (same size, mode
 * and mtime as below) is not reported itself; whiteouts, and opaque
 * directories that replaced a lower one, are Deleted; the parent of an Added
 * or Deleted path is reported Modified before it. Paths are absolute.
 */
export async function changes(
  upperDir: string,
  lowerDirs: readonly string[],
  opts: WalkOptions = {},
): Promise<Change[]> {
  const lowers = new LowerView(lowerDirs);
  const out: Change[] = [];
  const changedDirs = new Set<string>();
  try {
    for await (const e of walkTree(upperDir, opts)) {
      const path = `/${e.rel}`;
      const kind = await changeKind(e, lowers);
      if (kind === null) continue;
      if (e.st.isDirectory()) changedDirs.add(path);
      if (kind !== ChangeKind.Modified) {
        const parent = path.slice(0, path.lastIndexOf('/'));
        if (parent !== '' && !changedDirs.has(parent)) {
          out.push({ Path: parent, Kind: ChangeKind.Modified });
          changedDirs.add(parent);
        }
      }
      out.push({ Path: path, Kind: kind });
    }
  } catch (e) {
    throw isEngineError(e) ? e : systemError(`reading container changes in ${upperDir}: ${messageOf(e)}`, e);
  }
  return out;
}

/**
 * Which of `candidates` (relative paths) are in the upper dir only as empty
 * mount points the runtime made (an empty file or directory), together with
 * the directories copied up or made just to hold them (nothing else in them,
 * and the same mode and owner as below, or nothing below). dockerd keeps such mount points in an init
 * layer under the container's own, so its commits and diffs never show them;
 * callers pass the result as `exclude` to get the same.
 */
export async function mountPointStubs(
  upperDir: string,
  lowerDirs: readonly string[],
  candidates: readonly string[],
): Promise<Set<string>> {
  const stubs = new Set<string>();
  const lowers = new LowerView(lowerDirs);
  // Deepest first: a directory made only to hold mount points (none below) is one too.
  const depth = (rel: string) => rel.split('/').length;
  for (const rel of [...new Set(candidates)].sort((a, b) => depth(b) - depth(a))) {
    const abs = `${upperDir}/${rel}`;
    const st = await lstatIfPresent(abs);
    if (!st) continue;
    if (st.isFile() ? st.size === 0n : st.isDirectory() && !isOpaque(abs) && (await onlyStubs(abs, rel, stubs, lowers)))
      stubs.add(rel);
  }
  const parentOf = (rel: string) => rel.slice(0, Math.max(0, rel.lastIndexOf('/')));
  let parents = new Set([...stubs].map(parentOf).filter((p) => p !== ''));
  while (parents.size > 0) {
    const next = new Set<string>();
    for (const dir of parents) {
      const abs = `${upperDir}/${dir}`;
      const st = await lstatIfPresent(abs);
      if (!st?.isDirectory() || isOpaque(abs)) continue;
      if (!(await readdir(abs)).every((name) => stubs.has(`${dir}/${name}`))) continue;
      // Absent below (a scratch image's /etc): made to hold them, as dockerd's init layer makes it.
      const below = await lowers.lookup(dir);
      if (below && (!below.isDirectory() || below.mode !== st.mode || below.uid !== st.uid || below.gid !== st.gid))
        continue;
      stubs.add(dir);
      if (parentOf(dir) !== '') next.add(parentOf(dir));
    }
    parents = next;
  }
  return stubs;
}

/** An upper directory that is empty, or that holds only mount points and is new (nothing below it). */
async function onlyStubs(abs: string, rel: string, stubs: ReadonlySet<string>, lowers: LowerView): Promise<boolean> {
  const names = await readdir(abs);
  if (names.length === 0) return true;
  return names.every((n) => stubs.has(`${rel}/${n}`)) && !(await lowers.lookup(rel));
}

/** The kind of change an upper entry records, or null for a directory that is only a parent of changes. */
async function changeKind(e: WalkEntry, lowers: LowerView): Promise<ChangeKind | null> {
  if (isWhiteoutDevice(e.st)) return ChangeKind.Deleted;
  const below = await lowers.lookup(e.rel);
  if (e.st.isDirectory() && isOpaque(e.path)) return below ? ChangeKind.Deleted : ChangeKind.Added;
  if (!below) return ChangeKind.Added;
  if (below.isDirectory() && e.st.isDirectory() && sameDir(e.st, below)) return null;
  return ChangeKind.Modified;
}

function sameDir(a: EntryStat, b: EntryStat): boolean {
  if (a.size !== b.size || a.mode !== b.mode) return false;
  // Like dockerd: equal, or equal seconds where one side lost its nanoseconds (e.g. it came from a tar).
  if (a.mtimeNs === b.mtimeNs) return true;
  return a.mtimeNs / NS === b.mtimeNs / NS && (a.mtimeNs % NS === 0n || b.mtimeNs % NS === 0n);
}

/**
 * The merged view of the lower layers (top first), enough to ask "did this
 * path exist below?". Components are lstat'ed one by one and symlinks are
 * never followed (a lower layer's symlink could point anywhere on the host).
 * Whiteouts and opaque directories hide the layers beneath them.
 */
class LowerView {
  constructor(private readonly lowers: readonly string[]) {}

  async lookup(rel: string): Promise<EntryStat | null> {
    const comps = rel.split('/');
    for (const lower of this.lowers) {
      const found = await this.lookupIn(lower, comps);
      if (found !== 'absent') return found;
    }
    return null;
  }

  /** The path's stats in one layer; null when this layer hides it; 'absent' when lower layers decide. */
  private async lookupIn(lower: string, comps: readonly string[]): Promise<EntryStat | null | 'absent'> {
    let dir = lower;
    for (let i = 0; i < comps.length; i++) {
      const path = `${dir}/${comps[i]}`;
      const st = await lstatIfPresent(path);
      if (st === null) return i > 0 && isOpaque(dir) ? null : 'absent';
      if (isWhiteoutDevice(st)) return null;
      if (i === comps.length - 1) return st;
      if (!st.isDirectory()) return null; // a file or symlink here hides anything below it
      dir = path;
    }
    return 'absent';
  }
}
