// COPY and ADD sources: what a source is, and which files of the context (or
// of another stage's or image's tree) a step's sources name. The checksum the
// build cache keys the step on is checksum.ts's, the tar that lays them out
// under the destination directory sources-tar.ts's, ADD's archives and
// downloads add-archive.ts's and add-url.ts's.
//
// Names resolve as dockerd's classic builder resolves them (builder/dockerfile
// copy.go): wildcards with Go's filepath.Match against every path of the tree,
// other names followed through symlinks the way a process chrooted into the
// context would (openat2 RESOLVE_IN_ROOT, or its like over a received
// context's index, context-index.ts): a link that points out of the context
// lands inside it, never outside. A directory's own symlinks are
// copied as symlinks, never followed. Files .dockerignore leaves out are not
// there for COPY and ADD, as if the client had not sent them.
import {
  closeSync,
  constants as C,
  type Dirent,
  fstatSync,
  openSync,
  readdirSync,
  readlinkSync,
  type Stats,
} from 'node:fs';
import { posix } from 'node:path';
import { invalidParameter, messageOf, systemError } from '../../errors.js';
import { O_PATH, openInRoot } from '../os/rooted.js';
import { type ContextIndex, type ContextNode, LookupError, sortedChildren } from './context-index.js';
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
  /** A download (ADD <url>) or an inline file (a heredoc): never expanded as an archive. */
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

/** How the files of sources are read, by the checksum, the tar and ADD's archive sniffing. */
export const READ_AHEAD = 64 << 10;
export const READ_CHUNK = 1 << 20;

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
export function* indexWalk(dir: ContextNode, at = ''): Generator<{ rel: string; node: ContextNode }> {
  for (const [name, node] of sortedChildren(dir)) {
    const rel = at === '' ? name : `${at}/${name}`;
    yield { rel, node };
    if (node.kind === 'dir') yield* indexWalk(node, rel);
  }
}
