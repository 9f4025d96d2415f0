// Extracts one uncompressed layer tar into an empty directory, in one pass,
// treating every name, link target and header field as hostile.
//
// The rules (docs/security.md, "Hostile images"), and where they live:
// - names are cleaned lexically and clamped at the layer root (tarpath.ts);
// - parent directories are resolved inside the layer with symlinks re-rooted,
//   never followed out of it (tree.ts);
// - the last component is always created by us with no-follow semantics
//   (O_CREAT|O_EXCL|O_NOFOLLOW, mkdir, symlink, link, mknod all refuse to
//   follow a final symlink); whatever was there is removed first, except a
//   directory re-declared as a directory, whose metadata is then applied
//   through an O_NOFOLLOW|O_DIRECTORY descriptor (CVE-2021-32760);
// - metadata goes through descriptors or l* calls, never through a path that
//   could end in a link; hardlinks get none (their inode already has it, and
//   chmod through a hardlink to a symlink would follow the symlink);
// - whiteouts become overlayfs whiteouts (overlay.ts).
// The archive is read by tar-reader.ts; a body, a mode through no link and
// xattrs are written by entry-writes.ts.
import {
  closeSync,
  constants as C,
  fchmodSync,
  fchownSync,
  futimesSync,
  lchownSync,
  linkSync,
  lutimesSync,
  mkdirSync,
  openSync,
  realpathSync,
  statSync,
  symlinkSync,
} from 'node:fs';
import type { Readable } from 'node:stream';
import { invalidParameter, isNoSpace, messageOf, noSpace, systemError } from '../../errors.js';
import { createFileAt, mknod } from '../os/files.js';
import { chmodNoFollow, readSmallBody, setXattrs, writeBody } from './entry-writes.js';
import { makeWhiteout, markOpaque } from './overlay.js';
import { RootedTree } from './rooted-tree.js';
import { type EntryBody, entryXattrs, mtimeOf, owner, type TarHeader, TarReader } from './tar-reader.js';
import { type ApplyTree, LayerTree, lstatOrNull } from './tree.js';
import { checkRawName, classifyWhiteout, cleanComponents, joinRel, WHITEOUT_META_PREFIX } from './tarpath.js';

export {
  entryXattrs,
  keepRawPaxXattrs,
  mtimeOf,
  owner,
  type TarHeader,
  TarReader,
} from './tar-reader.js';

export interface ApplyOptions {
  /** Create device nodes and fifos (a trusted import); otherwise they are skipped. */
  trusted?: boolean;
  /** Not a layer: a `docker cp` into a live container's directory (see CopyTarget). */
  copy?: CopyTarget;
}

/**
 * A `docker cp` into a container: the same rules as a layer, with the
 * destination directory as the root, reached only through descriptors
 * (rooted-tree.ts) since the container may change it meanwhile. As dockerd's
 * untar: names that climb out of the destination are refused, whiteout names
 * are plain names, the root entry is skipped, device nodes are made.
 */
export interface CopyTarget {
  /** The destination directory, an O_PATH descriptor inside the container's view (the caller's to close). */
  dirFd: number;
  /** The destination as the container names it, for messages. */
  name: string;
  /** dockerd's noOverwriteDirNonDir: a directory is never replaced by a non-directory, nor the reverse. */
  noOverwriteDirNonDir: boolean;
  /** Every entry owned by these ids instead of the archive's (copyUIDGID with a container user). */
  chown?: { uid: number; gid: number };
  /** Device nodes and fifos are skipped rather than made (a build context: berth's own directory, untrusted input). */
  skipDevices?: boolean;
  /**
   * Names and hard link targets that climb out are clamped at the destination,
   * as a layer's are, rather than refused: dockerd extracts a build context
   * chrooted into it, where `../x` is `/x`.
   */
  clampNames?: boolean;
}

export interface ApplyResult {
  /** Bytes of regular-file content written. */
  size: number;
}

