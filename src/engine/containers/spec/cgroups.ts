// Where a container's cgroups are, under the cgroupfs driver (the only one
// berth has; dockerd picks systemd's only when told to, or on a pure v2 host
// run by systemd). runc is given `<CgroupParent>/<id>` (berth's own parent,
// /berth, when none is asked) and makes it under every hierarchy: v1's
// controllers, name=systemd, and the unified one beside them on a hybrid host.
// An absolute path is taken from each hierarchy's root; a relative one from
// the cgroup runc itself runs in there (berthd's, as conmon's), as runc's
// fs manager does (subsysPath). Everything berth reads or writes of a
// container's cgroups (stats, top, real-time budgets) finds them here; runc
// removes the container's own at delete, and leaves the parents, as with dockerd.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { invalidParameter } from '../../../errors.js';
import { CGROUP_ROOT, cgroupFeatures } from '../../os/cgroupinfo.js';
import { cgroupVersion } from '../../os/kernel.js';

/** berth's parent of containers' cgroups when the container asks none (dockerd's is /docker). */
const DEFAULT_PARENT = '/berth';

/**
 * The cgroups path runc is given: the parent joined with the id (Go's filepath.Join: cleaned, a
 * relative one kept relative). The parent is the container's, else the daemon's (--cgroup-parent).
 */
export function cgroupsPath(
  c: { id: string; hostConfig: { CgroupParent?: string | null } },
  daemonParent = '',
): string {
  return path.posix.join(c.hostConfig.CgroupParent || daemonParent || DEFAULT_PARENT, c.id);
}

/**
 * The directory of cgroup `cgroupsPath` in the hierarchy of `controller`
 * (`memory`, `cpu`, ...; '' for the unified one), as runc makes it.
 */
export function cgroupDir(controller: string, cgroupsPath: string): string {
  const unifiedOnly = cgroupVersion() === '2';
  const mount = unifiedOnly ? CGROUP_ROOT : path.join(CGROUP_ROOT, controller === '' ? 'unified' : controller);
  if (cgroupsPath.startsWith('/')) return path.join(mount, path.posix.normalize(cgroupsPath));
  // runc's CleanPath: a relative path cannot climb out of the cgroup it is taken from.
  const inner = path.posix.relative('/', path.posix.normalize(`/${cgroupsPath}`));
  return path.join(mount, ownCgroup(unifiedOnly ? '' : controller), inner);
}

/** berthd's own cgroup in a hierarchy, from /proc/self/cgroup (`4:memory:/x`, `0::/x` for the unified one). */
function ownCgroup(controller: string): string {
  const text = readFileSync('/proc/self/cgroup', 'utf8');
  for (const line of text.split('\n')) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    const [, list = '', p = '/'] = m;
    if (controller === '' ? list === '' : list.split(',').includes(controller)) return p;
  }
  return '/';
}

/**
 * CgroupnsMode as dockerd checks it: host, private, or empty (the default);
 * private on a kernel without cgroup namespaces is warned of.
 */
export function checkCgroupnsMode(mode: string | undefined, warnings: string[]): void {
  if (mode === undefined || mode === '' || mode === 'host') return;
  if (mode !== 'private') throw invalidParameter(`invalid cgroup namespace mode: ${mode}`);
  if (!cgroupFeatures().cgroupNamespaces) {
    warnings.push('Your kernel does not support cgroup namespaces.  Cgroup namespace setting discarded.');
  }
}

/**
 * dockerd's default cgroup namespace (adaptContainerSettings): the host's on
 * cgroup v1 (hybrid included), a private one on a pure v2 host, privileged
 * containers' too.
 */
export function defaultCgroupnsMode(): 'host' | 'private' {
  return cgroupVersion() === '2' ? 'private' : 'host';
}

/** Whether the container gets a cgroup namespace of its own. */
export const privateCgroupns = (mode: string | undefined) => mode === 'private' && cgroupFeatures().cgroupNamespaces;
