import { describe, expect, it } from 'vitest';
import { DEFAULT_CAPABILITIES } from '../../src/engine/containers/spec/capabilities.js';
import { buildSpec, type SpecInput } from '../../src/engine/containers/spec/spec.js';
import {
  builtinArchitectures,
  defaultSeccomp,
  profileToOci,
  seccompOption,
  type OciSeccomp,
  type OciSyscallArg,
} from '../../src/engine/containers/spec/seccomp.js';
import { native } from '../../src/engine/os/native.js';
import { isEngineError } from '../../src/errors.js';

const base: SpecInput = {
  args: ['true'],
  rootfsPath: '/r',
  cgroupsPath: '/berth/x',
  networkMode: 'private',
  nofileHardLimit: 1024,
};
const X86 = ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86'];

/**
 * What a filter built from `s` does with a call, as libseccomp reads the OCI
 * rules: a rule applies when all its conditions hold (64-bit compares); none
 * applying, the default. 'allow', or the errno returned.
 */
function decide(s: OciSeccomp, name: string, ...args: bigint[]): 'allow' | number {
  const holds = (a: OciSyscallArg) => {
    const v = args[a.index] ?? 0n;
    const value = BigInt(a.value);
    switch (a.op) {
      case 'SCMP_CMP_EQ':
        return v === value;
      case 'SCMP_CMP_LT':
        return v < value;
      case 'SCMP_CMP_GT':
        return v > value;
      case 'SCMP_CMP_MASKED_EQ':
        return (v & value) === BigInt(a.valueTwo ?? 0);
      default:
        throw new Error(`no comparison ${a.op} in the built-in profile`);
    }
  };
  const rule = s.syscalls.find((r) => r.names.includes(name) && (r.args ?? []).every(holds));
  if (!rule) return s.defaultErrnoRet!;
  return rule.action === 'SCMP_ACT_ALLOW' ? 'allow' : rule.errnoRet!;
}
const EPERM = 1;
const ENOSYS = 38;
const CLONE_NEWUSER = 0x10000000n;
const SIGCHLD = 17n;

