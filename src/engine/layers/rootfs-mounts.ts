// Container root filesystems: an overlay of the image's layer directories
// under the container's own upper directory.
import { mkdir } from 'node:fs/promises';
import { bindMount, isMountPoint, mountOverlay, unmountAsync } from '../os/mount.js';

export interface RootfsLayout {
  /** The image's layer `diff` directories, topmost first. */
  lowerDirs: string[];
  /** The container's writable layer. */
  upperDir: string;
  /** overlay's scratch directory, on the same filesystem as upperDir. */
  workDir: string;
  /** The mount point, the bundle's rootfs. */
  target: string;
}

/**
 * Mounts the container's rootfs at target. Idempotent: a rootfs that is
 * already mounted (a running container found again after a daemon restart)
 * is left as it is. An image without layers gets its upper dir bind-mounted,
 * since overlay needs at least one lower.
 */
export async function prepareRootfs(layout: RootfsLayout): Promise<string> {
  await Promise.all([
    mkdir(layout.upperDir, { recursive: true, mode: 0o755 }),
    mkdir(layout.workDir, { recursive: true, mode: 0o700 }),
    mkdir(layout.target, { recursive: true, mode: 0o755 }),
  ]);
  if (isMountPoint(layout.target)) return layout.target;
  if (layout.lowerDirs.length === 0) bindMount(layout.upperDir, layout.target);
  else mountOverlay(layout);
  return layout.target;
}

/** Unmounts a rootfs; a target that is not mounted, or is gone, is fine. */
export async function releaseRootfs(target: string): Promise<void> {
  await unmountAsync(target);
}