const FILE_FLAGS = C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW;
const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW;
const NODE_TYPE = { 'character-device': C.S_IFCHR, 'block-device': C.S_IFBLK, fifo: C.S_IFIFO } as const;
/** Files up to this size are read into memory before they are created; larger ones are streamed. */
const SMALL_FILE = 256 << 10;

/**
 * Extracts `tar` into `dir`. On failure the promise rejects with an
 * EngineError (`invalid` for a hostile or malformed archive, `system` for I/O)
 * and `dir` is left half-written for the caller to remove. On failure `tar` is
 * destroyed, so that whatever feeds it stops.
 */
export async function applyLayer(tar: Readable, dir: string, opts: ApplyOptions = {}): Promise<ApplyResult> {
  const tree = opts.copy ? new RootedTree(opts.copy.dirFd) : new LayerTree(openRoot(dir));
  try {
    const trusted = (opts.trusted === true || opts.copy !== undefined) && opts.copy?.skipDevices !== true;
    return await applyTar(tar, new Applier(tree, trusted, opts.copy));
  } finally {
    tree.close();
  }
}

async function applyTar(tar: Readable, applier: Applier): Promise<ApplyResult> {
  const reader = new TarReader(tar);
  try {
    for await (const entry of reader.extract) await applier.apply(entry.header as unknown as TarHeader, entry);
    applier.finish();
    return { size: applier.size };
  } catch (e) {
    throw reader.fail(e, 'layer'); // nothing of ours writes in `dir` any more: every call above has returned
  }
}

function openRoot(dir: string): string {
  try {
    const root = realpathSync(dir);
    if (!statSync(root).isDirectory()) throw new Error('not a directory');
    return root;
  } catch (e) {
    throw systemError(`layer directory ${dir}: ${messageOf(e)}`, e);
  }
}

/** A failed system call (Node's fs or our addon): these carry a numeric errno. */
const isErrno = (e: unknown): e is NodeJS.ErrnoException =>
  e instanceof Error && typeof (e as NodeJS.ErrnoException).errno === 'number';

/** Where one entry will be created: its verified parent, and itself. */
interface Target {
  /** The verified parent's key (ApplyTree.resolveDir) and the entry's own name in it. */
  parent: string;
  name: string;
  /** Relative path of the entry inside the layer (the parent is real; the last component is the entry's own name). */
  rel: string;
  abs: string;
  /** Lexical name, for the directory cache. */
  lexical: string;
}

/**
 * Applies entries in archive order, one at a time, with synchronous system
 * calls: only the archive's bytes are waited for. An extraction runs on a
 * thread of its own (extractor.ts), where blocking is what we want: a file of
 * a few hundred bytes is six system calls, and six trips through the thread
 * pool cost several times their CPU (futex wake-ups, promises, callbacks).
 */
class Applier {
  size = 0;
  /** Directory mtimes, applied last: creating children would change them. */
  private readonly dirTimes = new Map<string, number>();

  constructor(
    private readonly tree: ApplyTree,
    private readonly trusted: boolean,
    private readonly copy?: CopyTarget,
  ) {}

  async apply(h: TarHeader, body: EntryBody): Promise<void> {
    try {
      await this.dispatch(h, body);
    } catch (e) {
      throw ioError(e, h);
    } finally {
      body.resume(); // entries we did not read must still be drained, or the parser stalls
    }
  }

