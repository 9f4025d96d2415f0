// Directories whose children are unrelated trees (one per layer, one per
// container), and how such trees go away.
//
// ext4 places a new directory's inodes near its parent's, unless the parent
// carries the "top of a hierarchy" flag (FS_TOPDIR_FL, `chattr +T`); then the
// Orlov allocator spreads each child tree over its own block group, as it does
// for the children of `/`. That matters most on ext4 without a journal: there
// each new inode skips every inode of its group freed in the last seconds,
// looking each one up, so filling a layer right after a container or image was
// removed was several times slower (docs/decisions/storage.md has the measure).
// Filesystems without the flag ignore it.
import { randomBytes } from 'node:crypto';
import { lstat, readdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { Limiter } from '../limiter.js';
import { FS_TOPDIR_FL, native } from './native.js';

/** Marks `dir` so that its subdirectories are spread out; false where the filesystem has no such flag. */
export function spreadChildren(dir: string): boolean {
  return native.addInodeFlags(dir, FS_TOPDIR_FL);
}

/**
 * Removes `target` (a file or a whole tree) without waiting for the deletion:
 * it is renamed at once into `trashDir` (on the same filesystem), which the
 * caller empties at its next start, and deleted from there in the background.
 * Deleting a tree of thousands of files, or a large file on a filesystem
 * mounted with `discard`, takes hundreds of milliseconds that `docker rm` and
 * `docker rmi` would otherwise wait for. `prepare` runs first, in the
 * background too (a mount inside to undo: a rename takes it along); if it
 * fails, nothing is deleted. False when `target` did not exist.
 */
export async function removeInBackground(
  target: string,
  trashDir: string,
  onError: (err: unknown) => void,
  prepare: (renamed: string) => Promise<unknown> = async () => undefined,
): Promise<boolean> {
  const doomed = path.join(
    trashDir,
    `${TRASH_PREFIX}${path.basename(target).slice(0, 16)}-${randomBytes(6).toString('hex')}`,
  );
  try {
    await rename(target, doomed);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw e;
  }
  const job = deletions
    .run(() => prepare(doomed).then(() => rm(doomed, { recursive: true, force: true })))
    .catch(onError);
  pending.add(job);
  void job.finally(() => pending.delete(job));
  return true;
}

/** Resolves once every background deletion started so far has ended (for a clean stop). */
export async function backgroundDeletions(): Promise<void> {
  while (pending.size > 0) await Promise.all(pending);
}

const pending = new Set<Promise<unknown>>();

/** Background deletions run a few at a time: a thousand removals must not start a thousand unmounts at once. */
const deletions = new Limiter(4);

/** The names removeInBackground gives what it is deleting. */
export const TRASH_PREFIX = '.removing-';

/** Apparent size of the regular files under a directory (0 when it does not exist). */
export async function duBytes(dir: string): Promise<number> {
  let total = 0;
  const entries = await readdir(dir, { withFileTypes: true, recursive: true }).catch(() => []);
  for (const e of entries) {
    if (e.isFile()) total += (await lstat(path.join(e.parentPath, e.name)).catch(() => ({ size: 0 }))).size;
  }
  return total;
}
