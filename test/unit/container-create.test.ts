// What a create is refused with, in dockerd's words, before anything is
// written; and what it defaults. (The API's 400s: test/api/containers.test.ts.)
import { existsSync } from 'node:fs';
import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { ALL_CAPABILITIES, grantableCapabilities } from '../../src/engine/containers/spec/capabilities.js';
import type { ConfigBody, Given, HostConfigBody } from '../../src/engine/containers/config.js';
import {
  bindMounts,
  checkConfig,
  createSettings,
  recursiveReadonlySupported,
} from '../../src/engine/containers/create/create.js';
import { isEngineError } from '../../src/errors.js';

const MB = 1024 * 1024;
const ID = 'a'.repeat(64);
const image = { ref: 'busybox', config: { Cmd: ['sh'], Env: ['PATH=/bin'] } };
const settings = (h: Given<HostConfigBody>, c: Given<ConfigBody> = {}) =>
  createSettings({ Image: 'busybox', ...c }, h, image, ID);

/** The refusal: an invalid-parameter error (400) and its exact message. */
function refusal(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    expect(isEngineError(e, 'invalid'), String(e)).toBe(true);
    return (e as Error).message;
  }
  throw new Error('not refused');
}

describe('create refuses what dockerd refuses at create', () => {
  const cpus = os.availableParallelism();
  it.each<[string, Given<HostConfigBody>, string]>([
    [
      'a swap below memory',
      { Memory: 64 * MB, MemorySwap: 32 * MB },
      'Minimum memoryswap limit should be larger than memory limit, see usage',
    ],
    [
      'a swap without memory',
      { MemorySwap: 64 * MB },
      'You should always set the Memory limit when using Memoryswap limit, see usage',
    ],
    ['memory below 6 MB', { Memory: 1024 }, 'Minimum memory limit allowed is 6MB'],
    ['an unknown capability to add', { CapAdd: ['CAP_FOO'] }, 'invalid CapAdd: unknown capability: "CAP_FOO"'],
    ['an unknown capability to drop', { CapDrop: ['foo'] }, 'invalid CapDrop: unknown capability: "CAP_FOO"'],
    [
      'more CPUs than the host has',
      { NanoCpus: (cpus + 1) * 1e9 },
      `Range of CPUs is from 0.01 to ${cpus}.00, as there are only ${cpus} CPUs available`,
    ],
    [
      'negative CPUs',
      { NanoCpus: -1 },
      `Range of CPUs is from 0.01 to ${cpus}.00, as there are only ${cpus} CPUs available`,
    ],
    ['a cpuset that does not parse', { CpusetCpus: '1-x' }, 'Invalid value 1-x for cpuset cpus: invalid format: 1-x'],
    [
      'a cpuset past the highest CPU',
      { CpusetCpus: '0-9000' },
      'Invalid value 0-9000 for cpuset cpus: value of out range, maximum is 8192',
    ],
    ['an extra host without an address', { ExtraHosts: ['db'] }, 'bad format for add-host: "db"'],
    ['an extra host with a bad address', { ExtraHosts: ['db:10.0.0'] }, 'invalid IP address in add-host: "10.0.0"'],
    [
      'a negative retry count',
      { RestartPolicy: { Name: 'on-failure', MaximumRetryCount: -1 } },
      'maximum retry count cannot be negative',
    ],
    [
      'a retry count with always',
      { RestartPolicy: { Name: 'always', MaximumRetryCount: 3 } },
      "maximum retry count cannot be used with restart policy 'always'",
    ],
    ['an unknown restart policy', { RestartPolicy: { Name: 'sometimes' } }, "invalid restart policy 'sometimes'"],
    [
      'AutoRemove with a restart policy',
      { AutoRemove: true, RestartPolicy: { Name: 'always' } },
      "can't create 'AutoRemove' container with restart policy",
    ],
    ['a negative /dev/shm', { ShmSize: -1 }, 'SHM size can not be less than 0'],

    ['an unknown security option', { SecurityOpt: ['selinux=x'] }, 'Invalid --security-opt: "selinux=x"'],
    [
      'a bind mount with an unknown propagation',
      { Mounts: [{ Type: 'bind', Source: '/tmp', Target: '/t', BindOptions: { Propagation: 'sideways' } }] },
      'invalid mount config for type "bind": invalid propagation mode: sideways',
    ],
  ])('%s', (_what, h, message) => {
    expect(refusal(() => settings(h))).toBe(message);
  });

  it('refuses a CPU the host does not offer', () => {
    expect(refusal(() => settings({ CpusetCpus: '4096' }))).toMatch(
      /^Requested CPUs are not available - requested 4096, available: [\d,-]+$/,
    );
  });

  // Real-time group scheduling: cgroup v1 with CONFIG_RT_GROUP_SCHED (this host has it).
  const realtime = existsSync('/sys/fs/cgroup/cpu/cpu.rt_period_us');
  it.skipIf(!realtime)("refuses a real-time runtime above its period, or above a new cgroup's (the kernel's)", () => {
    for (const h of [{ CpuRealtimePeriod: 100_000, CpuRealtimeRuntime: 200_000 }, { CpuRealtimeRuntime: 1_000_001 }]) {
      expect(refusal(() => settings(h))).toBe('cpu real-time runtime cannot be higher than cpu real-time period');
    }
    expect(settings({ CpuRealtimeRuntime: 10_000 }).hostConfig.CpuRealtimeRuntime).toBe(10_000);
  });
  it.skipIf(realtime)('refuses real-time scheduling where the kernel has none', () => {
    expect(refusal(() => settings({ CpuRealtimeRuntime: 10_000 }))).toBe(
      'Your kernel does not support CPU real-time scheduler',
    );
  });

  // A host may withhold some from berthd (this one withholds CAP_SYS_RESOURCE): runc would fail to grant it.
  const withheld = ALL_CAPABILITIES.find((c) => !grantableCapabilities().includes(c));
  it.skipIf(!withheld)('refuses a capability berthd does not hold', () => {
    expect(refusal(() => settings({ CapAdd: [withheld!.slice(4).toLowerCase()] }))).toBe(
      `invalid CapAdd: capability not supported by your kernel or not available in the current environment: "${withheld}"`,
    );
  });

  it.each<[string, Given<ConfigBody>, string]>([
    ['no image', {}, 'Config cannot be empty in order to create a container'],
    [
      'a relative working directory',
      { Image: 'x', WorkingDir: 'w' },
      "the working directory 'w' is invalid, it needs to be an absolute path",
    ],
    ['an unknown stop signal', { Image: 'x', StopSignal: 'SIGFOO' }, 'Invalid signal: SIGFOO'],
    ['a variable without a name', { Image: 'x', Env: ['A=1', '=x'] }, 'invalid environment variable: =x'],
  ])('refuses a Config with %s', (_what, c, message) => {
    expect(refusal(() => checkConfig(c))).toBe(message);
  });

  it('accepts what dockerd accepts', () => {
    expect(() =>
      settings({
        Memory: 64 * MB,
        MemorySwap: -1,
        CapAdd: ['net_admin', 'ALL'],
        CapDrop: ['CAP_MKNOD'],
        NanoCpus: cpus * 1e9,
        CpusetCpus: '0',
        ExtraHosts: ['db:10.0.0.1', 'v6:::1', 'gw:host-gateway', 'eq=10.0.0.2', 'br:[::1]'],
        RestartPolicy: { Name: 'on-failure', MaximumRetryCount: 2 },
      }),
    ).not.toThrow();
    expect(checkConfig({ Image: 'x', StopSignal: '9', Env: ['A', 'B='] })).toBe('x');
  });
});

