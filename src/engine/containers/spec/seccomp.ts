// Seccomp: which system calls a container's processes may make.
//
// berth's built-in profile is an allow-list with dockerd's semantics (moby's
// profiles/seccomp): it fails closed. A system call it does not name is
// refused with EPERM; one numbered above every name the filter knows (a
// system call newer than runc's libseccomp, such as one a future kernel adds)
// gets ENOSYS from the stub runc puts in front of the filter, so that libc
// falls back to an older call. Groups of calls are allowed only to a container
// holding the capability that makes them legitimate, and `clone`,
// `personality` and `socket` are allowed only with harmless arguments.
//
// A custom profile (`--security-opt seccomp=<file>`: the CLI sends the file's
// JSON) is dockerd's format, turned into the OCI form here: `includes` and
// `excludes` by capability and architecture are decided now; `unconfined`
// and `--privileged` run without a filter.
import { arch } from 'node:process';
import { invalidParameter } from '../../../errors.js';
import { x32Abi } from '../../os/kernel.js';

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
const ALLOW = 'SCMP_ACT_ALLOW';

/** Whitespace-separated names, as the lists below are written. */
const words = (s: string): string[] => s.trim().split(/\s+/);

/**
 * Allowed to every container: dockerd's list, by kind (files, extended
 * attributes, events, processes, credentials, scheduling, memory, signals,
 * time, IPC, sockets). ptrace and process_vm_* are safe since Linux 4.8 (a
 * tracer cannot take a tracee around seccomp; the kernel's ptrace checks
 * apply). Names this machine's libseccomp does not know are skipped by runc:
 * those calls are refused.
 */
const ALLOWED = words(`
  access chdir chmod chown chown32 close close_range copy_file_range creat dup dup2 dup3 pipe pipe2
  faccessat faccessat2 fadvise64 fadvise64_64 fallocate fchdir fchmod fchmodat fchmodat2 fchown
  fchown32 fchownat fcntl fcntl64 fdatasync flock fstat fstat64 fstatat64 fstatfs fstatfs64 fsync
  ftruncate ftruncate64 futimesat getcwd getdents getdents64 lchown lchown32 link linkat _llseek
  lseek lstat lstat64 mkdir mkdirat mknod mknodat name_to_handle_at newfstatat open openat openat2
  pread64 preadv preadv2 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv rename
  renameat renameat2 rmdir sendfile sendfile64 splice stat stat64 statfs statfs64 statx symlink
  symlinkat sync sync_file_range syncfs tee truncate truncate64 umask unlink unlinkat utime
  utimensat utimensat_time64 utimes vmsplice write writev listmount statmount

  fgetxattr flistxattr fremovexattr fsetxattr getxattr getxattrat lgetxattr listxattr listxattrat
  llistxattr lremovexattr lsetxattr removexattr removexattrat setxattr setxattrat

  epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait
  epoll_wait_old eventfd eventfd2 fanotify_mark inotify_add_watch inotify_init inotify_init1
  inotify_rm_watch poll ppoll ppoll_time64 pselect6 pselect6_time64 select _newselect signalfd
  signalfd4 timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime timerfd_settime64
  io_cancel io_destroy io_getevents io_pgetevents io_pgetevents_time64 io_setup io_submit

  execve execveat exit exit_group fork vfork wait4 waitid waitpid kill tgkill tkill pidfd_open
  pidfd_send_signal process_mrelease restart_syscall set_tid_address get_robust_list
  set_robust_list rseq get_thread_area set_thread_area prctl seccomp capget capset uname sysinfo
  times getrusage getrlimit setrlimit ugetrlimit prlimit64 getpriority setpriority ioprio_get
  ioprio_set getcpu getpid getppid gettid getpgid getpgrp setpgid getsid setsid
  landlock_add_rule landlock_create_ruleset landlock_restrict_self

  getegid getegid32 geteuid geteuid32 getgid getgid32 getgroups getgroups32 getresgid getresgid32
  getresuid getresuid32 getuid getuid32 setfsgid setfsgid32 setfsuid setfsuid32 setgid setgid32
  setgroups setgroups32 setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid
  setreuid32 setuid setuid32

  sched_getaffinity sched_getattr sched_getparam sched_get_priority_max sched_get_priority_min
  sched_getscheduler sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity
  sched_setattr sched_setparam sched_setscheduler sched_yield

  brk cachestat madvise map_shadow_stack membarrier memfd_create memfd_secret mincore mlock mlock2
  mlockall mmap mmap2 mprotect mremap mseal msync munlock munlockall munmap pkey_alloc pkey_free
  pkey_mprotect remap_file_pages

  futex futex_requeue futex_time64 futex_wait futex_waitv futex_wake rt_sigaction rt_sigpending
  rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64
  rt_tgsigqueueinfo sigaltstack sigprocmask sigreturn pause alarm

  adjtimex clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime
  clock_gettime64 clock_nanosleep clock_nanosleep_time64 getitimer setitimer gettimeofday
  nanosleep time timer_create timer_delete timer_getoverrun timer_gettime timer_gettime64
  timer_settime timer_settime64

  ipc msgctl msgget msgrcv msgsnd semctl semget semop semtimedop semtimedop_time64 shmat shmctl
  shmdt shmget mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedreceive_time64
  mq_timedsend mq_timedsend_time64 mq_unlink

  accept accept4 bind connect getpeername getsockname getsockopt listen recv recvfrom recvmmsg
  recvmmsg_time64 recvmsg send sendmmsg sendmsg sendto setsockopt shutdown socketcall socketpair

  getrandom ioctl riscv_hwprobe uretprobe
  ptrace process_vm_readv process_vm_writev
`);

