// A received build context, held as an index of its entries instead of a
// directory of files: creating a file per context entry on every build (a
// fully cached one included) cost more than all the rest of a build. File
// bodies are kept in memory up to a bound and in one spool file beyond it,
// each hashed as it streams in, which is all a cache key needs.
//
// The tree is the one dockerd's chrooted untar (and our copy-mode extraction,
// layers/apply.ts with clampNames) would make of the same tar, rule for rule:
// names cleaned and clamped at the root; parent directories resolved inside
// the context with symlinks re-rooted at it and missing ones made 0755; each
// entry replacing whatever was at its name (a directory declared again keeps
// its children); hard links naming another entry of the context, never
// anything outside it; device nodes and fifos skipped. Lookups resolve the
// way openat2(RESOLVE_IN_ROOT) does on such a tree: a symlink followed inside
// the context, an absolute one from its root, `..` clamped there.
import { createHash } from 'node:crypto';
import { constants as C } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { invalidParameter, messageOf, systemError } from '../../errors.js';
import { entryXattrs, mtimeOf, owner, type TarHeader, TarReader } from '../layers/apply.js';
import { checkRawName, cleanComponents, linkComponents } from '../layers/tarpath.js';

export type NodeKind = 'file' | 'dir' | 'symlink';

/** One inode of the context: two names share one node when hard linked. */
export interface ContextNode {
  kind: NodeKind;
  /** Permission bits as an extracted inode would have them (a symlink's are 0777). */
  mode: number;
  /** Seconds since the epoch, fractions kept. */
  mtime: number;
  /** A file's size. */
  size: number;
  /** A file's content sha256, hex. */
  sha256?: string;
  /** A file's body when held in memory. */
  data?: Buffer;
  /** Otherwise where it starts in the spool file. */
  offset?: number;
  /** A symlink's target, as written. */
  target?: string;
  /** security.capability, the one xattr a COPY keeps. */
  capability?: Buffer;
  /** A directory's entries. */
  children?: Map<string, ContextNode>;
  /** Names it has in the tree: a file or symlink with more than one is copied as hard links. */
  nlink: number;
}

/** A lookup that failed as the system call would have: ENOENT, ENOTDIR or ELOOP. */
export class LookupError extends Error {
  constructor(readonly code: 'ENOENT' | 'ENOTDIR' | 'ELOOP') {
    super(code);
  }
}

export interface Resolved {
  node: ContextNode;
  /** Its real path in the context ('' for the root), symlinks resolved. */
  real: string;
}

/** Linux's MAXSYMLINKS. */
const MAX_SYMLINK_HOPS = 40;
/** File bodies are held in memory up to this many bytes in all; the rest goes to the spool file. */
const MEMORY_BYTES = 32 << 20;
/**
 * Entries a context may have: the index holds every one in memory, and a
 * small compressed body can hold a great many empty ones.
 */
export const MAX_ENTRIES = 1 << 20;
const SPOOL_CHUNK = 1 << 20;

const newDir = (mode: number, mtime: number): ContextNode => ({
  kind: 'dir',
  mode,
  mtime,
  size: 0,
  children: new Map(),
  nlink: 0,
});

export class ContextIndex {
  readonly root: ContextNode = newDir(0o755, Date.now() / 1000);
  private spool: FileHandle | null = null;
  private spoolSize = 0;
  private memory = 0;
  private entries = 0;

  /** `spoolPath`: the file bodies beyond the memory bound go to (created when first needed). */
  constructor(
    private readonly spoolPath: string,
    private readonly maxEntries = MAX_ENTRIES,
  ) {}

  // ---- lookups ------------------------------------------------------------------

  /**
   * `path` resolved inside the context as openat2(RESOLVE_IN_ROOT) would,
   * the last component's symlink followed too unless `noFollow`. Throws a
   * LookupError for ENOENT, ENOTDIR or ELOOP.
   */
  resolve(path: string, { noFollow = false }: { noFollow?: boolean } = {}): Resolved {
    const stack: Array<[string, ContextNode]> = [];
    const pending = linkComponents(path).reverse();
    let hops = 0;
    while (pending.length > 0) {
      const c = pending.pop()!;
      if (c === '..') {
        stack.pop(); // clamped at the root
        continue;
      }
      const dir = stack.length ? stack[stack.length - 1]![1] : this.root;
      if (dir.kind !== 'dir') throw new LookupError('ENOTDIR');
      const child = dir.children!.get(c);
      if (!child) throw new LookupError('ENOENT');
      if (child.kind === 'symlink' && (pending.length > 0 || !noFollow)) {
        if (++hops > MAX_SYMLINK_HOPS) throw new LookupError('ELOOP');
        const target = child.target!;
        if (target.startsWith('/')) stack.length = 0;
        pending.push(...linkComponents(target).reverse());
        continue;
      }
      stack.push([c, child]);
    }
    return { node: stack.length ? stack[stack.length - 1]![1] : this.root, real: stack.map(([n]) => n).join('/') };
  }

