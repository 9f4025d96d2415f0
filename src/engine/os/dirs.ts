// Directories whose children are unrelated trees: one per layer, one per
// container.
//
// ext4 places a new directory's inodes near its parent's, unless the parent
// carries the "top of a hierarchy" flag (FS_TOPDIR_FL, `chattr +T`); then the
// Orlov allocator spreads each child tree over its own block group, as it does
// for the children of `/`. That matters most on ext4 without a journal: there
// each new inode skips every inode of its group freed in the last seconds,
// looking each one up, so filling a layer right after a container or image was
// removed took ~0.4 ms a file instead of ~0.05 ms (2,000 files: 780 ms against
// 110 ms on this project's machines). Filesystems without the flag ignore it.
import { FS_TOPDIR_FL, native } from './native.js';

/** Marks `dir` so that its subdirectories are spread out; false where the filesystem has no such flag. */
export function spreadChildren(dir: string): boolean {
  return native.addInodeFlags(dir, FS_TOPDIR_FL);
}