  private async dispatch(h: TarHeader, body: EntryBody): Promise<void> {
    if (this.copy && !this.copy.clampNames) refuseEscape(h.name, 'entry name');
    const comps = cleanComponents(h.name);
    if (comps.length === 0) return this.copy ? undefined : this.rootEntry(h);
    const base = comps[comps.length - 1]!;
    const parentComps = comps.slice(0, -1);
    if (!this.copy) {
      if (comps[0]!.startsWith(WHITEOUT_META_PREFIX)) return; // aufs metadata trees (.wh..wh.plnk/...)
      const wh = classifyWhiteout(base, h.name);
      if (wh.kind === 'meta') return;
      if (wh.kind === 'opaque') return this.opaque(parentComps, h.name);
      if (wh.kind === 'whiteout') return this.whiteout(parentComps, wh.target, h);
    }

    const type = h.type;
    if (type === 'character-device' || type === 'block-device' || type === 'fifo') {
      if (!this.trusted) return; // untrusted layers never get device nodes (checked before any mkdir)
    }
    const parent = this.tree.resolveDir(parentComps, 'create', h.name);
    const rel = LayerTree.child(parent, base);
    const target: Target = { parent, name: base, rel, abs: this.tree.abs(rel), lexical: joinRel(comps) };
    // A file or directory is checked only once its creation finds something there (create, directory).
    if (type !== 'file' && type !== 'contiguous-file' && type !== 'directory') this.keepKinds(target, h);

    switch (type) {
      case 'file':
      case 'contiguous-file':
        return this.file(target, h, body);
      case 'directory':
        return this.directory(target, h);
      case 'symlink':
        return this.symlink(target, h);
      case 'link':
        return this.hardlink(target, h);
      case 'character-device':
      case 'block-device':
      case 'fifo':
        return this.node(target, h, NODE_TYPE[type]);
      default:
        throw invalidParameter(`layer archive entry ${JSON.stringify(h.name)} has an unsupported type`);
    }
  }

  /** dockerd's noOverwriteDirNonDir, in its words, when the copy asks for it. */
  private keepKinds(t: Target, h: TarHeader): void {
    if (!this.copy?.noOverwriteDirNonDir) return;
    const dest = this.copy.name;
    const st = lstatOrNull(t.abs);
    if (!st) return;
    const name = JSON.stringify(t.lexical);
    if (st.isDirectory() && h.type !== 'directory')
      throw systemError(`cannot overwrite directory ${name} with non-directory ${JSON.stringify(dest)}`);
    if (!st.isDirectory() && h.type === 'directory')
      throw systemError(`cannot overwrite non-directory ${name} with directory ${JSON.stringify(dest)}`);
  }

  /** `./` or `/`: the layer root itself; only its metadata can change. */
  private rootEntry(h: TarHeader): void {
    if (h.type !== 'directory')
      throw invalidParameter(`layer archive entry ${JSON.stringify(h.name)} would replace the layer root`);
    this.setDirMetadata({ parent: '', name: '', rel: '', abs: this.tree.root, lexical: '' }, h);
  }

  private async file(t: Target, h: TarHeader, body: EntryBody): Promise<void> {
    // A small body is read whole first: the file is then made in one go, with nothing awaited while it is open.
    const source = h.size <= SMALL_FILE ? await readSmallBody(body) : body;
    if (Array.isArray(source) && this.createHeld(t, h, source)) return;
    const fd = this.create(t, h);
    this.tree.noteCreated(t.rel);
    try {
      this.size += await writeBody(fd, source);
      // chown clears setuid/setgid and capabilities, and writing clears them too: data, owner, mode, xattrs, in that order.
      fchownSync(fd, this.owner(h, 'uid'), this.owner(h, 'gid'));
      fchmodSync(fd, permissions(h));
      setXattrs(t.abs, h);
      const time = mtimeOf(h);
      futimesSync(fd, time, time);
    } finally {
      closeSync(fd);
    }
  }

  /**
   * A small file in a directory the tree holds open, made in one native call
   * from that descriptor (what file() does, without a path through
   * /proc/self/fd or six trips into Node's fs). False when it cannot be made
   * so: something is in its place (file() then removes it), or the entry has
   * xattrs (set by path, between mode and times).
   */
  private createHeld(t: Target, h: TarHeader, chunks: Buffer[]): boolean {
    const dirFd = this.tree.heldFd?.(t.parent);
    if (dirFd === undefined || entryXattrs(h).length > 0) return false;
    const owner = { uid: this.owner(h, 'uid'), gid: this.owner(h, 'gid') };
    try {
      this.size += createFileAt(dirFd, t.name, chunks, owner, permissions(h), mtimeOf(h));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw e;
    }
    this.tree.noteCreated(t.rel);
    return true;
  }

