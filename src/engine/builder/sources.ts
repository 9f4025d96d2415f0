// COPY and ADD sources: which files of the context (or of another stage's or
// image's tree) a step's sources name, the checksum the build cache keys the
// step on, and the tar that lays them out under the destination directory.
//
// Names resolve as dockerd's classic builder resolves them (builder/dockerfile
// copy.go): wildcards with Go's filepath.Match against every path of the tree,
// other names followed through symlinks the way a process chrooted into the
// context would (openat2 RESOLVE_IN_ROOT, or its like over a received
// context's index, context-index.ts): a link that points out of the context
// lands inside it, never outside. A directory's own symlinks are
// copied as symlinks, never followed. Files .dockerignore leaves out are not
// there for COPY and ADD, as if the client had not sent them.
import { createHash } from 'node:crypto';
import {
  closeSync,
  constants as C,
  createWriteStream,
  type Dirent,
  fstatSync,
  openSync,
  readdirSync,
  readlinkSync,
  type Stats,
  utimesSync,
} from 'node:fs';
import { type FileHandle, lstat, mkdir, open, rm, stat } from 'node:fs/promises';
import { posix } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tarStream from 'tar-stream';
import { invalidParameter, isEngineError, messageOf, systemError } from '../../errors.js';
import { bodyPadding, encodeEntryHeader, endOfArchive, type EntryHeader, type EntryType } from '../layers/tarformat.js';
import { cleanComponents } from '../layers/tarpath.js';
import { openListed, walkTree, type EntryStat, type WalkEntry } from '../layers/walk.js';
import { O_PATH, openInRoot } from '../os/rooted.js';
import { lgetxattr } from '../os/xattrs.js';
import { type ContextIndex, type ContextNode, LookupError, sortedChildren } from './context-index.js';
import { getWithStatusError, type Progress, responseBody } from './context.js';
import { decompress, peekBytes, SNIFF_BYTES, sniffCompression } from '../layers/compression.js';
import { containsWildcards, goClean, goMatch } from './dockerignore.js';

/** What the steps need of a source's stats: a file's Stats has it, and so has an index entry's (statOf). */
export type SourceStat = Pick<
  Stats,
  'mode' | 'isFile' | 'isDirectory' | 'isSymbolicLink' | 'isSocket' | 'isCharacterDevice' | 'isBlockDevice' | 'isFIFO'
>;

export interface CopySource {
  /** The path in the context, as the step names it (cleaned): its base name names a file source. */
  rel: string;
  /** Where it is on disk, symlinks resolved (always inside the tree's root); '' for an entry of an index. */
  abs: string;
  /** An entry of a received context's index, symlinks resolved (instead of `abs`). */
  node?: { index: ContextIndex; node: ContextNode };
  /** Of what `abs` or `node` names. */
  stat: SourceStat;
  /** `abs` relative to the context root ('' for the root itself). */
  real?: string;
  /** Under a directory source, the entries (paths relative to the source) .dockerignore leaves out. */
  skip?: (rel: string) => boolean;
  /** A download (ADD <url>): never expanded as an archive. */
  download?: boolean;
  /** A download whose name could not be told (dockerd's "__unnamed__"): refused with a destination directory. */
  unnamed?: boolean;
}

/**
 * Where sources are looked up: a received context's index, or a directory
 * (a stage's or an image's tree for COPY --from, where `excluded` says no
 * and `image` set gives dockerd's shorter not-found message).
 */
export type SourceTree =
  | { index: ContextIndex; excluded(rel: string): boolean; image?: boolean }
  | { root: string; excluded(rel: string): boolean; image?: boolean };

const notFound = (tree: SourceTree, path: string) =>
  invalidParameter(
    tree.image
      ? `stat ${path}: file does not exist`
      : `file not found in build context or excluded by .dockerignore: stat ${path}: file does not exist`,
  );

/**
 * The sources `patterns` name in `tree`, in order (a wildcard's matches in
 * the tree's lexical order). Errors carry dockerd's words without the
 * "COPY failed: " dockerd puts before them (the caller's to add). URLs are
 * not sources here: ADD fetches them with fetchUrl; COPY refuses them.
 */
