// The OCI runtime spec (runc's config.json) for a container, built from its
// resolved configuration. Two host facts go in, each read from /proc once and
// cached: the RLIMIT_NOFILE hard limit (ulimits.ts; an input, so tests can pass their own)
// and berthd's capability bounding set (capabilities.ts).
//
// Defaults follow dockerd's (moby oci/defaults.go and daemon/oci_linux.go); the
// seccomp profile is berth's own (seccomp.ts). Left undone: AppArmor, and the
// host device nodes a privileged container gets in its /dev.
import { invalidParameter } from '../../../errors.js';
import { resolveCapabilities } from './capabilities.js';
import type { HostConfig } from '../config.js';
import type { NamespacePlan } from './namespaces.js';
import { protectedPaths } from './paths.js';
import { hostHardLimit, rlimits } from './ulimits.js';
import { deviceOf } from './devices.js';
import { type LimitsInput, specLimits } from './limits.js';
import { privateCgroupns } from './cgroups.js';
import type {
  OciDeviceRule,
  OciLinux,
  OciMount,
  OciNamespaceType,
  OciProcess,
  OciResources,
  OciSpec,
  OciUser,
} from './oci.js';
import { defaultSeccomp, profileToOci, type SeccompProfile } from './seccomp.js';

// ------------------------------------------------------------------- input

export type Propagation = 'private' | 'rprivate' | 'shared' | 'rshared' | 'slave' | 'rslave';

export interface BindMount {
  source: string;
  destination: string;
  readonly?: boolean;
  /** Read-only submounts too (rro), not just the mount itself. */
  recursive?: boolean;
  /** Docker's default is rprivate. */
  propagation?: Propagation;
  /** Only the source itself, not the mounts under it (BindOptions.NonRecursive). */
  nonRecursive?: true;
  /** rslave not asked for but given, its source holding berthd's data root (create.ts's nearDataRoot). */
  slaveOfDataRoot?: true;
}

/** A tmpfs of the container's own (HostConfig.Tmpfs, Mounts of type tmpfs), its mount options merged. */
export interface TmpfsMount {
  destination: string;
  options: string[];
}

/**
 * The HostConfig fields the spec reads, as Docker names and means them; absent
 * means Docker's default. Memory: bytes, 0 unlimited. MemorySwap: memory+swap,
 * -1 unlimited, 0 twice Memory. MemorySwappiness: 0-100 (cgroup v1), null the
 * kernel's. PidsLimit: 0 or negative unlimited. Init: run
 * catatonit as pid 1, the command as its child. ShmSize: /dev/shm, 64 MiB when 0.
 */
export type SpecHostConfig = Partial<
  Pick<
    HostConfig,
    | 'Privileged'
    | 'ReadonlyRootfs'
    | 'CapAdd'
    | 'CapDrop'
    | 'Memory'
    | 'MemorySwap'
    | 'MemorySwappiness'
    | 'NanoCpus'
    | 'CpuShares'
    | 'CpusetCpus'
    | 'CpuRealtimePeriod'
    | 'CpuRealtimeRuntime'
    | 'PidsLimit'
    | 'Init'
    | 'ShmSize'
    | 'DeviceCgroupRules'
    | 'OomScoreAdj'
    | 'Ulimits'
    | 'Sysctls'
    | 'Devices'
    | 'MaskedPaths'
    | 'ReadonlyPaths'
    | 'Annotations'
  >
>;

/** What the spec is built from: the container's HostConfig fields, and what start works out. */
export interface SpecInput extends SpecHostConfig, LimitsInput {
  /** host or private (a cgroup namespace of its own: cgroups.ts). */
  CgroupnsMode?: string;
  args: string[];
  env?: string[];
  /** Absolute path inside the container; '/' when absent. */
  cwd?: string;
  user?: OciUser;
  tty?: boolean;
  /** With tty: the terminal's size from the start (HostConfig.ConsoleSize). */
  consoleSize?: { height: number; width: number };
  hostname?: string;
  /** Config.Domainname: the NIS domain, set through the kernel.domainname sysctl as dockerd sets it. */
  domainname?: string;
  rootfsPath: string;
  mounts?: BindMount[];
  tmpfs?: TmpfsMount[];
  /** Files berth owns, bind-mounted onto /etc/hosts, /etc/hostname, /etc/resolv.conf. */
  hostsFiles?: { hosts?: string; hostname?: string; resolvConf?: string };
  networkMode?: 'none' | 'host' | 'private';
  /** PidMode, UTSMode and IpcMode as start resolved them (namespaces.ts); all the container's own when absent. */
  namespaces?: NamespacePlan;
  noNewPrivileges?: boolean;
  /** 'unconfined', a custom profile (dockerd's format), or absent for berth's own; none when privileged. */
  seccomp?: 'unconfined' | SeccompProfile;
  /** The init binary on the host; /usr/bin/catatonit when absent. */
  initPath?: string;
  cgroupsPath: string;
  stopSignal?: string;
  /** The host's RLIMIT_NOFILE hard limit; read from /proc/self/limits when absent. */
  nofileHardLimit?: number;
}