  /** What `path` names, its last component not followed; null when it is not there. */
  lstat(path: string): ContextNode | null {
    try {
      return this.resolve(path, { noFollow: true }).node;
    } catch (e) {
      if (e instanceof LookupError) return null;
      throw e;
    }
  }

  /** A file's body, in chunks. */
  async *read(node: ContextNode): AsyncGenerator<Buffer> {
    if (node.data) {
      if (node.data.length) yield node.data;
      return;
    }
    for (let at = 0; at < node.size; ) {
      const buf = Buffer.allocUnsafe(Math.min(node.size - at, SPOOL_CHUNK));
      const { bytesRead } = await this.spool!.read(buf, 0, buf.length, node.offset! + at);
      if (bytesRead === 0) throw systemError('the build context spool file is shorter than its index');
      at += bytesRead;
      yield buf.subarray(0, bytesRead);
    }
  }

  /** A file's whole body (for the small files read whole: a Dockerfile, a .dockerignore). */
  async readAll(node: ContextNode): Promise<Buffer> {
    if (node.data) return node.data;
    const chunks: Buffer[] = [];
    for await (const c of this.read(node)) chunks.push(c);
    return Buffer.concat(chunks);
  }

  async close(): Promise<void> {
    const spool = this.spool;
    this.spool = null;
    await spool?.close();
  }

  // ---- building it from the tar ------------------------------------------------------

  /**
   * Reads the (uncompressed) tar into the index. Errors are EngineErrors:
   * `invalid` for a malformed or refused archive, `system` for I/O; the
   * input's own error as it is when it is one.
   */
  async ingest(tar: Readable): Promise<void> {
    const reader = new TarReader(tar);
    try {
      for await (const entry of reader.extract) {
        try {
          await this.add(entry.header as unknown as TarHeader, entry as unknown as AsyncIterable<Buffer>);
        } finally {
          entry.resume();
        }
      }
    } catch (e) {
      throw reader.fail(e, 'the build context');
    }
  }

  private async add(h: TarHeader, body: AsyncIterable<Buffer>): Promise<void> {
    if (++this.entries > this.maxEntries)
      throw invalidParameter(`the build context has more than ${this.maxEntries} entries`);
    const comps = cleanComponents(h.name);
    if (comps.length === 0) return; // the context's root: as dockerd's untar into a directory, skipped
    const type = h.type;
    if (type === 'character-device' || type === 'block-device' || type === 'fifo') return;
    const name = comps[comps.length - 1]!;
    const parent = this.parentDir(comps.slice(0, -1), 'create', h.name);
    // Owners are checked as extraction checks them, and not kept: a COPY sets its own.
    owner(h, 'uid');
    owner(h, 'gid');
    const mode = h.mode & 0o7777;
    const mtime = mtimeOf(h);
    const capability = entryXattrs(h).find(([n]) => n === 'security.capability')?.[1];
    switch (type) {
      case 'file':
      case 'contiguous-file': {
        const node: ContextNode = { kind: 'file', mode, mtime, size: 0, nlink: 0 };
        if (capability) node.capability = capability;
        await this.body(node, h.size, body);
        place(parent, name, node);
        return;
      }
      case 'directory': {
        const there = parent.children!.get(name);
        if (there?.kind === 'dir') {
          there.mode = mode;
          there.mtime = mtime;
          return;
        }
        place(parent, name, newDir(mode, mtime));
        return;
      }
      case 'symlink': {
        const to = h.linkname ?? '';
        if (to === '') throw invalidParameter(`layer archive symlink ${JSON.stringify(h.name)} has an empty target`);
        checkRawName(to, 'symlink target');
        place(parent, name, { kind: 'symlink', mode: 0o777, mtime, size: 0, target: to, nlink: 0 });
        return;
      }
      case 'link':
        return this.hardlink(h, parent, name);
      default:
        throw invalidParameter(`layer archive entry ${JSON.stringify(h.name)} has an unsupported type`);
    }
  }