export function resolveSources(tree: SourceTree, patterns: readonly string[]): CopySource[] {
  if ('index' in tree) return resolveInIndex(tree, tree.index, patterns);
  const rootFd = openSync(tree.root, O_PATH | C.O_DIRECTORY);
  try {
    const realRoot = readlinkSync(fdPath(rootFd));
    const out: CopySource[] = [];
    for (const orig of patterns) {
      const p = sourcePattern(orig);
      if (containsWildcards(p)) {
        for (const rel of walkNames(tree, rootFd, literalPrefix(p))) {
          if (matches(p, rel)) out.push(single(tree, rootFd, realRoot, rel));
        }
      } else {
        out.push(single(tree, rootFd, realRoot, p));
      }
    }
    if (out.length === 0) throw invalidParameter('no source files were specified');
    return out;
  } finally {
    closeSync(rootFd);
  }
}

const fdPath = (fd: number) => `/proc/self/fd/${fd}`;

/** filepath.Match, whose errors dockerd's wildcard walk ignores (a bad pattern matches nothing). */
function matches(pattern: string, rel: string): boolean {
  try {
    return goMatch(pattern, rel);
  } catch {
    return false;
  }
}

/** One named source, symlinks followed inside the tree. */
function single(tree: SourceTree, rootFd: number, realRoot: string, path: string): CopySource {
  const rel = goClean(path);
  let fd: number;
  try {
    fd = openInRoot(rootFd, rel === '.' ? '' : rel, O_PATH);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP') throw notFound(tree, path);
    throw systemError(`stat ${path}: ${messageOf(e)}`, e);
  }
  try {
    const abs = readlinkSync(fdPath(fd));
    const real = abs === realRoot ? '' : posix.relative(realRoot, abs);
    if (real.startsWith('../') || real === '..' || posix.isAbsolute(real))
      throw systemError(`${path} resolved outside the build context`); // cannot happen with RESOLVE_IN_ROOT
    if ((rel !== '.' && tree.excluded(rel)) || (real !== '' && tree.excluded(real))) throw notFound(tree, path);
    const st = fstatSync(fd);
    const source: CopySource = { rel, abs, stat: st, real };
    if (st.isDirectory()) source.skip = (under: string) => tree.excluded(real === '' ? under : `${real}/${under}`);
    return source;
  } finally {
    closeSync(fd);
  }
}

/**
 * The directory a wildcard pattern's matches must lie in: its components
 * before the first with a wildcard, when they hold no escape ('' for the
 * whole tree). filepath.Match compares them byte for byte, so nothing
 * outside can match, and the walk need not go there.
 */
function literalPrefix(pattern: string): string {
  const parts = pattern.split('/');
  const fixed: string[] = [];
  for (const part of parts.slice(0, -1)) {
    if (containsWildcards(part) || part.includes('\\') || part === '' || part === '.' || part === '..') break;
    fixed.push(part);
  }
  return fixed.join('/');
}

/**
 * Every path of the tree, as Go's filepath.Walk visits them (lexical order,
 * symlinks not followed), minus excluded ones; only into directories on the
 * way to or under `prefix`.
 */
function* walkNames(tree: SourceTree, rootFd: number, prefix: string): Generator<string> {
  const wanted = (rel: string) =>
    prefix === '' || prefix === rel || prefix.startsWith(`${rel}/`) || rel.startsWith(`${prefix}/`);
  const visit = function* (dir: string): Generator<string> {
    let entries: Dirent[];
    try {
      entries = readdirSync(dir === '' ? fdPath(rootFd) : `${fdPath(rootFd)}/${dir}`, { withFileTypes: true });
    } catch (e) {
      throw systemError(`reading ${dir || '.'} in the build context: ${messageOf(e)}`, e);
    }
    entries.sort((a, b) => Buffer.compare(Buffer.from(a.name), Buffer.from(b.name)));
    for (const d of entries) {
      const rel = dir === '' ? d.name : `${dir}/${d.name}`;
      if (!tree.excluded(rel)) yield rel;
      // An excluded directory may still hold `!`-included files.
      if (d.isDirectory() && wanted(rel)) yield* visit(rel);
    }
  };
  yield* visit('');
}

