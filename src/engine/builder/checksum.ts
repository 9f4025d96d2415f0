// The build cache's key for a COPY or ADD: a checksum of the step's sources'
// names, types, permission bits, link targets and contents, in a tree on disk
// or in a received context's index.
import { createHash } from 'node:crypto';
import { constants as C, readlinkSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { posix } from 'node:path';
import { systemError } from '../../errors.js';
import { openListed, walkTree, type EntryStat, type WalkEntry } from '../layers/walk.js';
import type { ContextIndex, ContextNode } from './context-index.js';
import { type CopySource, indexWalk, READ_AHEAD, READ_CHUNK } from './sources.js';

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

// ---- sources in a received context's index --------------------------------------------

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
