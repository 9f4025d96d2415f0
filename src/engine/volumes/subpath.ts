// A mount of part of a volume (VolumeOptions.Subpath, API 1.45), as dockerd's
// safepath makes it: the subpath is resolved inside the volume (its symlinks
// followed, as long as they stay inside), opened beneath the volume with no
// symlink followed at all, and that very file bound at a path of berthd's
// own, which the container's spec names. A container sharing the volume
// cannot swap a symlink in between the check and runc's bind: runc binds what
// was checked, not a path resolved again.
import {
  closeSync,
  constants as C,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  realpathSync,
  rmdirSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { invalidParameter, notFound, systemError } from '../../errors.js';
import { bindMount, unmount } from '../os/mount.js';
import { O_PATH, openBeneath } from '../os/rooted.js';

/** Go's filepath.IsLocal: relative, not empty, and never above where it starts. */
export function isLocalPath(p: string): boolean {
  if (p === '' || p.startsWith('/')) return false;
  const c = path.posix.normalize(p);
  return c !== '..' && !c.startsWith('../');
}

/** Go's words for the errno (Node's messages put the code and the call first). */
const ERRNO_TEXT: Record<string, string> = {
  ENOENT: 'no such file or directory',
  ELOOP: 'too many levels of symbolic links',
  ENOTDIR: 'not a directory',
};
const notAccessible = (p: string, call: string, e: unknown) => {
  const code = (e as NodeJS.ErrnoException).code ?? '';
  return notFound(`cannot access path ${p}: ${call} ${p}: ${ERRNO_TEXT[code] ?? (e as Error).message}`);
};
const escapes = (base: string, subpath: string) =>
  invalidParameter(`path concatenation escapes the base directory, base: ${base}, subpath: ${subpath}`);

/**
 * Binds `subpath` of the volume at `volumePath` onto `target` (made a
 * directory or an empty file, as the subpath is); a bind left there before is
 * replaced. Throws dockerd's errors: NotFound when the subpath is not there,
 * InvalidParameter when it leads out of the volume.
 */
export function mountSubpath(volumePath: string, subpath: string, target: string): void {
  const base = realpathSync(volumePath);
  const combined = path.join(base, subpath);
  let resolved: string;
  try {
    resolved = realpathSync(combined);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') throw notAccessible(combined, 'lstat', e);
    throw systemError(`error while resolving symlinks in combined path "${combined}": ${(e as Error).message}`, e);
  }
  const rel = path.relative(base, resolved);
  if (rel !== '' && !isLocalPath(rel)) throw escapes(base, subpath);
  const baseFd = openSync(base, C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW);
  let fd: number;
  try {
    fd = openBeneath(baseFd, rel || '.', O_PATH);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EXDEV') throw escapes(base, subpath);
    if (code === 'ENOENT' || code === 'ELOOP') throw notAccessible(resolved, 'openat2', e);
    throw systemError(`openat2 ${rel}: ${(e as Error).message}`, e);
  } finally {
    closeSync(baseFd);
  }
  try {
    const dir = fstatSync(fd).isDirectory();
    clearTarget(target);
    mkdirSync(path.dirname(target), { recursive: true, mode: 0o700 });
    if (dir) mkdirSync(target, { mode: 0o755 });
    else writeFileSync(target, '', { mode: 0o644 });
    bindMount(`/proc/self/fd/${fd}`, target);
  } finally {
    closeSync(fd);
  }
}

/** Unbinds and removes what mountSubpath made: the targets, then their directory, if there. */
export function unmountSubpaths(dir: string, targets: string[]): void {
  for (const t of targets) clearTarget(t);
  try {
    rmdirSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
}

/** Binds stacked on one target that clearTarget takes off (one each start at most, even after crashes). */
const MAX_STACKED = 16;

/**
 * A target unbound (every bind stacked there) and removed, never recursively:
 * whatever is still bound there is a volume's content.
 */
function clearTarget(target: string): void {
  for (let i = 0; i < MAX_STACKED && unmount(target); i++);
  try {
    if (lstatSync(target).isDirectory()) rmdirSync(target);
    else unlinkSync(target);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
}
