// A container's OCI bundle, <data-root>/containers/<id>: its rootfs mounted
// (overlay: rootfs, upper, work), the /etc files berth owns (hostname, hosts,
// resolv.conf), and config.json, rewritten before each start from the stored
// configuration. Also where a commit marks a container it paused.
import type { Endpoints } from '../../network/endpoints.js';
import { access, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { ImageService } from '../../images/service.js';
import { prepareRootfs, releaseRootfs } from '../../layers/rootfs-mounts.js';
import { isMountPoint, mountShm, unmountAsync } from '../../os/mount.js';
import type { ExitWatcher } from '../../runtime/exits.js';
import { bindMounts, parseExtraHost, securityOptions, type SecurityOptions } from '../create/create.js';
import { type LinkedSettings, linkedSettings, withLinkEnv } from '../links.js';
import { type Container, isRunning } from '../container.js';
import type { ContainerLookup } from '../lookup.js';
import { namespacePlan } from '../spec/namespaces.js';
import { networkIdentity } from './netjoin.js';
import { cgroupsPath } from '../spec/cgroups.js';
import { networkDisabled, ownHostsNames, specNetworkMode } from '../spec/network.js';
import { budgetParents, type RealtimeBudget } from '../spec/realtime.js';
import { buildSpec, consoleSize, DEFAULT_SHM_SIZE, withDefaultEnv } from '../spec/spec.js';
import { resolveUser } from '../spec/user.js';
import type { VolumeService } from '../../volumes/service.js';
import { asBind, createMountpoints, propagatingBinds, tmpfsMounts } from '../create/mounts.js';

export interface BundleDeps {
  images: ImageService;
  exits: ExitWatcher;
  /** The init binary for HostConfig.Init; the spec's default when absent. */
  initPath?: string;
  /** Other containers, whose namespaces a container may join (PidMode, IpcMode) or which it links to. */
  lookup: Pick<ContainerLookup, 'find' | 'byId'>;
  /** The daemon's real-time budget for the containers' parent cgroup (--cpu-rt-period, --cpu-rt-runtime). */
  realtime?: RealtimeBudget;
  /** The daemon's parent cgroup of containers (--cgroup-parent). */
  cgroupParent?: string;
  /** What /etc/hosts and /etc/resolv.conf say of the container's networks. */
  endpoints: Pick<Endpoints, 'etcFiles' | 'bridgeAddress' | 'linkersNear'>;
  /** The container's volumes and inherited binds. */
  volumes: Pick<VolumeService, 'mountsOf'>;
  /** berthd's --data-root: binds near it are rslave unless asked otherwise (create.ts's nearDataRoot). */
  dataRoot: string;
}

/** A shareable IPC container's /dev/shm, a tmpfs on the host that containers joining its IPC bind too. */
const shmDir = (bundleDir: string) => path.join(bundleDir, 'shm');

/** Unmounts what a bundle has mounted on the host: its rootfs, and a shareable /dev/shm. */
export async function releaseMounts(bundleDir: string): Promise<void> {
  await unmountAsync(shmDir(bundleDir));
  await releaseRootfs(path.join(bundleDir, 'rootfs'));
}

/** In a container's bundle while a commit holds it paused (freeze/thaw). */
const frozenMarker = (c: Container) => path.join(c.bundleDir, 'frozen-for-commit');

export const markFrozen = (c: Container) => writeFile(frozenMarker(c), '');
export const unmarkFrozen = (c: Container) => rm(frozenMarker(c), { force: true });
export const isMarkedFrozen = (c: Container) =>
  access(frozenMarker(c)).then(
    () => true,
    () => false,
  );

export class Bundles {
  /** Bundles being prepared right after create, taken by the first start. */
  private readonly early = new Map<string, Promise<void>>();
  /**
   * Each container's security options, parsed once: at create (create.ts
   * checks them there), or at its first start after berthd itself started.
   */
  private readonly security = new Map<string, SecurityOptions>();

  constructor(private readonly deps: BundleDeps) {}

  /**
   * Right after create: clients start right after it (docker run attaches and
   * waits first), so the bundle is prepared meanwhile, off the start's critical
   * path. A failure here is retried, and reported, by the start.
   */
  prepareEarly(c: Container, security: SecurityOptions): void {
    this.security.set(c.id, security);
    const early = this.prepare(c);
    early.catch(() => undefined);
    this.early.set(c.id, early);
  }

  /** Before a start: the early preparation when it succeeded, else a new one. */
  async ready(c: Container): Promise<void> {
    const early = this.early.get(c.id);
    this.early.delete(c.id);
    const done = early
      ? await early.then(
          () => true,
          () => false,
        )
      : false;
    if (!done) await this.prepare(c);
  }

  /** Its HostConfig changed (an update): a bundle prepared early is written again by the start. */
  async reconfigured(id: string): Promise<void> {
    await this.early.get(id)?.catch(() => undefined);
    this.early.delete(id);
  }

  /** A removed container's: a preparation under way ends before its directory is torn down. */
  async forget(id: string): Promise<void> {
    await this.early.get(id)?.catch(() => undefined);
    this.early.delete(id);
    this.security.delete(id);
  }

  /** Mounts the rootfs and writes the OCI bundle: all a start needs before conmon. */
  private async prepare(c: Container): Promise<void> {
    const { exits, images } = this.deps;
    const [lowers] = await Promise.all([images.readyLayerDirs(c.imageId), exits.clear(c.id)]);
    await prepareRootfs({
      lowerDirs: lowers,
      upperDir: path.join(c.bundleDir, 'upper'),
      workDir: path.join(c.bundleDir, 'work'),
      target: c.rootfs,
    });
    if (c.hostConfig.IpcMode === 'shareable') await this.mountShm(c);
    await createMountpoints(c.hostConfig);
    // As dockerd, before every start: the budget may have been taken from the parent since.
    if (this.deps.realtime) await budgetParents(this.deps.realtime, cgroupsPath(c, this.deps.cgroupParent));
    const spec = await this.spec(c);
    await writeFile(path.join(c.bundleDir, 'config.json'), JSON.stringify(spec));
  }

  /** A shareable container's /dev/shm, on the host so that others can join it; kept until removal, as the rootfs. */
  private async mountShm(c: Container): Promise<void> {
    const dir = shmDir(c.bundleDir);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    if (!isMountPoint(dir)) mountShm(dir, c.hostConfig.ShmSize || DEFAULT_SHM_SIZE);
  }

  private async spec(c: Container) {
    const h = c.hostConfig;
    const security = this.securityOf(c);
    const size = consoleSize(h.ConsoleSize);
    const linked = this.linkedOf(c, true);
    const named = networkIdentity(c, (ref) => this.deps.lookup.find(ref));
    const [user, hostsFiles] = await Promise.all([
      resolveUser(c.rootfs, c.config.User ?? '', h.GroupAdd ?? []),
      this.etcFilesOf(c, linked.hosts, named.etcDir),
    ]);
    return buildSpec({
      ...h,
      args: [c.path, ...c.args],
      env: withDefaultEnv(withLinkEnv(linked.env, c.config.Env ?? []), {
        hostname: named.hostname,
        tty: c.config.Tty,
        home: user.home,
      }),
      cwd: c.config.WorkingDir || '/',
      user: { uid: user.uid, gid: user.gid, additionalGids: user.additionalGids },
      tty: c.config.Tty,
      ...(size ? { consoleSize: size } : {}),
      hostname: named.hostname,
      domainname: named.domainname,
      rootfsPath: c.rootfs,
      // Its own binds last: one at a destination it inherited (VolumesFrom) wins.
      mounts: [
        ...this.deps.volumes.mountsOf(c.id).map(asBind),
        ...propagatingBinds(bindMounts(h, c.recursiveReadonlyBinds, this.deps.dataRoot)),
      ],
      tmpfs: tmpfsMounts(h),
      hostsFiles,
      networkMode: specNetworkMode(c.config, h),
      // NetworkDisabled: no other container's network namespace either.
      namespaces: namespacePlan(
        networkDisabled(c.config) ? { ...h, NetworkMode: 'none' } : h,
        shmDir(c.bundleDir),
        (ref) => {
          const d = this.deps.lookup.find(ref);
          return {
            id: d.id,
            running: isRunning(d),
            pid: d.pid,
            ipcMode: d.hostConfig.IpcMode || 'private',
            shm: shmDir(d.bundleDir),
          };
        },
      ),
      noNewPrivileges: security.noNewPrivileges,
      ...(security.seccomp === undefined ? {} : { seccomp: security.seccomp }),
      ...(this.deps.initPath ? { initPath: this.deps.initPath } : {}),
      cgroupsPath: cgroupsPath(c, this.deps.cgroupParent),
    });
  }

  /**
   * Its /etc files: its own, written now, or (NetworkMode container:<id>) the
   * donor's, which the joiner's hostname, hosts and resolv.conf are (netjoin.ts).
   */
  private async etcFilesOf(
    c: Container,
    linkHosts: string[],
    etcDir: string,
  ): Promise<{ hosts: string; hostname: string; resolvConf: string }> {
    // Its own are written even so: docker cp reads a stopped joiner's (rootview.ts).
    const own = await writeEtcFiles(c, this.deps.endpoints, linkHosts);
    if (etcDir === c.bundleDir) return own;
    return etcFilesIn(etcDir);
  }

  /**
   * After a running container joined or left a network: its /etc files say so
   * (they are bind-mounted files, written in place, so it reads the new text),
   * as dockerd rewrites resolv.conf when a container gains a DNS server.
   */
  async networksChanged(c: Container): Promise<void> {
    await writeEtcFiles(c, this.deps.endpoints, this.linkedOf(c, false).hosts);
  }

  /**
   * A container started or joined a network: the running containers whose
   * links on its networks may name it get their /etc/hosts again, as
   * dockerd's resolver would answer the link at once. A failure is logged by
   * the caller's catch, not the start's.
   */
  async linkTargetChanged(c: Container): Promise<void> {
    for (const id of this.deps.endpoints.linkersNear(c.id)) {
      const linker = this.deps.lookup.byId(id);
      if (linker && isRunning(linker)) await this.networksChanged(linker);
    }
  }

  /** What its legacy links give a container (links.ts): at a start every child must run. */
  private linkedOf(c: Container, strict: boolean): LinkedSettings {
    if (!c.legacyLinks.length) return { hosts: [], env: [] };
    const { lookup, endpoints } = this.deps;
    return linkedSettings(c, lookup, (id) => endpoints.bridgeAddress(id), strict);
  }

  private securityOf(c: Container): SecurityOptions {
    let security = this.security.get(c.id);
    if (!security) {
      security = securityOptions(c.hostConfig.SecurityOpt ?? []);
      this.security.set(c.id, security);
    }
    return security;
  }
}

/** The files a container's /etc/hostname, /etc/hosts and /etc/resolv.conf are, in a bundle. */
export const etcFilesIn = (dir: string) => ({
  hostname: path.join(dir, 'hostname'),
  hosts: path.join(dir, 'hosts'),
  resolvConf: path.join(dir, 'resolv.conf'),
});

/** /etc/hostname, /etc/hosts and /etc/resolv.conf: files berth owns, bind-mounted read-write. */
async function writeEtcFiles(
  c: Container,
  endpoints: Pick<Endpoints, 'etcFiles'>,
  linkHosts: string[],
): Promise<{ hosts: string; hostname: string; resolvConf: string }> {
  const { hostname, hosts, resolvConf } = etcFilesIn(c.bundleDir);
  const h = c.hostConfig;
  const host = h.NetworkMode === 'host';
  // Its own name even in the host's network (the host's unless given at create), as dockerd writes it.
  const name = c.config.Hostname;
  const extra = (h.ExtraHosts ?? []).map((e) => {
    const { name: n, ip } = parseExtraHost(e);
    return `${ip}\t${n}`;
  });
  const net = await endpoints.etcFiles(c.id, {
    dns: h.Dns ?? [],
    search: h.DnsSearch ?? [],
    options: h.DnsOptions ?? [],
  });
  // As dockerd writes it: the container's own name on its first network's address; without one (no
  // network, as a CNI pod's sandbox), no line (libnetwork's updateHostsFile).
  const hostsText = host
    ? await readFile('/etc/hosts', 'utf8').catch(() => '127.0.0.1\tlocalhost\n')
    : [
        '127.0.0.1\tlocalhost',
        '::1\tlocalhost ip6-localhost ip6-loopback',
        'fe00::0\tip6-localnet',
        'ff00::0\tip6-mcastprefix',
        'ff02::1\tip6-allnodes',
        'ff02::2\tip6-allrouters',
        ...extra,
        // dockerd's order: --add-host entries, then links (legacy ones, then a user network's).
        ...linkHosts,
        ...net.linkHosts,
        ...(net.address ? [`${net.address}\t${ownHostsNames(name, c.config.Domainname)}`] : []),
        // A dual-stack first network's IPv6 address names it too, as dockerd writes it.
        ...(net.address6 ? [`${net.address6}\t${ownHostsNames(name, c.config.Domainname)}`] : []),
        '',
      ].join('\n');
  const resolvText = host ? await readFile('/etc/resolv.conf', 'utf8').catch(() => '') : net.resolvConf;
  await Promise.all([writeFile(hostname, `${name}\n`), writeFile(hosts, hostsText), writeFile(resolvConf, resolvText)]);
  return { hosts, hostname, resolvConf };
}