// ---------------------------------------------------------------- constants

/** Where the init binary appears in the container: on the /dev tmpfs, so no mount point is created in the image's rootfs. */
export const CONTAINER_INIT_PATH = '/dev/init';
const DEFAULT_INIT_PATH = '/usr/bin/catatonit';
export const DEFAULT_SHM_SIZE = 64 * 1024 * 1024;
const NOFILE_CEILING = 1048576;

/** Device nodes a container may use beyond mknod: null, zero, full, random, urandom, tty, pts, ptmx, tun. */
const ALLOWED_DEVICES: readonly [type: 'c', major: number, minor: number | undefined][] = [
  ['c', 1, 3],
  ['c', 1, 5],
  ['c', 1, 7],
  ['c', 1, 8],
  ['c', 1, 9],
  ['c', 5, 0],
  ['c', 136, undefined],
  ['c', 5, 2],
  ['c', 10, 200],
];

// ------------------------------------------------------------------ mounts

function defaultMounts(privileged: boolean): OciMount[] {
  const ro = privileged ? [] : ['ro'];
  return [
    { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
    {
      destination: '/dev',
      type: 'tmpfs',
      source: 'tmpfs',
      options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'],
    },
    {
      destination: '/dev/pts',
      type: 'devpts',
      source: 'devpts',
      options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', 'gid=5'],
    },
    { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', ...ro] },
    {
      destination: '/sys/fs/cgroup',
      type: 'cgroup',
      source: 'cgroup',
      options: ['nosuid', 'noexec', 'nodev', 'relatime', ...ro],
    },
    { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
  ];
}

function bindMount(
  source: string,
  destination: string,
  readonly: boolean | 'recursive',
  propagation: Propagation = 'rprivate',
  nonRecursive = false,
): OciMount {
  const mode = readonly === 'recursive' ? 'rro' : readonly ? 'ro' : 'rw';
  return { destination, type: 'bind', source, options: [nonRecursive ? 'bind' : 'rbind', propagation, mode] };
}

/** The files berth writes for the container; read-only along with a read-only rootfs, as in dockerd. */
function hostsFileMounts(files: SpecInput['hostsFiles'], readonly: boolean): OciMount[] {
  const pairs: [string | undefined, string][] = [
    [files?.hosts, '/etc/hosts'],
    [files?.hostname, '/etc/hostname'],
    [files?.resolvConf, '/etc/resolv.conf'],
  ];
  return pairs
    .filter((p): p is [string, string] => p[0] !== undefined)
    .map(([src, dst]) => bindMount(src, dst, readonly));
}

function initMount(initPath: string): OciMount {
  return {
    destination: CONTAINER_INIT_PATH,
    type: 'bind',
    source: initPath,
    options: ['bind', 'ro', 'nosuid', 'nodev'],
  };
}

const depth = (p: string) => p.split('/').filter(Boolean).length;
const cleanDestination = (p: string) => `/${p.split('/').filter(Boolean).join('/')}`;

/**
 * Later mounts replace earlier ones at the same destination (a user's bind on
 * /dev/shm or /etc/hosts wins); then parents sort before children so /dev is
 * mounted before /dev/init (stable for equal depths).
 */
function orderMounts(mounts: OciMount[]): OciMount[] {
  const byDestination = new Map<string, OciMount>();
  for (const m of mounts) {
    const key = cleanDestination(m.destination);
    byDestination.delete(key);
    byDestination.set(key, { ...m, destination: key });
  }
  return [...byDestination.values()].sort((a, b) => depth(a.destination) - depth(b.destination));
}

/** A shared bind needs a shared rootfs, a slave bind a slave one (dockerd's rule). */
function rootfsPropagation(binds: BindMount[]): string | undefined {
  const props = binds.map((b) => b.propagation ?? 'rprivate');
  if (props.some((p) => p === 'shared' || p === 'rshared')) return 'shared';
  if (props.some((p) => p === 'slave' || p === 'rslave')) return 'rslave';
  return undefined;
}

// ---------------------------------------------------------------- resources

function deviceRules(privileged: boolean, extra: readonly string[]): OciDeviceRule[] {
  if (privileged) return [{ allow: true, access: 'rwm' }];
  return [
    { allow: false, access: 'rwm' },
    // mknod of any node is allowed; using one needs a rule below.
    { allow: true, type: 'c', access: 'm' },
    { allow: true, type: 'b', access: 'm' },
    ...ALLOWED_DEVICES.map(
      ([type, major, minor]): OciDeviceRule =>
        minor === undefined
          ? { allow: true, type, major, access: 'rwm' }
          : { allow: true, type, major, minor, access: 'rwm' },
    ),
    ...extra.map(deviceCgroupRule),
  ];
}

const DEVICE_CGROUP_RULE = /^([acb]) ([0-9]+|\*):([0-9]+|\*) ([rwm]{1,3})$/;

/**
 * One of DeviceCgroupRules (`c 7:128 rwm`, `a *:* rwm`), as the devices
 * cgroup reads it; refused in dockerd's words when it is not one.
 */
export function deviceCgroupRule(rule: string): OciDeviceRule {
  const m = DEVICE_CGROUP_RULE.exec(rule);
  if (!m) throw invalidParameter(`invalid device cgroup format '${rule}'`);
  const [, type, major, minor, access] = m as unknown as [string, 'a' | 'b' | 'c', string, string, string];
  return {
    allow: true,
    type,
    ...(major === '*' ? {} : { major: Number(major) }),
    ...(minor === '*' ? {} : { minor: Number(minor) }),
    access,
  };
}

function resources(input: SpecInput, devices: ReturnType<typeof deviceOf>[]): OciResources {
  const rules = deviceRules(input.Privileged ?? false, input.DeviceCgroupRules ?? []);
  return { devices: [...rules, ...devices.map((d) => d.rule)], ...specLimits(input) };
}

// -------------------------------------------------------------- host facts

/** The RLIMIT_NOFILE hard limit of this process; the ceiling when unlimited. */
export function hostNofileHardLimit(): number {
  const hard = hostHardLimit('nofile');
  return Number.isFinite(hard) ? hard : NOFILE_CEILING;
}

// --------------------------------------------------------------------- spec

/** The container's own namespaces, less those it shares with the host, plus those it joins. */
function namespaces(networkMode: SpecInput['networkMode'], plan: NamespacePlan = {}): OciLinux['namespaces'] {
  const types: OciNamespaceType[] = ['mount', 'network', 'uts', 'pid', 'ipc'];
  const out: OciLinux['namespaces'] = [];
  for (const type of types) {
    const source =
      type === 'network' ? (networkMode === 'host' ? 'host' : plan.network) : plan[type as keyof NamespacePlan];
    if (source === 'host') continue;
    out.push(source && typeof source === 'object' && 'path' in source ? { type, path: source.path } : { type });
  }
  return out;
}

/**
 * Unprivileged ports and ping are harmless inside a network namespace the
 * container made (dockerd sets both there only): the host's and one joined
 * (NetworkMode container:<id>) are not its own, and runc refuses them in the
 * host's; HostConfig.Sysctls over them (checked at create: sysctls.ts).
 */
function sysctls(input: SpecInput): Record<string, string> | undefined {
  const defaults: Record<string, string> =
    input.networkMode === 'host' || input.namespaces?.network
      ? {}
      : { 'net.ipv4.ip_unprivileged_port_start': '0', 'net.ipv4.ping_group_range': '0 2147483647' };
  // No OCI field holds the NIS domain; the sysctl is setdomainname(2) in the container's UTS namespace.
  const domain: Record<string, string> = input.domainname ? { 'kernel.domainname': input.domainname } : {};
  const out = { ...defaults, ...domain, ...(input.Sysctls ?? {}) };
  return Object.keys(out).length ? out : undefined;
}

function processSpec(input: SpecInput): OciProcess {
  if (input.args.length === 0) throw invalidParameter('No command specified');
  const caps = resolveCapabilities(input.CapAdd ?? [], input.CapDrop ?? [], input.Privileged ?? false);
  const nofile = Math.min(NOFILE_CEILING, input.nofileHardLimit ?? hostNofileHardLimit());
  const user = input.user ?? { uid: 0, gid: 0 };
  return {
    terminal: input.tty ?? false,
    user: { uid: user.uid, gid: user.gid, additionalGids: user.additionalGids ?? [] },
    args: input.Init ? [CONTAINER_INIT_PATH, '--', ...input.args] : [...input.args],
    env: [...(input.env ?? [])],
    cwd: input.cwd || '/',
    capabilities: { bounding: caps, effective: caps, permitted: caps },
    rlimits: rlimits([{ type: 'RLIMIT_NOFILE', hard: nofile, soft: nofile }], input.Ulimits ?? []),
    noNewPrivileges: input.noNewPrivileges ?? false,
    // Always set, as dockerd does: 0 undoes whatever berthd itself runs with.
    oomScoreAdj: input.OomScoreAdj ?? 0,
    ...(input.tty && input.consoleSize ? { consoleSize: input.consoleSize } : {}),
  };
}

/** dockerd's additions to a process's environment, where the image and user set none: PATH, HOSTNAME, TERM with a terminal, HOME. */
export function withDefaultEnv(env: string[], o: { hostname: string; tty: boolean; home?: string }): string[] {
  const out = [...env];
  const has = (name: string) => out.some((e) => e.startsWith(`${name}=`));
  if (!has('PATH')) out.unshift('PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
  if (!has('HOSTNAME')) out.push(`HOSTNAME=${o.hostname}`);
  if (o.tty && !has('TERM')) out.push('TERM=xterm');
  if (o.home !== undefined && !has('HOME')) out.push(`HOME=${o.home}`);
  return out;
}

/** Docker's ConsoleSize ([height, width]) when both are set. */
export function consoleSize(size: unknown): { height: number; width: number } | undefined {
  if (!Array.isArray(size) || size.length !== 2) return undefined;
  const [height, width] = size.map(Number) as [number, number];
  return Number.isInteger(height) && Number.isInteger(width) && height > 0 && width > 0 ? { height, width } : undefined;
}

/** /dev/shm as IpcMode has it: a tmpfs of its own, the host's or a donor's (a bind), or none. */
function shmMounts(input: SpecInput): OciMount[] {
  const shm = input.namespaces?.shm;
  if (shm === 'none') return [];
  if (shm) return [bindMount(shm.bind, '/dev/shm', false)];
  const size = input.ShmSize || DEFAULT_SHM_SIZE;
  const options = ['nosuid', 'noexec', 'nodev', 'mode=1777', `size=${size}`];
  return [{ destination: '/dev/shm', type: 'tmpfs', source: 'shm', options }];
}

function mounts(input: SpecInput): OciMount[] {
  const readonly = input.ReadonlyRootfs ?? false;
  return orderMounts([
    ...defaultMounts(input.Privileged ?? false),
    ...shmMounts(input),
    ...hostsFileMounts(input.hostsFiles, readonly),
    ...(input.Init ? [initMount(input.initPath ?? DEFAULT_INIT_PATH)] : []),
    ...(input.mounts ?? []).map((b) =>
      bindMount(
        b.source,
        b.destination,
        b.readonly && b.recursive ? 'recursive' : (b.readonly ?? false),
        b.propagation,
        b.nonRecursive,
      ),
    ),
    ...(input.tmpfs ?? []).map((t) => ({
      destination: t.destination,
      type: 'tmpfs',
      source: 'tmpfs',
      options: t.options,
    })),
  ]);
}

export function buildSpec(input: SpecInput): OciSpec {
  const privileged = input.Privileged ?? false;
  const devices = (input.Devices ?? []).map(deviceOf);
  const paths = protectedPaths(input);
  const linux: OciLinux = {
    namespaces: namespaces(input.networkMode, input.namespaces),
    ...(devices.length ? { devices: devices.map((d) => d.node) } : {}),
    resources: resources(input, devices),
    cgroupsPath: input.cgroupsPath,
    maskedPaths: paths.MaskedPaths ?? [],
    readonlyPaths: paths.ReadonlyPaths ?? [],
  };
  const sysctl = sysctls(input);
  if (sysctl) linux.sysctl = sysctl;
  const propagation = rootfsPropagation(input.mounts ?? []);
  if (propagation) linux.rootfsPropagation = propagation;
  if (privateCgroupns(input.CgroupnsMode)) linux.namespaces.push({ type: 'cgroup' });
  const process = processSpec(input);
  if (!privileged && input.seccomp !== 'unconfined') {
    const caps = process.capabilities.bounding;
    linux.seccomp = input.seccomp ? profileToOci(input.seccomp, caps) : defaultSeccomp(caps);
  }
  return {
    ociVersion: '1.0.2',
    process,
    root: { path: input.rootfsPath, readonly: input.ReadonlyRootfs ?? false },
    // Only a UTS namespace of the container's own can be given a name.
    hostname: input.namespaces?.uts === 'host' ? '' : (input.hostname ?? ''),
    mounts: mounts(input),
    // HostConfig.Annotations over berth's own, as containerd's WithAnnotations merges them for dockerd.
    annotations: {
      ...(input.stopSignal ? { 'org.opencontainers.image.stopSignal': input.stopSignal } : {}),
      ...(input.Annotations ?? {}),
    },
    linux,
  };
}
