import { describe, expect, it } from 'vitest';
import { buildSpec, DEFAULT_CAPABILITIES, type SpecInput } from '../../src/engine/containers/spec.js';
import { defaultSeccomp, profileToOci, seccompOption } from '../../src/engine/containers/seccomp.js';
import { isEngineError } from '../../src/errors.js';

const base: SpecInput = { args: ['true'], rootfsPath: '/r', cgroupsPath: '/berth/x', networkMode: 'private', nofileHardLimit: 1024 };
const denied = (s: ReturnType<typeof defaultSeccomp>, name: string) => s.syscalls.some((r) => r.names.includes(name) && r.action === 'SCMP_ACT_ERRNO' && !r.args);

describe('the built-in seccomp profile', () => {
  it('is applied by default, and not with --privileged or seccomp=unconfined', () => {
    expect(buildSpec(base).linux.seccomp?.defaultAction).toBe('SCMP_ACT_ALLOW');
    expect(buildSpec({ ...base, privileged: true }).linux.seccomp).toBeUndefined();
    expect(buildSpec({ ...base, seccomp: 'unconfined' }).linux.seccomp).toBeUndefined();
  });

  it('denies namespaces, mounts, keyrings and module loading to a default container', () => {
    const s = defaultSeccomp(DEFAULT_CAPABILITIES);
    for (const n of ['unshare', 'setns', 'mount', 'pivot_root', 'keyctl', 'bpf', 'io_uring_setup', 'init_module', 'kexec_load', 'clock_settime', 'open_by_handle_at']) {
      expect(denied(s, n), n).toBe(true);
    }
    expect(denied(s, 'read')).toBe(false);
    // clone with any namespace flag; clone3 answers ENOSYS so that libc falls back to clone.
    const clones = s.syscalls.filter((r) => r.names.includes('clone'));
    expect(clones.map((r) => r.args![0]!.value).reduce((a, b) => a | b, 0)).toBe(0x7e020000);
    expect(s.syscalls.find((r) => r.names.includes('clone3'))?.errnoRet).toBe(38);
  });

  it('gives back what a capability makes legitimate', () => {
    const admin = defaultSeccomp([...DEFAULT_CAPABILITIES, 'CAP_SYS_ADMIN']);
    expect(denied(admin, 'mount')).toBe(false);
    expect(denied(admin, 'unshare')).toBe(false);
    expect(admin.syscalls.some((r) => r.names.includes('clone'))).toBe(false);
    expect(denied(admin, 'keyctl')).toBe(true); // no capability makes the host's keyrings a container's
    expect(denied(defaultSeccomp([...DEFAULT_CAPABILITIES, 'CAP_SYS_TIME']), 'clock_settime')).toBe(false);
  });
});

describe('custom profiles (SecurityOpt seccomp=<json>)', () => {
  const profile = {
    defaultAction: 'SCMP_ACT_ERRNO',
    defaultErrnoRet: 1,
    archMap: [{ architecture: 'SCMP_ARCH_X86_64', subArchitectures: ['SCMP_ARCH_X86', 'SCMP_ARCH_X32'] }, { architecture: 'SCMP_ARCH_AARCH64', subArchitectures: ['SCMP_ARCH_ARM'] }],
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
    if (process.arch === 'x64') expect(plain.architectures).toEqual(['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32']);
  });

  it('reads SecurityOpt as dockerd does, and refuses a profile it cannot use', () => {
    expect(seccompOption([])).toBeUndefined();
    expect(seccompOption(['seccomp=unconfined'])).toBe('unconfined');
    expect(seccompOption(['seccomp:unconfined', 'no-new-privileges'])).toBe('unconfined');
    expect(seccompOption([`seccomp=${JSON.stringify(profile)}`])).toEqual(profile);
    for (const bad of ['seccomp={', 'seccomp=[]', 'seccomp={"defaultAction":"ALLOW"}', 'seccomp={"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["x"],"action":"nope"}]}']) {
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
