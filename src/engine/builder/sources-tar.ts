// The tar of a COPY or ADD step's sources laid out for the destination
// directory: a directory source's contents, a file source as one entry (under
// its own name or the destination's), a local archive ADD expands as its
// entries; from a tree on disk or a received context's index.
import { constants as C, readlinkSync } from 'node:fs';
import { type FileHandle, lstat, open } from 'node:fs/promises';
import { posix } from 'node:path';
import { Readable } from 'node:stream';
import tarStream from 'tar-stream';
import { isEngineError, messageOf, systemError } from '../../errors.js';
import { bodyPadding, encodeEntryHeader, endOfArchive, type EntryHeader, type EntryType } from '../layers/tarformat.js';
import { openListed, walkTree, type EntryStat, type WalkEntry } from '../layers/walk.js';
import { lgetxattr } from '../os/xattrs.js';
import { archiveEntries, fileStream, isArchive } from './add-archive.js';
import type { ContextIndex, ContextNode } from './context-index.js';
import { type CopySource, indexWalk, READ_AHEAD, READ_CHUNK } from './sources.js';

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

// ---- sources in a received context's index --------------------------------------------

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

/**
 * COPY/ADD --chmod: the tar with every entry but symlinks given `mode` (BuildKit
 * applies it to each file and directory copied). Re-encoded through tar-stream:
 * only steps with the flag pay for it.
 */
export function withMode(input: Readable, mode: number): Readable {
  const extract = tarStream.extract();
  const pack = tarStream.pack();
  extract.on('entry', (h, body, next) => {
    const header = h.type === 'symlink' ? h : { ...h, mode };
    body.pipe(pack.entry(header, (err) => (err ? extract.destroy(err) : next())));
  });
  extract.on('finish', () => pack.finalize());
  extract.on('error', (e) => pack.destroy(e));
  input.on('error', (e) => extract.destroy(e));
  input.pipe(extract);
  return Readable.from(pack, { objectMode: false });
}