/** Allowed only to a container holding the capability, as in dockerd. */
const BY_CAPABILITY: Record<string, string[]> = {
  CAP_SYS_ADMIN: words(`
    clone clone3 unshare setns mount umount umount2 mount_setattr move_mount open_tree fsopen
    fsconfig fsmount fspick quotactl quotactl_fd fanotify_init lookup_dcookie sethostname
    setdomainname syslog bpf perf_event_open lsm_get_self_attr lsm_list_modules lsm_set_self_attr
  `),
  CAP_DAC_READ_SEARCH: ['open_by_handle_at'],
  CAP_SYS_BOOT: ['reboot'],
  CAP_SYS_CHROOT: ['chroot'],
  CAP_SYS_MODULE: ['init_module', 'finit_module', 'delete_module'],
  CAP_SYS_PACCT: ['acct'],
  CAP_SYS_PTRACE: ['kcmp', 'pidfd_getfd', 'process_madvise'],
  CAP_SYS_RAWIO: ['iopl', 'ioperm'],
  CAP_SYS_TIME: ['settimeofday', 'stime', 'clock_settime', 'clock_settime64'],
  CAP_SYS_TTY_CONFIG: ['vhangup'],
  CAP_SYS_NICE: ['get_mempolicy', 'mbind', 'set_mempolicy', 'set_mempolicy_home_node'],
  CAP_SYSLOG: ['syslog'],
  CAP_BPF: ['bpf'],
  CAP_PERFMON: ['perf_event_open'],
};

/** The calls only this machine's architecture has (dockerd's `includes.arches`), by Node's name for it. */
const BY_ARCHITECTURE: Record<string, string[]> = {
  x64: ['arch_prctl', 'modify_ldt'],
  arm64: words('arm_fadvise64_64 arm_sync_file_range sync_file_range2 breakpoint cacheflush set_tls'),
  ppc64: ['sync_file_range2', 'swapcontext'],
  s390x: ['s390_pci_mmio_read', 's390_pci_mmio_write', 's390_runtime_instr'],
  riscv64: ['riscv_flush_icache'],
};

/** clone(2)'s namespace flags: NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET. */
const CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000;
/**
 * socket(2)'s address families, less AF_ALG (38, the kernel's crypto API) and
 * AF_VSOCK (40, sockets to the hypervisor), as dockerd refuses them: all below
 * AF_ALG, then each known one. dockerd allows "greater than AF_VSOCK", but the
 * kernel reads the family as a 32-bit int while the filter compares the 64-bit
 * register, so AF_VSOCK with any high bit set would pass; exact values close
 * that, and a family that a future kernel adds stays refused until named.
 */
