// What `docker cp` learns of a path before it copies: dockerd's PathStat, sent
// base64-encoded JSON in the X-Docker-Container-Path-Stat header. Its mode is
// Go's os.FileMode, not st_mode: the type is in high bits of Go's own.
import type { BigIntStats } from 'node:fs';
import { constants as C, closeSync, fstatSync } from 'node:fs';
import { O_PATH, openInRoot, readlinkAt } from '../os/rooted.js';

export interface PathStat {
  name: string;
  size: number;
  /** Go os.FileMode bits. */
  mode: number;
  /** RFC 3339 with nanoseconds, as Go's time.Time marshals. */
  mtime: string;
  linkTarget: string;
}

/** Go's os.FileMode type and special bits (io/fs). */
const GO = {
  dir: 2 ** 31,
  symlink: 2 ** 27,
  device: 2 ** 26,
  namedPipe: 2 ** 25,
  socket: 2 ** 24,
  setuid: 2 ** 23,
  setgid: 2 ** 22,
  charDevice: 2 ** 21,
  sticky: 2 ** 20,
} as const;

/** Go's type bits for each st_mode file type (a regular file has none). */
const GO_TYPE = new Map<number, number>([
  [C.S_IFBLK, GO.device],
  [C.S_IFCHR, GO.device + GO.charDevice],
  [C.S_IFDIR, GO.dir],
  [C.S_IFIFO, GO.namedPipe],
  [C.S_IFLNK, GO.symlink],
  [C.S_IFSOCK, GO.socket],
]);

/** st_mode as Go's os.Lstat reports it. */
export function goFileMode(stMode: number): number {
  let mode = (stMode & 0o777) + (GO_TYPE.get(stMode & C.S_IFMT) ?? 0);
  if (stMode & 0o4000) mode += GO.setuid;
  if (stMode & 0o2000) mode += GO.setgid;
  if (stMode & 0o1000) mode += GO.sticky;
  return mode;
}

/** Go's time.Time JSON in UTC: RFC 3339, nanoseconds with trailing zeros dropped. */
export function goTime(ns: bigint): string {
  const s = ns / 1_000_000_000n;
  const frac = ns - s * 1_000_000_000n;
  const base = new Date(Number(s) * 1000).toISOString().slice(0, 19);
  const nanos = frac === 0n ? '' : `.${frac.toString().padStart(9, '0').replace(/0+$/, '')}`;
  return `${base}${nanos}Z`;
}

export function pathStat(name: string, st: BigIntStats, linkTarget: string): PathStat {
  return { name, size: Number(st.size), mode: goFileMode(Number(st.mode)), mtime: goTime(st.mtimeNs), linkTarget };
}

/** Linux's MAXSYMLINKS. */
const MAX_HOPS = 40;

/**
 * Where `path` leads inside the root, every symlink on the way followed (as
 * far as they go: a missing component is kept as it is), `..` clamped at the
 * root: dockerd's FollowSymlinkInScope, for a PathStat's linkTarget and for
 * the mount a destination lies in. Each step is opened with openat2 inside
 * the root, so the answer names a place inside it whatever the container does.
 */
export function followInScope(rootFd: number, path: string): string {
  const done: string[] = [];
  const pending = path.split('/').filter((c) => c !== '' && c !== '.');
  let hops = 0;
  while (pending.length > 0) {
    const c = pending.shift()!;
    if (c === '..') {
      done.pop();
      continue;
    }
    const target = linkAt(rootFd, `/${[...done, c].join('/')}`);
    if (target === null) {
      done.push(c);
      continue;
    }
    if (++hops > MAX_HOPS) break;
    if (target.startsWith('/')) done.length = 0;
    pending.unshift(...target.split('/').filter((t) => t !== '' && t !== '.'));
  }
  return `/${done.join('/')}`;
}

/** The symlink's text when `path` (inside the root) is one; null for anything else, or nothing. */
function linkAt(rootFd: number, path: string): string | null {
  let fd: number;
  try {
    fd = openInRoot(rootFd, path, O_PATH | C.O_NOFOLLOW);
  } catch {
    return null;
  }
  try {
    return fstatSync(fd).isSymbolicLink() ? readlinkAt(fd) : null;
  } finally {
    closeSync(fd);
  }
}
