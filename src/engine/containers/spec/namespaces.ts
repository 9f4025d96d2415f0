// Docker's namespace modes: PidMode, UTSMode, IpcMode (and UsernsMode, which
// berth has only as the host's). Checked at create in dockerd's words; at
// start, turned into the namespaces the spec creates, shares with the host, or
// joins (another container's, through /proc/<pid>/ns).
import { conflict, invalidParameter } from '../../../errors.js';
import type { Given, HostConfigBody } from '../config.js';

/** How the spec gets one namespace: its own (absent), the host's, or another process's. */
export type NamespaceSource = 'host' | { path: string };

/** The namespaces a container does not create for itself, and where /dev/shm comes from. */
export interface NamespacePlan {
  /** NetworkMode container:<id>: the donor's network namespace (host and none are the spec's networkMode). */
  network?: NamespaceSource;
  pid?: NamespaceSource;
  uts?: NamespaceSource;
  ipc?: NamespaceSource;
  /** IpcMode: a tmpfs on the host (its own when shareable, the host's or a donor's), or none; its own tmpfs when absent. */
  shm?: { bind: string } | 'none';
}

const CONTAINER = 'container:';
const IPC_MODES = ['', 'private', 'shareable', 'host', 'none'];

/** The checks dockerd makes of the modes at create (runconfig validation, daemon verifyPlatformContainerSettings). */
export function checkNamespaceModes(
  h: Given<HostConfigBody>,
  c: { hostname?: string; domainname?: string; exposedPorts?: Record<string, unknown> | null },
): void {
  checkNetworkContainerMode(h, c);
  const hostname = c.hostname;
  const pid = h.PidMode ?? '';
  if (!(pid === '' || pid === 'host' || joined(pid))) throw invalidParameter(`invalid PID mode: ${pid}`);
  const uts = h.UTSMode ?? '';
  if (!(uts === '' || uts === 'host')) throw invalidParameter(`invalid UTS mode: ${uts}`);
  if (uts === 'host' && hostname) throw invalidParameter('conflicting options: hostname and the UTS mode');
  // runc would refuse the kernel.domainname sysctl at start: the host's domain is not the container's to set.
  if (uts === 'host' && c.domainname) throw invalidParameter('conflicting options: domainname and the UTS mode');
  const ipc = h.IpcMode ?? '';
  if (!(IPC_MODES.includes(ipc) || joined(ipc))) throw invalidParameter(`invalid IPC mode: ${ipc}`);
  const userns = h.UsernsMode ?? '';
  // berth runs no user namespaces: every container is in the host's, which is what 'host' asks.
  if (!(userns === '' || userns === 'host')) throw invalidParameter(`invalid USER mode: ${userns}`);
  const isolation = h.Isolation ?? '';
  if (!(isolation === '' || isolation.toLowerCase() === 'default')) {
    throw invalidParameter(`Invalid isolation: "${isolation}" - linux only supports 'default'`);
  }
}

/** NetworkMode container:<id> shares the donor's network and what describes it (runconfig's validateNetContainerMode). */
function checkNetworkContainerMode(
  h: Given<HostConfigBody>,
  c: { hostname?: string; exposedPorts?: Record<string, unknown> | null },
): void {
  const mode = h.NetworkMode ?? '';
  if (!mode.startsWith(CONTAINER)) return;
  if (!joined(mode)) throw invalidParameter('invalid network mode: invalid container format container:<name|id>');
  if (c.hostname) throw invalidParameter('conflicting options: hostname and the network mode');
  if (Array.isArray(h.Links) && h.Links.length) {
    throw invalidParameter(
      "conflicting options: container type network can't be used with links. This would result in undefined behavior",
    );
  }
  if (h.Dns?.length) throw invalidParameter('conflicting options: dns and the network mode');
  if (h.ExtraHosts?.length)
    throw invalidParameter('conflicting options: custom host-to-IP mapping and the network mode');
  if (Object.keys(h.PortBindings ?? {}).length || h.PublishAllPorts) {
    throw invalidParameter('conflicting options: port publishing and the container type network mode');
  }
  if (Object.keys(c.exposedPorts ?? {}).length) {
    throw invalidParameter('conflicting options: port exposing and the container type network mode');
  }
}

/** The other container a `container:<name or id>` mode names (something after the colon); undefined for any other mode. */
export function joined(mode: string): string | undefined {
  return mode.startsWith(CONTAINER) && mode.length > CONTAINER.length ? mode.slice(CONTAINER.length) : undefined;
}

/**
 * `container:<name>` modes as dockerd records them (adaptSharedNamespaceContainer):
 * with the other container's id, so that renaming it keeps the sharing. A
 * container not found is left as named: the start reports it.
 */
export function withDonorIds<H extends { NetworkMode?: string; PidMode?: string; IpcMode?: string }>(
  h: H,
  idOf: (ref: string) => string | undefined,
): H {
  const out = { ...h };
  for (const key of ['NetworkMode', 'PidMode', 'IpcMode'] as const) {
    const ref = joined(h[key] ?? '');
    const id = ref && idOf(ref);
    if (id) out[key] = `${CONTAINER}${id}`;
  }
  return out;
}

/** What start needs of another container: its pid while it runs, and its IpcMode. */
export interface Donor {
  id: string;
  running: boolean;
  pid: number;
  ipcMode: string;
  /** Where its /dev/shm is on the host when it is shareable. */
  shm: string;
}

/**
 * The namespaces and /dev/shm of a container about to start. `find` looks a
 * container up by name or id (throwing dockerd's 404 when there is none).
 */
export function namespacePlan(
  h: { NetworkMode?: unknown; PidMode?: unknown; UTSMode?: unknown; IpcMode?: unknown },
  ownShm: string,
  find: (ref: string) => Donor,
): NamespacePlan {
  const plan: NamespacePlan = {};
  const netOf = joined(String(h.NetworkMode ?? ''));
  if (netOf) plan.network = { path: `/proc/${runningDonor(find(netOf), 'network namespace').pid}/ns/net` };
  const pid = String(h.PidMode ?? '');
  if (pid === 'host') plan.pid = 'host';
  const pidOf = joined(pid);
  if (pidOf) plan.pid = { path: `/proc/${runningDonor(find(pidOf), 'PID').pid}/ns/pid` };
  if (h.UTSMode === 'host') plan.uts = 'host';
  const ipc = String(h.IpcMode ?? '');
  if (ipc === 'host') Object.assign(plan, { ipc: 'host', shm: { bind: '/dev/shm' } });
  if (ipc === 'none') plan.shm = 'none';
  if (ipc === 'shareable') plan.shm = { bind: ownShm };
  const ipcOf = joined(ipc);
  if (ipcOf) {
    const donor = runningDonor(find(ipcOf), 'IPC');
    if (donor.ipcMode !== 'shareable' && donor.ipcMode !== 'host') {
      throw conflict('non-shareable IPC (hint: use IpcMode:shareable for the donor container)');
    }
    plan.ipc = donor.ipcMode === 'host' ? 'host' : { path: `/proc/${donor.pid}/ns/ipc` };
    plan.shm = { bind: donor.ipcMode === 'host' ? '/dev/shm' : donor.shm };
  }
  return plan;
}

function runningDonor(d: Donor, what: 'PID' | 'IPC' | 'network namespace'): Donor {
  if (!d.running || d.pid <= 0) throw conflict(`cannot join ${what} of a non running container: ${d.id}`);
  return d;
}