const AF_ALG = 38;
const SOCKET_FAMILIES_ABOVE_ALG = [39, 41, 42, 43, 44, 45]; // AF_NFC, AF_KCM, AF_QIPCRTR, AF_SMC, AF_XDP, AF_MCTP
/** personality(2): PER_LINUX, PER_LINUX32, UNAME26, PER_LINUX32|UNAME26, and the query. */
const PERSONALITIES = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff];

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
    case 'riscv64':
      return { goArch: 'riscv64', scmp: ['SCMP_ARCH_RISCV64'] };
    default:
      return { goArch: arch, scmp: [] };
  }
}

let cachedBuiltinArchitectures: string[] | undefined;

/**
 * The architectures the built-in filter names: the host's, less x32 when this
 * kernel does not run x32 programs (most kernels build x32 out or disable it
 * at boot). The filter refuses a call from an architecture it does not name
 * (runc leaves libseccomp's bad-architecture action, which kills the thread),
 * and naming x32 as well doubles what runc spends compiling the filter.
 */
export function builtinArchitectures(): string[] {
  cachedBuiltinArchitectures ??= hostArchitectures().scmp.filter((a) => a !== 'SCMP_ARCH_X32' || x32Abi());
  return cachedBuiltinArchitectures;
}

/** berth's built-in profile for a container holding `caps`, for the filter's `architectures`. */
export function defaultSeccomp(
  caps: readonly string[],
  architectures: readonly string[] = builtinArchitectures(),
  machine: string = arch,
): OciSeccomp {
  const has = (c: string) => caps.includes(c);
  const allowed = new Set([...ALLOWED, ...(BY_ARCHITECTURE[machine] ?? [])]);
  for (const [cap, names] of Object.entries(BY_CAPABILITY)) if (has(cap)) for (const n of names) allowed.add(n);
  const rules: OciSyscallRule[] = [{ names: [...allowed].sort(), action: ALLOW }];
  if (!has('CAP_SYS_ADMIN')) {
    // No new namespaces: a new user namespace hands its creator every capability inside it.
    // s390 passes clone's flags second.
    const flags = machine === 's390x' ? 1 : 0;
    rules.push({
      names: ['clone'],
      action: ALLOW,
      args: [{ index: flags, value: CLONE_NAMESPACES, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' }],
    });
    // clone3 passes its flags in memory, where a filter cannot look: ENOSYS makes libc fall back to clone.
    rules.push({ names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS });
  }
  rules.push(
    { names: ['socket'], action: ALLOW, args: [{ index: 0, value: AF_ALG, op: 'SCMP_CMP_LT' }] },
    ...SOCKET_FAMILIES_ABOVE_ALG.map((value) => ({
      names: ['socket'],
      action: ALLOW,
      args: [{ index: 0, value, op: 'SCMP_CMP_EQ' }],
    })),
    ...PERSONALITIES.map((value) => ({
      names: ['personality'],
      action: ALLOW,
      args: [{ index: 0, value, op: 'SCMP_CMP_EQ' }],
    })),
  );
  return {
    defaultAction: 'SCMP_ACT_ERRNO',
    defaultErrnoRet: EPERM,
    architectures: [...architectures],
    syscalls: rules,
  };
}

/** A custom profile in dockerd's format, for a container holding `caps`. */
export function profileToOci(profile: SeccompProfile, caps: readonly string[]): OciSeccomp {
  const host = hostArchitectures();
  const architectures = profile.archMap?.length
    ? profile.archMap
        .filter((a) => host.scmp.includes(a.architecture))
        .flatMap((a) => [a.architecture, ...(a.subArchitectures ?? [])])
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
  if (typeof p !== 'object' || p === null || Array.isArray(p))
    throw invalidParameter('Decoding seccomp profile failed: not a JSON object');
  if (typeof p.defaultAction !== 'string' || !ACTION.test(p.defaultAction)) {
    throw invalidParameter(`Decoding seccomp profile failed: invalid defaultAction ${JSON.stringify(p.defaultAction)}`);
  }
  if (p.architectures?.length && p.archMap?.length) {
    throw invalidParameter(
      "'architectures' and 'archMap' were specified in the seccomp profile, use either 'architectures' or 'archMap'",
    );
  }
  for (const r of p.syscalls ?? []) {
    if (typeof r !== 'object' || r === null || typeof r.action !== 'string' || !ACTION.test(r.action)) {
      throw invalidParameter(`Decoding seccomp profile failed: invalid action in ${JSON.stringify(r)}`);
    }
    if (r.name && r.names?.length) throw invalidParameter("use either 'name' or 'names'");
  }
  return p;
}
