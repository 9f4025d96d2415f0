// Seccomp: which system calls a container's processes may make.
//
// berth's built-in profile is a short deny-list, not dockerd's ~350-name
// allow-list: it closes the kernel surfaces that a container gains nothing
// from and that have a record of escapes and privilege escalations (new user
// and other namespaces, mounts, keyrings, bpf, io_uring, userfaultfd, module
// loading, kexec, the clock, ...), each reopened when the container holds the
// capability that makes it legitimate, as dockerd's profile does. runc
// compiles a filter of ~60 names in ~2 ms against ~15 ms for an allow-list of
// 300 (that cost is on every `docker run`), and every system call the
// container makes runs through a shorter filter. The trade-off: a system call
// that a future kernel adds is allowed until this list names it.
//
// A custom profile (`--security-opt seccomp=<file>`: the CLI sends the file's
// JSON) is dockerd's format, turned into the OCI form here: `includes` and
// `excludes` by capability and architecture are decided now; `unconfined`
// and `--privileged` run without a filter.
import { arch } from 'node:process';
import { invalidParameter } from '../../errors.js';

/** The OCI runtime spec's `linux.seccomp`. */
export interface OciSeccomp {
  defaultAction: string;
  defaultErrnoRet?: number;
  architectures: string[];
  flags?: string[];
  syscalls: OciSyscallRule[];
}

export interface OciSyscallArg {
  index: number;
  value: number;
  valueTwo?: number;
  op: string;
}

export interface OciSyscallRule {
  names: string[];
  action: string;
  errnoRet?: number;
  args?: OciSyscallArg[];
}

/** dockerd's profile format (profiles/seccomp/seccomp.go), as far as berth reads it. */
export interface SeccompProfile {
  defaultAction: string;
  defaultErrnoRet?: number;
  architectures?: string[];
  archMap?: { architecture: string; subArchitectures?: string[] }[];
  flags?: string[];
  syscalls?: ProfileRule[];
}

interface ProfileRule {
  names?: string[];
  /** The older single-name form. */
  name?: string;
  action: string;
  errnoRet?: number;
  args?: OciSyscallArg[] | null;
  includes?: { caps?: string[]; arches?: string[] };
  excludes?: { caps?: string[]; arches?: string[] };
}

const EPERM = 1;
const ENOSYS = 38;
const deny = 'SCMP_ACT_ERRNO';

/** The namespace flags of clone(2) (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET). */
const CLONE_NAMESPACE_FLAGS = [0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000];
const AF_VSOCK = 40;

/** Denied unless the container holds the capability (the kernel checks most of these again). */
const BY_CAPABILITY: Record<string, string[]> = {
  CAP_SYS_ADMIN: [
    'mount', 'umount', 'umount2', 'pivot_root', 'unshare', 'setns',
    'fsopen', 'fsconfig', 'fsmount', 'move_mount', 'open_tree', 'fspick', 'mount_setattr',
    'quotactl', 'quotactl_fd', 'lookup_dcookie',
  ],
  CAP_DAC_READ_SEARCH: ['open_by_handle_at'],
  CAP_SYS_MODULE: ['init_module', 'finit_module', 'delete_module'],
  CAP_SYS_BOOT: ['reboot', 'kexec_load', 'kexec_file_load'],
  CAP_SYS_TIME: ['settimeofday', 'stime', 'clock_settime', 'clock_settime64', 'clock_adjtime', 'clock_adjtime64'],
  CAP_SYS_PACCT: ['acct'],
  CAP_SYS_RAWIO: ['iopl', 'ioperm'],
  CAP_SYS_NICE: ['mbind', 'set_mempolicy', 'set_mempolicy_home_node', 'move_pages'],
  CAP_BPF: ['bpf'],
  CAP_PERFMON: ['perf_event_open'],
  CAP_SYSLOG: ['syslog'],
};

/** Denied to every container: no capability makes them needed. */
const ALWAYS_DENIED = [
  'add_key', 'keyctl', 'request_key', // the kernel keyrings are not namespaced
  'userfaultfd', 'io_uring_setup', 'io_uring_enter', 'io_uring_register',
  'uselib', 'vm86', 'vm86old', 'ustat', 'sysfs', '_sysctl',
  'create_module', 'get_kernel_syms', 'query_module', 'nfsservctl', 'swapon', 'swapoff',
];

