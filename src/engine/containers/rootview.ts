// A container's filesystem as the container sees it, for `docker cp`: its
// rootfs with its mounts over it, in a private mount namespace of berthd's
// (os/rooted.ts), so that paths resolve through binds (and volumes) exactly as
// inside, and nothing is mounted on the host for it.
import path from 'node:path';
import type { ImageService } from '../images/service.js';
import { prepareRootfs } from '../layers/rootfs-mounts.js';
import { openRootView, type RootView, type ViewMount } from '../os/rooted.js';
import { bindMounts } from './create.js';
import type { Container } from './lookup.js';

/**
 * What a container sees over its rootfs, in mount order (parents before what
 * lies inside them): the /etc files berth writes, then its bind mounts. This
 * is the one place `docker cp` learns of mounts: volumes join the list here.
 */
export function containerMounts(c: Container): ViewMount[] {
  const etc = ['hostname', 'hosts', 'resolv.conf'].map((f) => ({
    source: path.join(c.bundleDir, f),
    destination: `/etc/${f}`,
    readonly: c.hostConfig.ReadonlyRootfs ?? false,
  }));
  const binds = bindMounts(c.hostConfig, c.recursiveReadonlyBinds).map((b) => ({
    source: b.source,
    destination: b.destination,
    readonly: b.readonly ?? false,
  }));
  const depth = (m: ViewMount) => m.destination.split('/').filter(Boolean).length;
  // Stable: of two mounts on one path, the later wins, as in the runtime.
  return [...etc, ...binds].sort((a, b) => depth(a) - depth(b));
}

/**
 * Opens the container's view. A rootfs that is not mounted (a stopped
 * container after a reboot) is mounted where a start would mount it, and
 * stays so, as after any start: a start then finds it ready.
 */
export async function openContainerView(c: Container, images: ImageService): Promise<RootView> {
  await prepareRootfs({
    lowerDirs: await images.readyLayerDirs(c.imageId),
    upperDir: path.join(c.bundleDir, 'upper'),
    workDir: path.join(c.bundleDir, 'work'),
    target: c.rootfs,
  });
  return openRootView(c.rootfs, containerMounts(c));
}
