// How overlayfs stores deletions in a layer directory, shared by apply (tar →
// dir) and diff (upper dir → tar): a whiteout is a 0/0 character device, an
// opaque directory carries trusted.overlay.opaque=y.
import { constants, type Stats, type BigIntStats } from 'node:fs';
import { mknod } from '../os/files.js';
import { lgetxattr, lsetxattr } from '../os/xattrs.js';

const OPAQUE_XATTR = 'trusted.overlay.opaque';

/** Creates an overlay whiteout at `path` (which must not exist): char 0/0, mode 0, owned by root. */
export function makeWhiteout(path: string): void {
  mknod(path, constants.S_IFCHR | 0, 0, 0);
}

export function isWhiteoutDevice(st: Pick<Stats | BigIntStats, 'isCharacterDevice' | 'rdev'>): boolean {
  return st.isCharacterDevice() && Number(st.rdev) === 0;
}

export function markOpaque(dirPath: string): void {
  lsetxattr(dirPath, OPAQUE_XATTR, Buffer.from('y'));
}

export function isOpaque(dirPath: string): boolean {
  const v = lgetxattr(dirPath, OPAQUE_XATTR);
  return v !== null && v.length === 1 && v[0] === 0x79; // 'y'
}

/**
 * xattrs that are never carried between a tar and a layer directory:
 * overlayfs's own control attributes (a layer that could set them could
 * redirect lookups or fake whiteouts; `user.overlay.*` is the same thing under
 * the `userxattr` mount option), and SELinux labels, which are host policy,
 * not image content.
 */
export function isPrivateXattr(name: string): boolean {
  return name.startsWith('trusted.overlay.') || name.startsWith('user.overlay.') || name === 'security.selinux';
}