  private hardlink(h: TarHeader, parent: ContextNode, name: string): void {
    const comps = cleanComponents(h.linkname ?? '', 'hardlink target');
    if (comps.length === 0)
      throw invalidParameter(`layer archive hardlink ${JSON.stringify(h.name)} points at the layer root`);
    const linkName = comps[comps.length - 1]!;
    const dir = this.parentDir(comps.slice(0, -1), 'existing', h.name);
    if (dir === parent && linkName === name) return; // a link to itself: nothing to do
    const from = dir.children!.get(linkName);
    if (!from)
      throw invalidParameter(
        `layer archive hardlink ${JSON.stringify(h.name)} points at a file that does not exist in the layer`,
      );
    if (from.kind === 'dir')
      throw invalidParameter(`layer archive hardlink ${JSON.stringify(h.name)} points at a directory`);
    const replaced = parent.children!.get(name);
    if (replaced?.kind === 'dir' && contains(replaced, dir))
      // Replacing the entry removes its own target (e.g. a link `d` → `d/f` over a directory `d`).
      throw invalidParameter(`layer archive hardlink ${JSON.stringify(h.name)} points at a file it replaces`);
    place(parent, name, from);
  }

  /**
   * The directory `comps` name, resolved as extraction resolves an entry's
   * parent: symlinks re-rooted at the context, `..` clamped, missing
   * directories made (0755, as `mkdir -p`) unless they must exist.
   */
  private parentDir(comps: readonly string[], policy: 'create' | 'existing', entryName: string): ContextNode {
    const stack: ContextNode[] = [];
    const pending = [...comps].reverse();
    let hops = 0;
    const notDirectory = () =>
      invalidParameter(`archive entry ${JSON.stringify(entryName)} has a parent that is not a directory`);
    while (pending.length > 0) {
      const c = pending.pop()!;
      if (c === '..') {
        stack.pop();
        continue;
      }
      const dir = stack.length ? stack[stack.length - 1]! : this.root;
      let child = dir.children!.get(c);
      if (child?.kind === 'symlink') {
        if (++hops > MAX_SYMLINK_HOPS) throw notDirectory();
        const target = child.target!;
        if (target.startsWith('/')) stack.length = 0;
        pending.push(...linkComponents(target).reverse());
        continue;
      }
      if (!child) {
        if (policy === 'existing')
          throw invalidParameter(`archive entry ${JSON.stringify(entryName)} refers to a path that does not exist`);
        child = newDir(0o755, Date.now() / 1000);
        place(dir, c, child);
      }
      if (child.kind !== 'dir') throw notDirectory();
      stack.push(child);
    }
    return stack.length ? stack[stack.length - 1]! : this.root;
  }

  /** A file's body: hashed, and kept in memory or appended to the spool file. */
  private async body(node: ContextNode, size: number, body: AsyncIterable<Buffer>): Promise<void> {
    const hash = createHash('sha256');
    if (this.memory + size <= MEMORY_BYTES) {
      const chunks: Buffer[] = [];
      let n = 0;
      for await (const c of body) {
        chunks.push(c);
        hash.update(c);
        n += c.length;
      }
      // A copy even of one chunk: that is often a view of a much larger buffer of the input.
      node.data = Buffer.concat(chunks, n);
      node.size = n;
      this.memory += n;
    } else {
      this.spool ??= await this.openSpool();
      node.offset = this.spoolSize;
      for await (const c of body) {
        hash.update(c);
        for (let done = 0; done < c.length; ) {
          const { bytesWritten } = await this.spool.write(c, done, c.length - done, this.spoolSize);
          done += bytesWritten;
          this.spoolSize += bytesWritten;
        }
      }
      node.size = this.spoolSize - node.offset;
    }
    node.sha256 = hash.digest('hex');
  }

  private async openSpool(): Promise<FileHandle> {
    try {
      return await open(this.spoolPath, C.O_RDWR | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW, 0o600);
    } catch (e) {
      throw systemError(`creating the build context's spool file: ${messageOf(e)}`, e);
    }
  }
}

/** `node` named `name` in `dir`, in place of whatever was there (and all under it, for a directory). */
function place(dir: ContextNode, name: string, node: ContextNode): void {
  const old = dir.children!.get(name);
  if (old === node) return;
  if (old) unlinked(old);
  node.nlink++;
  dir.children!.set(name, node);
}

function unlinked(node: ContextNode): void {
  node.nlink--;
  if (node.kind === 'dir' && node.nlink === 0) for (const child of node.children!.values()) unlinked(child);
}

/** Whether `node` is `dir` or lies somewhere under it. */
function contains(dir: ContextNode, node: ContextNode): boolean {
  if (dir === node) return true;
  for (const child of dir.children!.values()) if (child.kind === 'dir' && contains(child, node)) return true;
  return false;
}

/** Children of a directory in byte order of their names, as Go's filepath.Walk and our walkTree visit them. */
export function sortedChildren(dir: ContextNode): Array<[string, ContextNode]> {
  const keyed = [...dir.children!].map((e) => [Buffer.from(e[0]), e] as const);
  keyed.sort(([a], [b]) => Buffer.compare(a, b));
  return keyed.map(([, e]) => e);
}