/** A COPY source as a pattern relative to the context's root ("/a", "./a" and "a" alike); URLs are ADD's alone. */
function sourcePattern(orig: string): string {
  if (/^https?:\/\//.test(orig)) throw invalidParameter("source can't be a URL for COPY");
  const p = orig.startsWith('/') ? orig.slice(1) : orig;
  return p.startsWith('./') ? p.slice(2) : p;
}

// ---- sources in a received context's index --------------------------------------------

function resolveInIndex(tree: SourceTree, index: ContextIndex, patterns: readonly string[]): CopySource[] {
  const out: CopySource[] = [];
  for (const orig of patterns) {
    const p = sourcePattern(orig);
    if (containsWildcards(p)) {
      for (const rel of indexNames(tree, index, literalPrefix(p))) {
        if (matches(p, rel)) out.push(singleInIndex(tree, index, rel));
      }
    } else {
      out.push(singleInIndex(tree, index, p));
    }
  }
  if (out.length === 0) throw invalidParameter('no source files were specified');
  return out;
}

function singleInIndex(tree: SourceTree, index: ContextIndex, path: string): CopySource {
  const rel = goClean(path);
  let found: { node: ContextNode; real: string };
  try {
    found = index.resolve(rel === '.' ? '' : rel);
  } catch (e) {
    if (e instanceof LookupError) throw notFound(tree, path);
    throw e;
  }
  const { node, real } = found;
  if ((rel !== '.' && tree.excluded(rel)) || (real !== '' && tree.excluded(real))) throw notFound(tree, path);
  const source: CopySource = { rel, abs: '', node: { index, node }, stat: statOf(node), real };
  if (node.kind === 'dir') source.skip = (under: string) => tree.excluded(real === '' ? under : `${real}/${under}`);
  return source;
}

/** An index entry's stats, as lstat would give them of the extracted inode. */
export function statOf(node: ContextNode): SourceStat {
  const type = node.kind === 'dir' ? C.S_IFDIR : node.kind === 'symlink' ? C.S_IFLNK : C.S_IFREG;
  return {
    mode: type | node.mode,
    isFile: () => node.kind === 'file',
    isDirectory: () => node.kind === 'dir',
    isSymbolicLink: () => node.kind === 'symlink',
    isSocket: () => false,
    isCharacterDevice: () => false,
    isBlockDevice: () => false,
    isFIFO: () => false,
  };
}

/** walkNames over an index. */
function* indexNames(tree: SourceTree, index: ContextIndex, prefix: string): Generator<string> {
  const wanted = (rel: string) =>
    prefix === '' || prefix === rel || prefix.startsWith(`${rel}/`) || rel.startsWith(`${prefix}/`);
  const visit = function* (dir: ContextNode, at: string): Generator<string> {
    for (const [name, node] of sortedChildren(dir)) {
      const rel = at === '' ? name : `${at}/${name}`;
      if (!tree.excluded(rel)) yield rel;
      if (node.kind === 'dir' && wanted(rel)) yield* visit(node, rel);
    }
  };
  yield* visit(index.root, '');
}

/** Every entry under a directory of the index (not itself), as walkTree visits a directory: depth first, byte order. */
function* indexWalk(dir: ContextNode, at = ''): Generator<{ rel: string; node: ContextNode }> {
  for (const [name, node] of sortedChildren(dir)) {
    const rel = at === '' ? name : `${at}/${name}`;
    yield { rel, node };
    if (node.kind === 'dir') yield* indexWalk(node, rel);
  }
}

const KIND_LETTER = { file: 'f', dir: 'd', symlink: 'l' } as const;

async function indexChecksum(s: CopySource, index: ContextIndex, node: ContextNode): Promise<string> {
  if (node.kind !== 'dir') {
    const h = createHash('sha256');
    h.update(`${posix.basename(s.rel)}\0${KIND_LETTER[node.kind]}\0${node.mode.toString(8)}\n`);
    if (node.kind === 'file') for await (const c of index.read(node)) h.update(c);
    return `file:${h.digest('hex')}`;
  }
  const h = createHash('sha256');
  for (const e of indexWalk(node)) {
    if (s.skip?.(e.rel)) continue;
    const n = e.node;
    h.update(`${e.rel}\0${KIND_LETTER[n.kind]}\0${n.mode.toString(8)}\0`);
    if (n.kind === 'file') h.update(n.sha256!);
    else if (n.kind === 'symlink') h.update(n.target!);
    h.update('\n');
  }
  return `dir:${h.digest('hex')}`;
}

async function* indexEntries(
  s: CopySource,
  index: ContextIndex,
  node: ContextNode,
  o: { name: string; uid: number; gid: number; extractArchives: boolean },
  links: Map<unknown, string>,
): AsyncGenerator<Buffer> {
  if (node.kind === 'dir') {
    for (const e of indexWalk(node)) {
      if (s.skip?.(e.rel)) continue;
      yield* indexEntry(index, e.node, e.rel, o.uid, o.gid, links);
    }
    return;
  }
  if (o.extractArchives && node.kind === 'file' && (await isArchive(() => indexStream(index, node)))) {
    yield* archiveEntries(() => indexStream(index, node), s.rel);
    return;
  }
  yield* indexEntry(index, node, o.name, o.uid, o.gid, null);
}

const indexStream = (index: ContextIndex, node: ContextNode): Readable =>
  Readable.from(index.read(node), { objectMode: false, highWaterMark: READ_CHUNK });

async function* indexEntry(
  index: ContextIndex,
  node: ContextNode,
  name: string,
  uid: number,
  gid: number,
  links: Map<unknown, string> | null,
): AsyncGenerator<Buffer> {
  const m = { mode: node.mode, uid, gid, mtime: Math.floor(node.mtime) };
  if (node.kind === 'dir') {
    yield encodeEntryHeader({ ...m, name, type: 'dir', size: 0 });
    return;
  }
  if (links && node.nlink > 1) {
    const first = links.get(node);
    if (first !== undefined) {
      yield encodeEntryHeader({ ...m, name, type: 'link', linkname: first, size: 0 });
      return;
    }
    links.set(node, name);
  }
  if (node.kind === 'symlink') {
    yield encodeEntryHeader({ ...m, name, type: 'symlink', linkname: node.target!, size: 0 });
    return;
  }
  const caps = node.capability ? { xattrs: [[CAPABILITY, node.capability]] as Array<[string, Buffer]> } : {};
  yield encodeEntryHeader({ ...m, name, type: 'file', size: node.size, ...caps });
  let n = 0;
  for await (const c of index.read(node)) {
    n += c.length;
    yield c;
  }
  if (n !== node.size) throw systemError(`${JSON.stringify(name)} changed while it was being read`);
  yield bodyPadding(node.size);
}

// ---- the cache key ------------------------------------------------------------------

/**
 * The content checksum the build cache keys a COPY/ADD on, in dockerd's
 * shapes: "file:<hex>" for one file, "dir:<hex>" for one directory,
 * "multi:<hex>" for several sources. It covers names (a file source's base
 * name, a directory's entries'), types, permission bits, link targets and
 * contents; not owners (COPY sets them) nor mtimes.
 */
export async function sourceChecksum(sources: readonly CopySource[]): Promise<string> {
  const sums: string[] = [];
  for (const s of sources) sums.push(await oneChecksum(s));
  if (sums.length === 1) return sums[0]!;
  return `multi:${createHash('sha256').update(sums.join(',')).digest('hex')}`;
}

async function oneChecksum(s: CopySource): Promise<string> {
  if (s.node) return indexChecksum(s, s.node.index, s.node.node);
  if (!s.stat.isDirectory()) {
    const h = createHash('sha256');
    // The name too: it is the copied file's name under a destination directory (as tarsum's header has it).
    h.update(`${posix.basename(s.rel)}\0${kindOf(s.stat)}\0${(s.stat.mode & 0o7777).toString(8)}\n`);
    if (s.stat.isFile()) await hashFile(h, s.abs);
    return `file:${h.digest('hex')}`;
  }
  const h = createHash('sha256');
  for await (const e of walkTree(s.abs, { readAhead: READ_AHEAD })) {
    if (s.skip?.(e.rel)) continue;
    const st = e.st;
    h.update(`${e.rel}\0${kindOf(st)}\0${(Number(st.mode) & 0o7777).toString(8)}\0`);
    if (st.isFile()) {
      const fh = createHash('sha256');
      if (e.data) fh.update(e.data);
      else await hashListed(fh, e);
      h.update(fh.digest('hex'));
    } else if (st.isSymbolicLink()) h.update(readlinkSync(e.path));
    else if (st.isCharacterDevice() || st.isBlockDevice()) h.update(String(st.rdev));
    h.update('\n');
  }
  return `dir:${h.digest('hex')}`;
}

function kindOf(
  st: Pick<EntryStat, 'isFile' | 'isDirectory' | 'isSymbolicLink' | 'isCharacterDevice' | 'isBlockDevice' | 'isFIFO'>,
): string {
  if (st.isFile()) return 'f';
  if (st.isDirectory()) return 'd';
  if (st.isSymbolicLink()) return 'l';
  if (st.isCharacterDevice()) return 'c';
  if (st.isBlockDevice()) return 'b';
  if (st.isFIFO()) return 'p';
  return 's';
}

async function hashFile(h: ReturnType<typeof createHash>, abs: string): Promise<void> {
  const fh = await open(abs, C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK);
  try {
    for await (const chunk of fh.createReadStream({ highWaterMark: READ_CHUNK, autoClose: false }))
      h.update(chunk as Buffer);
  } finally {
    await fh.close();
  }
}

async function hashListed(h: ReturnType<typeof createHash>, e: WalkEntry): Promise<void> {
  const opened = await openListed(e);
  if (!opened) throw systemError(`${e.rel} changed while it was being read`);
  try {
    for await (const chunk of opened.fh.createReadStream({ highWaterMark: READ_CHUNK, autoClose: false }))
      h.update(chunk as Buffer);
  } finally {
    await opened.fh.close();
  }
}

// ---- the tar laid out for the destination ----------------------------------------

export interface SourcesTarOptions {
  sources: readonly CopySource[];
  /** The destination is a directory: a file source keeps its own name. */
  destIsDir: boolean;
  /** A file source's name when the destination is a file path (its base name). */
  destName?: string;
  /** Owner of every entry; root otherwise. Entries from an archive ADD expands keep the archive's (as dockerd). */
  chown?: { uid: number; gid: number };
  /** ADD: a local tar (plain, gzip, bzip2, xz) is expanded into the destination rather than copied. */
  extractArchives?: boolean;
}

const READ_AHEAD = 64 << 10;
const READ_CHUNK = 1 << 20;

/**
 * A tar of the sources relative to the destination directory: a directory
 * source gives its contents, a file source one entry. Errors come out as the
 * stream's error, an EngineError.
 */
export function sourcesTar(o: SourcesTarOptions): Readable {
  return Readable.from(tarOf(o), { objectMode: false, highWaterMark: 1 << 20 });
}

async function* tarOf(o: SourcesTarOptions): AsyncGenerator<Buffer> {
  const uid = o.chown?.uid ?? 0;
  const gid = o.chown?.gid ?? 0;
  const links = new Map<string, string>(); // "dev:ino" → first name, for hard links inside directories
  const nodeLinks = new Map<unknown, string>(); // the same for an index: node → first name
  try {
    for (const s of o.sources) {
      if (s.node) {
        const name = o.destIsDir || o.destName === undefined ? posix.basename(s.rel) : o.destName;
        const extractArchives = o.extractArchives === true && !s.download;
        yield* indexEntries(s, s.node.index, s.node.node, { name, uid, gid, extractArchives }, nodeLinks);
        continue;
      }
      if (s.stat.isDirectory()) {
        for await (const e of walkTree(s.abs, { readAhead: READ_AHEAD })) {
          if (s.skip?.(e.rel)) continue;
          yield* entry(e.rel, e, uid, gid, links);
        }
        continue;
      }
      if (o.extractArchives && !s.download && s.stat.isFile() && (await isArchive(() => fileStream(s.abs)))) {
        yield* archiveEntries(() => fileStream(s.abs), s.abs);
        continue;
      }
      const name = o.destIsDir || o.destName === undefined ? posix.basename(s.rel) : o.destName;
      yield* fileSource(s, name, uid, gid);
    }
    yield endOfArchive();
  } catch (e) {
    throw isEngineError(e) ? e : systemError(`copying sources: ${messageOf(e)}`, e);
  }
}

const NS = 1_000_000_000n;

function meta(st: EntryStat, uid: number, gid: number): Pick<EntryHeader, 'mode' | 'uid' | 'gid' | 'mtime'> {
  const s = st.mtimeNs / NS;
  const mtime = Number(st.mtimeNs < 0n && s * NS !== st.mtimeNs ? s - 1n : s);
  return { mode: Number(st.mode) & 0o7777, uid, gid, mtime };
}

async function* entry(
  name: string,
  e: WalkEntry,
  uid: number,
  gid: number,
  links: Map<string, string>,
): AsyncGenerator<Buffer> {
  const st = e.st;
  if (st.isSocket()) return; // live endpoints, not content (dockerd skips them too)
  const m = meta(st, uid, gid);
  if (st.isDirectory()) {
    yield encodeEntryHeader({ ...m, name, type: 'dir', size: 0 });
    return;
  }
  if (st.nlink > 1n && !st.isDirectory()) {
    const key = `${st.dev}:${st.ino}`;
    const first = links.get(key);
    if (first !== undefined) {
      yield encodeEntryHeader({ ...m, name, type: 'link', linkname: first, size: 0 });
      return;
    }
    links.set(key, name);
  }
  if (st.isFile()) {
    const caps = capabilityOf(e.xattrs ? (e.xattrs.find(([n]) => n === CAPABILITY)?.[1] ?? null) : e.path);
    if (e.data) {
      yield encodeEntryHeader({ ...m, name, type: 'file', size: e.data.length, ...caps });
      yield e.data;
      yield bodyPadding(e.data.length);
      return;
    }
    const opened = await openListed(e);
    if (!opened) throw systemError(`${JSON.stringify(e.rel)} changed while it was being read`);
    yield* streamFile(opened.fh, Number(opened.st.size), { ...m, name, ...caps }, e.rel);
    return;
  }
  if (st.isSymbolicLink()) {
    yield encodeEntryHeader({ ...m, name, type: 'symlink', linkname: readlinkSync(e.path), size: 0 });
    return;
  }
  yield encodeEntryHeader({ ...m, name, ...special(st), size: 0 });
}

function special(st: EntryStat): { type: EntryType; devmajor?: number; devminor?: number } {
  if (st.isFIFO()) return { type: 'fifo' };
  const rdev = st.rdev;
  return {
    type: st.isCharacterDevice() ? 'char' : 'block',
    devmajor: Number(((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & ~0xfffn)),
    devminor: Number((rdev & 0xffn) | ((rdev >> 12n) & ~0xffn)),
  };
}

async function* fileSource(s: CopySource, name: string, uid: number, gid: number): AsyncGenerator<Buffer> {
  if (s.stat.isSocket()) return;
  if (!s.stat.isFile()) {
    const st = await statBig(s.abs);
    yield encodeEntryHeader({ ...meta(st, uid, gid), name, ...special(st), size: 0 });
    return;
  }
  // The resolved path is a regular file inside the context: opened without following, it can only be that file.
  const fh = await open(s.abs, C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK);
  try {
    const st = await fh.stat({ bigint: true });
    if (!st.isFile()) throw systemError(`${JSON.stringify(s.rel)} changed while it was being read`);
    yield* streamFile(fh, Number(st.size), { ...meta(st, uid, gid), name, ...capabilityOf(s.abs) }, s.rel);
  } finally {
    await fh.close();
  }
}

const CAPABILITY = 'security.capability';

/**
 * A file's capabilities, the one xattr dockerd's copy keeps (TarWithOptions
 * reads only it): given as the value already read, or a path to read it at.
 */
function capabilityOf(from: Buffer | null | string): Pick<EntryHeader, 'xattrs'> {
  let value = typeof from === 'string' ? null : from;
  if (typeof from === 'string') {
    try {
      value = lgetxattr(from, CAPABILITY);
    } catch {
      value = null; // a filesystem without xattrs has no capabilities to keep
    }
  }
  return value ? { xattrs: [[CAPABILITY, value]] } : {};
}

const statBig = (abs: string): Promise<EntryStat> => lstat(abs, { bigint: true });

async function* streamFile(
  fh: FileHandle,
  size: number,
  h: Pick<EntryHeader, 'mode' | 'uid' | 'gid' | 'mtime' | 'name' | 'xattrs'>,
  rel: string,
): AsyncGenerator<Buffer> {
  yield encodeEntryHeader({ ...h, type: 'file', size });
  for (let left = size; left > 0; ) {
    const buf = Buffer.allocUnsafe(Math.min(left, READ_CHUNK));
    const { bytesRead } = await fh.read(buf, 0, buf.length, size - left);
    if (bytesRead === 0) throw systemError(`${JSON.stringify(rel)} changed while it was being read`);
    left -= bytesRead;
    yield buf.subarray(0, bytesRead);
  }
  yield bodyPadding(size);
}

// ---- ADD of a local archive --------------------------------------------------------

/**
 * dockerd's isArchivePath: the file, decompressed if it is, starts with a
 * valid tar header (an empty archive or a text file is copied as a file).
 */
export async function isArchive(opened: () => Readable | Promise<Readable>): Promise<boolean> {
  let raw: Readable | undefined;
  try {
    raw = await opened();
    const sniffed = await peekBytes(raw, SNIFF_BYTES);
    const plain = decompress(sniffed.stream, sniffCompression(sniffed.head));
    plain.on('error', () => undefined);
    const head = await peekBytes(plain, 1024).then(
      (p) => p.head,
      () => Buffer.alloc(0),
    );
    plain.destroy();
    return validTarHeader(head);
  } catch {
    return false;
  } finally {
    raw?.destroy();
  }
}

/** A file of a tree on disk, opened without following (its path is resolved already), as a stream closed with it. */
async function fileStream(abs: string): Promise<Readable> {
  const fh = await open(abs, C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK);
  return fh.createReadStream({ highWaterMark: READ_CHUNK });
}

/** Go's archive/tar: a first block that is not all zeros and whose checksum holds (signed or unsigned sums). */
function validTarHeader(head: Buffer): boolean {
  if (head.length < 512) return false;
  const block = head.subarray(0, 512);
  if (block.every((b) => b === 0)) return false; // end of archive: nothing in it
  const field = block
    .toString('latin1', 148, 156)
    .replace(/[\0 ]+$/, '')
    .replace(/^[ ]+/, '');
  if (!/^[0-7]+$/.test(field)) return false;
  const want = Number.parseInt(field, 8);
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < 512; i++) {
    const b = i >= 148 && i < 156 ? 0x20 : block[i]!;
    unsigned += b;
    signed += b > 127 ? b - 256 : b;
  }
  return want === unsigned || want === signed;
}

/** tar-stream's header, as it is at run time. */
interface ArchiveHeader {
  name: string;
  type: string | null;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtime: Date;
  linkname: string | null;
  devmajor: number;
  devminor: number;
}

const ARCHIVE_TYPES: Record<string, EntryType> = {
  file: 'file',
  'contiguous-file': 'file',
  directory: 'dir',
  symlink: 'symlink',
  link: 'link',
  'character-device': 'char',
  'block-device': 'block',
  fifo: 'fifo',
};

/** The entries of a local archive, re-encoded relative to the destination; owners kept, names that climb out refused. */
async function* archiveEntries(opened: () => Promise<Readable> | Readable, abs: string): AsyncGenerator<Buffer> {
  const raw = await opened();
  const extract = tarStream.extract();
  let parseError: unknown;
  extract.on('error', (e: unknown) => {
    parseError ??= e;
  });
  try {
    const sniffed = await peekBytes(raw, SNIFF_BYTES);
    const plain = decompress(sniffed.stream, sniffCompression(sniffed.head));
    plain.on('error', (e) => extract.destroy(e));
    plain.pipe(extract as unknown as NodeJS.WritableStream);
    for await (const item of extract) {
      const h = item.header as unknown as ArchiveHeader;
      const type = h.type === null ? undefined : ARCHIVE_TYPES[h.type];
      const name = insideName(h.name, 'entry name');
      if (type === undefined || name === '') {
        item.resume();
        continue;
      }
      const mtime = Math.floor(h.mtime.getTime() / 1000);
      const head: EntryHeader = { name, type, mode: h.mode & 0o7777, uid: h.uid, gid: h.gid, mtime, size: 0 };
      if (type === 'symlink') head.linkname = h.linkname ?? '';
      if (type === 'link') head.linkname = insideName(h.linkname ?? '', 'hardlink target');
      if (type === 'char' || type === 'block') Object.assign(head, { devmajor: h.devmajor, devminor: h.devminor });
      if (type !== 'file') {
        item.resume();
        yield encodeEntryHeader(head);
        continue;
      }
      yield encodeEntryHeader({ ...head, size: h.size });
      let n = 0;
      for await (const chunk of item) {
        n += (chunk as Buffer).length;
        yield chunk as Buffer;
      }
      if (n !== h.size) throw invalidParameter(`Error processing tar file(${abs}): unexpected EOF`);
      yield bodyPadding(h.size);
    }
  } catch (e) {
    if (isEngineError(e)) throw e;
    throw invalidParameter(`Error processing tar file: ${messageOf(parseError ?? e)}`, e);
  } finally {
    extract.destroy();
    raw.destroy();
  }
}

/** A name of an archive ADD expands, relative to the destination; one that climbs out is refused, as dockerd's untar. */
function insideName(raw: string, what: string): string {
  const parts: string[] = [];
  for (const c of raw.split('/')) {
    if (c === '' || c === '.') continue;
    if (c !== '..') parts.push(c);
    else if (parts.pop() === undefined)
      throw invalidParameter(`Error processing tar file: invalid ${what} ${JSON.stringify(raw)}`);
  }
  return cleanComponents(parts.join('/'), what).join('/');
}

// ---- ADD <url> --------------------------------------------------------------------

/**
 * ADD's download: the URL's body into a file of `dir` (created: a fresh
 * directory of the caller's), mode 0600, its mtime the Last-Modified header's
 * (the epoch without one), named after the URL's path or the
 * Content-Disposition's filename (dockerd's getFilenameForDownload).
 */
export async function fetchUrl(
  url: string,
  dir: string,
  signal?: AbortSignal,
  progress?: Progress,
): Promise<CopySource> {
  await mkdir(dir, { recursive: true });
  const res = await getWithStatusError(url, signal);
  const filename = downloadName(url, res.headers.get('content-disposition'));
  const abs = posix.join(dir, filename ?? '__unnamed__');
  // O_EXCL: never written through a link planted at that name.
  const out = createWriteStream(abs, { flags: 'wx', mode: 0o600 });
  try {
    await pipeline(responseBody(res, progress), out, ...(signal ? [{ signal }] : []));
  } catch (e) {
    await rm(abs, { force: true });
    throw isEngineError(e) ? e : systemError(`downloading ${url}: ${messageOf(e)}`, e);
  }
  const lastModified = Date.parse(res.headers.get('last-modified') ?? '');
  const mtime = Number.isFinite(lastModified) && lastModified > 0 ? lastModified / 1000 : 0;
  utimesSync(abs, mtime, mtime);
  const source: CopySource = { rel: filename ?? '__unnamed__', abs, stat: await stat(abs), download: true };
  if (filename === undefined) source.unnamed = true;
  return source;
}

/** The download's file name: the URL path's base, else Content-Disposition's filename; undefined when neither gives one. */
export function downloadName(url: string, disposition: string | null): string | undefined {
  let path = '';
  try {
    path = decodeURIComponent(new URL(url).pathname);
  } catch {
    path = '';
  }
  const usable = (n: string) => n !== '' && n !== '.' && n !== '..' && n !== '/' && !n.includes('\0');
  if (path !== '' && !path.endsWith('/')) {
    const base = posix.basename(path);
    if (usable(base)) return base;
  }
  const m = disposition ? /(?:^|;)\s*filename\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]+))/i.exec(disposition) : null;
  const given = m ? (m[1]?.replace(/\\(.)/g, '$1') ?? m[2] ?? '') : '';
  if (given !== '' && !given.endsWith('/')) {
    const base = posix.basename(given);
    if (usable(base)) return base;
  }
  return undefined;
}
