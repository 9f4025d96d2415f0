// A container's filesystem as the container sees it, for `docker cp`: its
// rootfs with its mounts over it, in a detached mount tree (or a private mount
// namespace) of berthd's (os/rooted.ts), so that paths resolve through binds (and volumes) exactly as
// inside, and nothing is mounted on the host for it.
import path from 'node:path';
import { conflict } from '../../../errors.js';
import type { ImageService } from '../../images/service.js';
import { prepareRootfs } from '../../layers/rootfs-mounts.js';
import { isMountPoint } from '../../os/mount.js';
import { openRootView, type RootView, type ViewMount } from '../../os/rooted.js';
import type { Container } from '../container.js';
import type { ContainerMount } from '../create/mounts.js';

/**
 * What a container sees over its rootfs, in mount order (parents before what
 * lies inside them): the /etc files berth writes, then its volumes and binds
 * (`points`: ContainerService.mountPoints). This is the one place `docker cp`
 * learns of mounts. A tmpfs is left out: its content lives only inside the
 * running container (dockerd gives each copy an empty one of its own).
 */
export function viewMounts(c: Container, points: readonly ContainerMount[]): ViewMount[] {
  const etc = ['hostname', 'hosts', 'resolv.conf'].map((f) => ({
    source: path.join(c.etcDir, f),
    destination: `/etc/${f}`,
    readonly: c.hostConfig.ReadonlyRootfs ?? false,
  }));
  const mounted = points
    .filter((m) => m.type !== 'tmpfs')
    .map((m) => ({ source: subpathBound(m) ?? m.source, destination: m.destination, readonly: !m.rw }));
  const depth = (m: ViewMount) => m.destination.split('/').filter(Boolean).length;
  // Stable: of two mounts on one path, the later wins, as in the runtime.
  return [...etc, ...mounted].sort((a, b) => depth(a) - depth(b));
}

/**
 * Where a volume's subpath is bound while the container runs. Stopped, it is
 * not bound, and binding the path unchecked could follow a symlink the volume
 * holds out of it: refused rather than copying to or from the wrong place.
 */
function subpathBound(m: ContainerMount): string | undefined {
  if (!m.bindSource) return undefined;
  if (!isMountPoint(m.bindSource))
    throw conflict(
      `docker cp reaches the volume subpath mounted at ${m.destination} only while the container runs (berth does not mount it for a stopped one yet)`,
    );
  return m.bindSource;
}

/**
 * Opens the container's view. A rootfs that is not mounted (a stopped
 * container after a reboot) is mounted where a start would mount it, and
 * stays so, as after any start: a start then finds it ready. A mounted one
 * (the usual case) is taken as it is, with no trip through the thread pool:
 * under load each trip cost a copy's first byte milliseconds.
 */
export async function openContainerView(
  c: Container,
  images: ImageService,
  mounts: readonly ViewMount[],
): Promise<RootView> {
  if (!isMountPoint(c.rootfs)) {
    await prepareRootfs({
      lowerDirs: await images.readyLayerDirs(c.imageId),
      upperDir: path.join(c.bundleDir, 'upper'),
      workDir: path.join(c.bundleDir, 'work'),
      target: c.rootfs,
    });
  }
  return openRootView(c.rootfs, mounts);
}