  /**
   * A new file in place of whatever is there: created first (O_EXCL, never
   * following), and only what stands in the way removed, so the common case
   * (nothing there) costs no lstat.
   */
  private create(t: Target, h: TarHeader): number {
    try {
      return openSync(t.abs, FILE_FLAGS, 0o600);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST' || !this.tree.mayExist(t.rel)) throw e;
    }
    this.keepKinds(t, h);
    this.remove(t);
    return openSync(t.abs, FILE_FLAGS, 0o600);
  }

  private directory(t: Target, h: TarHeader): void {
    try {
      mkdirSync(t.abs, 0o700);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      this.keepKinds(t, h);
      if (!lstatOrNull(t.abs)?.isDirectory()) {
        // Anything else, a symlink above all, is replaced and never followed (CVE-2021-32760).
        this.remove(t);
        mkdirSync(t.abs, 0o700);
      }
    }
    this.tree.noteCreated(t.rel);
    this.tree.remember(t.lexical, t.rel);
    this.setDirMetadata(t, h);
  }

  private setDirMetadata(t: Target, h: TarHeader): void {
    const fd = openSync(t.abs, DIR_FLAGS);
    try {
      fchownSync(fd, this.owner(h, 'uid'), this.owner(h, 'gid'));
      fchmodSync(fd, permissions(h));
    } finally {
      closeSync(fd);
    }
    setXattrs(t.abs, h);
    this.dirTimes.set(t.rel, mtimeOf(h));
  }

  private symlink(t: Target, h: TarHeader): void {
    const to = h.linkname ?? '';
    if (to === '') throw invalidParameter(`layer archive symlink ${JSON.stringify(h.name)} has an empty target`);
    checkRawName(to, 'symlink target'); // the text is data: it is never followed by us
    this.replacing(t, () => symlinkSync(to, t.abs));
    lchownSync(t.abs, this.owner(h, 'uid'), this.owner(h, 'gid'));
    setXattrs(t.abs, h);
    const time = mtimeOf(h);
    lutimesSync(t.abs, time, time);
  }

  private hardlink(t: Target, h: TarHeader): void {
    if (this.copy && !this.copy.clampNames) refuseEscape(h.linkname ?? '', 'hardlink target');
    const comps = cleanComponents(h.linkname ?? '', 'hardlink target');
    if (comps.length === 0)
      throw invalidParameter(`layer archive hardlink ${JSON.stringify(h.name)} points at the layer root`);
    const dir = this.tree.resolveDir(comps.slice(0, -1), 'existing', h.name);
    const from = LayerTree.child(dir, comps[comps.length - 1]!);
    if (from === t.rel) return; // a link to itself: nothing to do
    const st = lstatOrNull(this.tree.abs(from));
    if (st === null)
      throw invalidParameter(
        `layer archive hardlink ${JSON.stringify(h.name)} points at a file that does not exist in the layer`,
      );
    if (st.isDirectory())
      throw invalidParameter(`layer archive hardlink ${JSON.stringify(h.name)} points at a directory`);
    try {
      // link(2) does not follow a final symlink in `from`: a link to a symlink is a second name for the symlink.
      this.replacing(t, () => linkSync(this.tree.abs(from), t.abs));
    } catch (e) {
      // Replacing the entry removed its own target (e.g. a link `d` → `d/f` over a directory `d`).
      if ((e as NodeJS.ErrnoException).code === 'ENOENT')
        throw invalidParameter(`layer archive hardlink ${JSON.stringify(h.name)} points at a file it replaces`);
      throw e;
    }
  }