/** The seccomp architectures of this machine's processes, as dockerd's archMap gives them. */
function hostArchitectures(): { goArch: string; scmp: string[] } {
  switch (arch) {
    case 'x64':
      return { goArch: 'amd64', scmp: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'] };
    case 'arm64':
      return { goArch: 'arm64', scmp: ['SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM'] };
    case 's390x':
      return { goArch: 's390x', scmp: ['SCMP_ARCH_S390X', 'SCMP_ARCH_S390'] };
    case 'ppc64':
      return { goArch: 'ppc64le', scmp: ['SCMP_ARCH_PPC64LE'] };
    default:
      return { goArch: arch, scmp: [] };
  }
}

/** berth's built-in profile for a container holding `caps`. */
export function defaultSeccomp(caps: readonly string[]): OciSeccomp {
  const has = (c: string) => caps.includes(c);
  const rules: OciSyscallRule[] = [{ names: [...ALWAYS_DENIED], action: deny, errnoRet: EPERM }];
  const gated = Object.entries(BY_CAPABILITY).flatMap(([cap, names]) => (has(cap) ? [] : names));
  // bpf and perf_event_open were CAP_SYS_ADMIN's before CAP_BPF and CAP_PERFMON existed.
  const denied = has('CAP_SYS_ADMIN') ? gated.filter((n) => n !== 'bpf' && n !== 'perf_event_open') : gated;
  if (denied.length) rules.push({ names: denied, action: deny, errnoRet: EPERM });
  if (!has('CAP_SYS_ADMIN')) {
    // No new namespaces: a new user namespace hands its creator every capability inside it.
    for (const flag of CLONE_NAMESPACE_FLAGS) {
      rules.push({ names: ['clone'], action: deny, errnoRet: EPERM, args: [{ index: 0, value: flag, valueTwo: flag, op: 'SCMP_CMP_MASKED_EQ' }] });
    }
    // clone3 passes its flags in memory, where a filter cannot look: ENOSYS makes libc fall back to clone.
    rules.push({ names: ['clone3'], action: deny, errnoRet: ENOSYS });
  }
  // Sockets to the hypervisor.
  rules.push({ names: ['socket'], action: deny, errnoRet: EPERM, args: [{ index: 0, value: AF_VSOCK, op: 'SCMP_CMP_EQ' }] });
  return { defaultAction: 'SCMP_ACT_ALLOW', architectures: hostArchitectures().scmp, syscalls: rules };
}

/** A custom profile in dockerd's format, for a container holding `caps`. */
export function profileToOci(profile: SeccompProfile, caps: readonly string[]): OciSeccomp {
  const host = hostArchitectures();
  const architectures = profile.archMap?.length
    ? profile.archMap.filter((a) => host.scmp.includes(a.architecture)).flatMap((a) => [a.architecture, ...(a.subArchitectures ?? [])])
    : (profile.architectures ?? []);
  const applies = (r: ProfileRule) =>
    (r.includes?.caps ?? []).every((c) => caps.includes(c)) &&
    (r.includes?.arches?.length ? r.includes.arches.includes(host.goArch) : true) &&
    !(r.excludes?.caps ?? []).some((c) => caps.includes(c)) &&
    !(r.excludes?.arches ?? []).includes(host.goArch);
  const syscalls = (profile.syscalls ?? []).filter(applies).map((r) => ({
    names: r.names?.length ? r.names : r.name ? [r.name] : [],
    action: r.action,
    ...(r.errnoRet !== undefined ? { errnoRet: r.errnoRet } : {}),
    ...(r.args?.length ? { args: r.args } : {}),
  }));
  return {
    defaultAction: profile.defaultAction,
    ...(profile.defaultErrnoRet !== undefined ? { defaultErrnoRet: profile.defaultErrnoRet } : {}),
    architectures: [...new Set(architectures)],
    ...(profile.flags?.length ? { flags: profile.flags } : {}),
    syscalls: syscalls.filter((s) => s.names.length > 0),
  };
}

/**
 * What `SecurityOpt` asks for: 'unconfined', a custom profile, or undefined
 * for the built-in one. Refuses what dockerd refuses, at create time.
 */
export function seccompOption(securityOpt: readonly string[]): 'unconfined' | SeccompProfile | undefined {
  let chosen: 'unconfined' | SeccompProfile | undefined;
  for (const o of securityOpt) {
    const m = /^seccomp[:=]([\s\S]*)$/.exec(o);
    if (!m) continue;
    const value = m[1]!.trim();
    if (value === 'unconfined') chosen = 'unconfined';
    else if (value === 'builtin' || value === 'default') chosen = undefined;
    else chosen = parseProfile(value);
  }
  return chosen;
}

const ACTION = /^SCMP_ACT_(KILL|KILL_PROCESS|KILL_THREAD|TRAP|ERRNO|TRACE|ALLOW|LOG|NOTIFY)$/;

function parseProfile(text: string): SeccompProfile {
  let p: SeccompProfile;
  try {
    p = JSON.parse(text) as SeccompProfile;
  } catch (e) {
    throw invalidParameter(`Decoding seccomp profile failed: ${(e as Error).message}`);
  }
  if (typeof p !== 'object' || p === null || Array.isArray(p)) throw invalidParameter('Decoding seccomp profile failed: not a JSON object');
  if (typeof p.defaultAction !== 'string' || !ACTION.test(p.defaultAction)) {
    throw invalidParameter(`Decoding seccomp profile failed: invalid defaultAction ${JSON.stringify(p.defaultAction)}`);
  }
  if (p.architectures?.length && p.archMap?.length) {
    throw invalidParameter("'architectures' and 'archMap' were specified in the seccomp profile, use either 'architectures' or 'archMap'");
  }
  for (const r of p.syscalls ?? []) {
    if (typeof r !== 'object' || r === null || typeof r.action !== 'string' || !ACTION.test(r.action)) {
      throw invalidParameter(`Decoding seccomp profile failed: invalid action in ${JSON.stringify(r)}`);
    }
    if (r.name && r.names?.length) throw invalidParameter("use either 'name' or 'names'");
  }
  return p;
}