describe('the built-in seccomp profile', () => {
  const s = defaultSeccomp(DEFAULT_CAPABILITIES, X86, 'x64');

  it('is applied by default, and not with --privileged or seccomp=unconfined', () => {
    expect(buildSpec(base).linux.seccomp).toMatchObject({ defaultAction: 'SCMP_ACT_ERRNO', defaultErrnoRet: EPERM });
    expect(buildSpec({ ...base, Privileged: true }).linux.seccomp).toBeUndefined();
    expect(buildSpec({ ...base, seccomp: 'unconfined' }).linux.seccomp).toBeUndefined();
  });

  it('fails closed: what it does not name is refused with EPERM', () => {
    expect(s).toMatchObject({ defaultAction: 'SCMP_ACT_ERRNO', defaultErrnoRet: EPERM, architectures: X86 });
    for (const n of [
      'read',
      'openat',
      'pipe2',
      'execve',
      'futex',
      'epoll_pwait',
      'io_setup',
      'rseq',
      'landlock_create_ruleset',
      'arch_prctl',
      'ptrace',
      'chroot',
    ]) {
      expect(decide(s, n), n).toBe('allow');
    }
    const closed = [
      'keyctl',
      'add_key',
      'request_key',
      'bpf',
      'io_uring_setup',
      'io_uring_enter',
      'userfaultfd',
      'kexec_load',
      'kexec_file_load',
      'unshare',
      'setns',
      'mount',
      'umount2',
      'pivot_root',
      'fsopen',
      'open_tree',
      'init_module',
      'reboot',
      'clock_settime',
      'open_by_handle_at',
      'perf_event_open',
      'kcmp',
      'pidfd_getfd',
      'migrate_pages',
      'move_pages',
      'mbind',
      'syslog',
      'acct',
      'iopl',
      'vhangup',
      'swapon',
      'uselib',
      'lookup_dcookie',
      'sethostname',
      'file_getattr',
      'no_such_call',
    ];
    for (const n of closed) expect(decide(s, n), n).toBe(EPERM);
  });

  it('is compact: one rule allows every unconditional name, each name once', () => {
    const plain = s.syscalls.filter((r) => !r.args);
    expect(plain).toEqual([
      { names: expect.any(Array), action: 'SCMP_ACT_ALLOW' },
      { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
    ]);
    expect(new Set(plain[0]!.names).size).toBe(plain[0]!.names.length);
    expect(
      s.syscalls
        .filter((r) => r.args)
        .every((r) => r.names.length === 1 && ['clone', 'socket', 'personality'].includes(r.names[0]!)),
    ).toBe(true);
  });

  it('allows clone only without namespace flags, and answers clone3 ENOSYS so that libc falls back to clone', () => {
    expect(decide(s, 'clone', SIGCHLD)).toBe('allow');
    expect(decide(s, 'clone', 0x3d0f00n)).toBe('allow'); // a thread: CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|*_TID
    for (const flag of [0x00020000n, 0x02000000n, 0x04000000n, 0x08000000n, CLONE_NEWUSER, 0x20000000n, 0x40000000n]) {
      expect(decide(s, 'clone', flag | SIGCHLD), flag.toString(16)).toBe(EPERM);
    }
    expect(decide(s, 'clone3')).toBe(ENOSYS);
    // s390 passes the flags second.
    const s390 = defaultSeccomp(DEFAULT_CAPABILITIES, ['SCMP_ARCH_S390X'], 's390x');
    expect(decide(s390, 'clone', 0n, CLONE_NEWUSER)).toBe(EPERM);
    expect(decide(s390, 'clone', CLONE_NEWUSER, 0n)).toBe('allow');
  });

  it('allows personality and socket only with the values dockerd allows', () => {
    for (const p of [0n, 8n, 0x20000n, 0x20008n, 0xffffffffn]) expect(decide(s, 'personality', p)).toBe('allow');
    expect(decide(s, 'personality', 0x0400000n)).toBe(EPERM); // READ_IMPLIES_EXEC
    for (const family of [1n, 2n, 10n, 16n, 17n, 39n, 41n, 44n, 45n])
      expect(decide(s, 'socket', family), String(family)).toBe('allow');
    const AF_VSOCK = 40n;
    for (const family of [38n, AF_VSOCK, AF_VSOCK | (1n << 32n), 2n | (1n << 32n), 46n])
      expect(decide(s, 'socket', family), family.toString(16)).toBe(EPERM);
  });

  it('gives back what a capability makes legitimate, and nothing else', () => {
    const withCap = (cap: string) => defaultSeccomp([...DEFAULT_CAPABILITIES, cap], X86, 'x64');
    const admin = withCap('CAP_SYS_ADMIN');
    for (const n of [
      'mount',
      'umount2',
      'unshare',
      'setns',
      'fsopen',
      'bpf',
      'perf_event_open',
      'sethostname',
      'clone3',
    ])
      expect(decide(admin, n), n).toBe('allow');
    expect(decide(admin, 'clone', CLONE_NEWUSER | SIGCHLD)).toBe('allow');
    for (const n of ['keyctl', 'kexec_load', 'init_module', 'io_uring_setup']) expect(decide(admin, n), n).toBe(EPERM);
    const groups: [string, string[]][] = [
      ['CAP_SYS_PTRACE', ['kcmp', 'pidfd_getfd', 'process_madvise']],
      ['CAP_SYS_TIME', ['settimeofday', 'clock_settime']],
      ['CAP_SYS_BOOT', ['reboot']],
      ['CAP_SYS_MODULE', ['init_module', 'finit_module', 'delete_module']],
      ['CAP_SYS_NICE', ['mbind', 'set_mempolicy', 'get_mempolicy']],
      ['CAP_SYS_RAWIO', ['iopl', 'ioperm']],
      ['CAP_SYS_PACCT', ['acct']],
      ['CAP_SYS_TTY_CONFIG', ['vhangup']],
      ['CAP_SYSLOG', ['syslog']],
      ['CAP_BPF', ['bpf']],
      ['CAP_PERFMON', ['perf_event_open']],
      ['CAP_DAC_READ_SEARCH', ['open_by_handle_at']],
    ];
    for (const [cap, names] of groups) {
      const g = withCap(cap);
      for (const n of names) expect(decide(g, n), `${cap} ${n}`).toBe('allow');
      expect(decide(g, 'mount'), cap).toBe(EPERM);
      expect(decide(g, 'clone', CLONE_NEWUSER), cap).toBe(EPERM);
    }
    expect(decide(withCap('CAP_SYS_BOOT'), 'kexec_load')).toBe(EPERM); // dockerd gives kexec to no one
    const noChroot = defaultSeccomp(
      DEFAULT_CAPABILITIES.filter((c) => c !== 'CAP_SYS_CHROOT'),
      X86,
      'x64',
    );
    expect(decide(noChroot, 'chroot')).toBe(EPERM);
  });

  it("names this machine's architectures and its own calls", () => {
    const arm = defaultSeccomp(DEFAULT_CAPABILITIES, ['SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM'], 'arm64');
    expect(decide(arm, 'set_tls')).toBe('allow');
    expect(decide(arm, 'arch_prctl')).toBe(EPERM);
    expect(decide(s, 'set_tls')).toBe(EPERM);
    if (process.arch === 'x64') {
      // x32 only where this kernel runs x32 programs; a call from an architecture the filter does not name is refused.
      expect(builtinArchitectures()).toEqual(native.x32Abi() ? [...X86, 'SCMP_ARCH_X32'] : X86);
      expect(buildSpec(base).linux.seccomp?.architectures).toEqual(builtinArchitectures());
    }
  });
});

describe('custom profiles (SecurityOpt seccomp=<json>)', () => {
  const profile = {
    defaultAction: 'SCMP_ACT_ERRNO',
    defaultErrnoRet: 1,
    archMap: [
      { architecture: 'SCMP_ARCH_X86_64', subArchitectures: ['SCMP_ARCH_X86', 'SCMP_ARCH_X32'] },
      { architecture: 'SCMP_ARCH_AARCH64', subArchitectures: ['SCMP_ARCH_ARM'] },
    ],
    syscalls: [
      { names: ['read', 'write'], action: 'SCMP_ACT_ALLOW' },
      { names: ['mount'], action: 'SCMP_ACT_ALLOW', includes: { caps: ['CAP_SYS_ADMIN'] } },
      { name: 'chmod', action: 'SCMP_ACT_ALLOW', excludes: { caps: ['CAP_SYS_ADMIN'] } },
    ],
  };

  it('decides includes and excludes by the container’s capabilities, in the OCI form', () => {
    const plain = profileToOci(profile, DEFAULT_CAPABILITIES);
    expect(plain.syscalls.map((r) => r.names)).toEqual([['read', 'write'], ['chmod']]);
    expect(plain).toMatchObject({ defaultAction: 'SCMP_ACT_ERRNO', defaultErrnoRet: 1 });
    const admin = profileToOci(profile, [...DEFAULT_CAPABILITIES, 'CAP_SYS_ADMIN']);
    expect(admin.syscalls.map((r) => r.names)).toEqual([['read', 'write'], ['mount']]);
    if (process.arch === 'x64')
      expect(plain.architectures).toEqual(['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32']);
  });

  it('reads SecurityOpt as dockerd does, and refuses a profile it cannot use', () => {
    expect(seccompOption([])).toBeUndefined();
    expect(seccompOption(['seccomp=unconfined'])).toBe('unconfined');
    expect(seccompOption(['seccomp:unconfined', 'no-new-privileges'])).toBe('unconfined');
    expect(seccompOption([`seccomp=${JSON.stringify(profile)}`])).toEqual(profile);
    for (const bad of [
      'seccomp={',
      'seccomp=[]',
      'seccomp={"defaultAction":"ALLOW"}',
      'seccomp={"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["x"],"action":"nope"}]}',
    ]) {
      let err: unknown;
      try {
        seccompOption([bad]);
      } catch (e) {
        err = e;
      }
      expect(isEngineError(err) && err.kind, bad).toBe('invalid');
    }
  });
});