  /** Device nodes and fifos, trusted layers only. */
  private node(t: Target, h: TarHeader, type: number): void {
    this.replacing(t, () => mknod(t.abs, type | permissions(h), h.devmajor, h.devminor));
    lchownSync(t.abs, this.owner(h, 'uid'), this.owner(h, 'gid'));
    chmodNoFollow(t.abs, permissions(h));
    setXattrs(t.abs, h);
    const time = mtimeOf(h);
    lutimesSync(t.abs, time, time);
  }

  /** Mode 0 and root-owned whatever the header says; its mtime is kept so a diff of this layer gives the same tar. */
  private whiteout(parentComps: string[], name: string, h: TarHeader): void {
    const dir = this.tree.resolveDir(parentComps, 'no-symlinks', h.name);
    const rel = LayerTree.child(dir, name);
    const t: Target = { parent: dir, name, rel, abs: this.tree.abs(rel), lexical: joinRel([...parentComps, name]) };
    this.replacing(t, () => makeWhiteout(t.abs));
    lchownSync(t.abs, 0, 0); // a setgid parent would otherwise lend it its group
    const time = mtimeOf(h);
    lutimesSync(t.abs, time, time);
  }

  private opaque(parentComps: string[], entryName: string): void {
    const dir = this.tree.resolveDir(parentComps, 'no-symlinks', entryName);
    markOpaque(this.tree.abs(dir));
  }

  /** Runs `create`; if something already sits at the target, removes it and runs `create` again. */
  private replacing(t: Target, create: () => void): void {
    this.tree.noteCreated(t.rel);
    try {
      create();
      return;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    this.remove(t);
    create();
  }

  /** Removes whatever is at the target (recursively for a directory, never following links). */
  private remove(t: Target): void {
    const st = lstatOrNull(t.abs);
    if (st === null) return;
    if (st.isDirectory() || st.isSymbolicLink()) {
      this.tree.forget();
      this.forgetTimesUnder(t.rel);
    }
    this.tree.remove(t.abs);
  }

  /** The archive's owner, or the copy's override. */
  private owner(h: TarHeader, field: 'uid' | 'gid'): number {
    const id = owner(h, field);
    return this.copy?.chown ? this.copy.chown[field] : id;
  }

  private forgetTimesUnder(rel: string): void {
    for (const key of this.dirTimes.keys()) {
      if (key === rel || key.startsWith(`${rel}/`)) this.dirTimes.delete(key);
    }
  }

  /** Directory times, now that nothing will be created in them any more. lutimes: never through a link. */
  finish(): void {
    for (const [rel, time] of this.dirTimes) {
      try {
        lutimesSync(this.tree.abs(rel), time, time);
      } catch (e) {
        // A copy's directory keys name held descriptors, not paths: one removed by a later entry is simply gone.
        if (this.copy && (e as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw systemError(`setting times of ${JSON.stringify(rel || '/')}: ${messageOf(e)}`, e);
      }
    }
  }
}

/**
 * Errno errors are our I/O failing (a full disk in dockerd's words for it);
 * anything else (the parser, the input) is classified by applyLayer.
 */
function ioError(e: unknown, h: TarHeader): unknown {
  if (!isErrno(e)) return e;
  if (isNoSpace(e))
    return systemError(`failed to register layer: ${noSpace(`/${h.name.replace(/^\/+/, '')}`).message}`, e);
  return systemError(`extracting ${JSON.stringify(h.name)}: ${messageOf(e)}`, e);
}

const permissions = (h: TarHeader): number => h.mode & 0o7777;

/** dockerd's untar refuses, rather than clamps, a name that climbs out of the destination. */
function refuseEscape(raw: string, what: string): void {
  const parts: string[] = [];
  for (const c of raw.replace(/^\/+/, '').split('/')) {
    if (c === '' || c === '.') continue;
    if (c !== '..') parts.push(c);
    else if (parts.pop() === undefined) throw systemError(`invalid ${what} ${JSON.stringify(raw)}`);
  }
}