describe('create defaults', () => {
  it("gives Docker's HostConfig defaults", () => {
    expect(settings({}).hostConfig).toMatchObject({
      Binds: null,
      AutoRemove: false,
      NetworkMode: 'default',
      RestartPolicy: { Name: '', MaximumRetryCount: 0 },
      Memory: 0,
      MemorySwap: 0,
      CpusetCpus: '',
      LogConfig: { Type: 'json-file', Config: {} },
    });
  });

  it('parses the security options once, at create', () => {
    expect(settings({}).security).toEqual({ noNewPrivileges: false });
    expect(settings({ SecurityOpt: ['no-new-privileges', 'seccomp=unconfined'] }).security).toEqual({
      noNewPrivileges: true,
      seccomp: 'unconfined',
    });
  });

  it("merges the request over the image's config, and names the host after the id", () => {
    const { config } = settings({}, { Env: ['PATH=/usr/bin', 'A=1'] });
    expect(config).toMatchObject({
      Image: 'busybox',
      Cmd: ['sh'],
      Env: ['PATH=/usr/bin', 'A=1'],
      Hostname: 'aaaaaaaaaaaa',
    });
    expect(refusal(() => createSettings({ Image: 'x', Entrypoint: [] }, {}, { ref: 'x', config: {} }, ID))).toBe(
      'No command specified',
    );
  });
});

describe('read-only binds (API 1.44: recursively read-only where the kernel can)', () => {
  it('knows the kernels that can (mount_setattr, 5.12 on)', () => {
    expect(recursiveReadonlySupported('5.11.22-generic')).toBe('the kernel (5.11.22-generic) is older than 5.12');
    expect(recursiveReadonlySupported('4.19.0')).toMatch(/older than 5\.12/);
    for (const r of ['5.12.0', '5.15.0-91-generic', '6.18.44-fc-v782'])
      expect(recursiveReadonlySupported(r)).toBeUndefined();
  });

  it('makes read-only ones recursive only when asked and only those', () => {
    const { hostConfig } = settings({
      Binds: ['/a:/a:ro', '/b:/b'],
      Mounts: [
        { Type: 'bind', Source: '/c', Target: '/c', ReadOnly: true },
        { Type: 'bind', Source: '/d', Target: '/d', ReadOnly: true, BindOptions: { ReadOnlyNonRecursive: true } },
        { Type: 'bind', Source: '/e', Target: '/e', ReadOnly: true, BindOptions: { ReadOnlyForceRecursive: true } },
      ],
    });
    const recursive = (on: boolean) => bindMounts(hostConfig, on).map((b) => [b.destination, b.recursive ?? false]);
    const kernel = recursiveReadonlySupported() === undefined;
    expect(recursive(true)).toEqual([
      ['/a', kernel],
      ['/b', false],
      ['/c', kernel],
      ['/d', false],
      ['/e', true],
    ]);
    // A container made through an older API: only the forced one.
    expect(recursive(false).filter(([, r]) => r)).toEqual([['/e', true]]);
  });
});
