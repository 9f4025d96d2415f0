// Paths resolved inside a directory taken as `/` (a container's root), by the
// kernel in one walk: openat2 with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS.
// Absolute symlinks and `..` stay inside, and a symlink swapped in meanwhile
// can only lead elsewhere inside (CVE-2018-15664). See src/native/rooted.c.
import { constants as C } from 'node:fs';
import { native } from './native.js';

/** <fcntl.h> O_PATH: a descriptor that names a file without opening it for I/O. */
export const O_PATH = 0o10000000;
/** <linux/openat2.h> */
const RESOLVE_NO_MAGICLINKS = 0x02;
const RESOLVE_NO_SYMLINKS = 0x04;
const RESOLVE_BENEATH = 0x08;
const RESOLVE_IN_ROOT = 0x10;

/** Opens `path` (absolute or relative: both from rootFd) inside rootFd, never leaving it. */
export function openInRoot(rootFd: number, path: string, flags: number, mode = 0): number {
  return native.openat2(rootFd, path === '' ? '.' : path, flags, mode, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
}

/**
 * Opens `path` (relative) beneath dirFd, following no symlink at all: EXDEV
 * when it would leave dirFd, ELOOP at a symlink (dockerd's safepath for a
 * volume's Subpath: what was resolved and checked is what gets mounted).
 */
export function openBeneath(dirFd: number, path: string, flags: number): number {
  return native.openat2(dirFd, path, flags, 0, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
}

/** A directory inside rootFd, as an O_PATH descriptor (followed through symlinks, inside the root). */
export function openDirInRoot(rootFd: number, path: string): number {
  return openInRoot(rootFd, path, O_PATH | C.O_DIRECTORY);
}

/** The text of the symlink an O_PATH|O_NOFOLLOW descriptor holds (or of `name` in the directory fd). */
export function readlinkAt(fd: number, name = ''): string {
  return native.readlinkAt(fd, name);
}

export interface ViewMount {
  /** Host path bound over the rootfs. */
  source: string;
  /** Where the container sees it. */
  destination: string;
  readonly: boolean;
}

export interface RootView {
  /** O_PATH descriptor of the rootfs, its mounts bound over it. */
  rootFd: number;
  /** Keeps the view (a detached mount tree, or a private mount namespace) and so its mounts alive. */
  nsFd: number;
}

/**
 * The rootfs as the container sees it (its mounts bound over it), where only
 * berthd reaches it: a detached copy of the rootfs mount with the mounts
 * attached to it, or, on kernels that attach nothing to a detached tree, a
 * mount namespace of berthd's own (see src/native/rooted.c). Invisible on the
 * host; close both descriptors and it is gone. Mounts are bound in order: a
 * later one may lie inside an earlier one. `namespace`: the namespace even
 * where a detached tree can be made (for tests of that way).
 */
export function openRootView(
  rootfs: string,
  mounts: readonly ViewMount[],
  opts: { namespace?: boolean } = {},
): RootView {
  const [rootFd, nsFd] = native.rootView(
    rootfs,
    mounts.map((m) => m.source),
    mounts.map((m) => m.destination),
    mounts.map((m) => m.readonly),
    opts.namespace === true,
  );
  return { rootFd, nsFd };
}
