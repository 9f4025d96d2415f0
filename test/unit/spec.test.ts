import { describe, expect, it } from 'vitest';
import {
  ALL_CAPABILITIES,
  DEFAULT_CAPABILITIES,
  grantableCapabilities,
  resolveCapabilities,
} from '../../src/engine/containers/spec/capabilities.js';
import {
  buildSpec,
  CONTAINER_INIT_PATH,
  hostNofileHardLimit,
  type SpecInput,
} from '../../src/engine/containers/spec/spec.js';
import { MASKED_PATHS, READONLY_PATHS } from '../../src/engine/containers/spec/paths.js';
import { isEngineError } from '../../src/errors.js';

const base: SpecInput = {
  args: ['sh', '-c', 'echo hi'],
  env: ['PATH=/usr/bin:/bin'],
  cwd: '/',
  user: { uid: 0, gid: 0 },
  hostname: 'abc123',
  rootfsPath: '/var/lib/berth/containers/x/rootfs',
  cgroupsPath: '/berth/x',
  networkMode: 'private',
  nofileHardLimit: 20000,
};

const spec = (over: Partial<SpecInput> = {}) => buildSpec({ ...base, ...over });
const mount = (s: ReturnType<typeof spec>, dest: string) => s.mounts.find((m) => m.destination === dest);
const nsTypes = (s: ReturnType<typeof spec>) => s.linux.namespaces.map((n) => n.type).sort();

describe('buildSpec: process', () => {
  it('passes the command, environment, cwd, user and tty through', () => {
    const s = spec({ user: { uid: 1000, gid: 100, additionalGids: [10, 20] }, cwd: '/work', tty: true });
    expect(s.process.args).toEqual(['sh', '-c', 'echo hi']);
    expect(s.process.env).toEqual(['PATH=/usr/bin:/bin']);
    expect(s.process.cwd).toBe('/work');
    expect(s.process.user).toEqual({ uid: 1000, gid: 100, additionalGids: [10, 20] });
    expect(s.process.terminal).toBe(true);
    expect(s.hostname).toBe('abc123');
    expect(s.root).toEqual({ path: base.rootfsPath, readonly: false });
    expect(s.linux.cgroupsPath).toBe('/berth/x');
  });

  it('defaults cwd to / and refuses an empty command', () => {
    expect(spec({ cwd: '' }).process.cwd).toBe('/');
    expect(() => spec({ args: [] })).toThrow(/No command specified/);
  });

  it('sets RLIMIT_NOFILE to the host hard limit, never above it nor above 1048576', () => {
    expect(spec().process.rlimits).toEqual([{ type: 'RLIMIT_NOFILE', hard: 20000, soft: 20000 }]);
    expect(spec({ nofileHardLimit: 4_000_000 }).process.rlimits[0]).toMatchObject({ hard: 1048576, soft: 1048576 });
    const host = hostNofileHardLimit();
    expect(host).toBeGreaterThan(0);
    const r = spec({ nofileHardLimit: undefined }).process.rlimits[0]!;
    expect(r.hard).toBe(Math.min(host, 1048576));
  });

  it('sets no-new-privileges only when asked', () => {
    expect(spec().process.noNewPrivileges).toBe(false);
    expect(spec({ noNewPrivileges: true }).process.noNewPrivileges).toBe(true);
  });

  it('runs catatonit as pid 1 with --init, bind-mounted read-only at /dev/init', () => {
    const s = spec({ Init: true });
    expect(s.process.args).toEqual([CONTAINER_INIT_PATH, '--', 'sh', '-c', 'echo hi']);
    const m = mount(s, CONTAINER_INIT_PATH)!;
    expect(m).toMatchObject({ type: 'bind', source: '/usr/bin/catatonit' });
    expect(m.options).toContain('ro');
    // /dev (tmpfs) must be mounted before the file on it.
    expect(s.mounts.findIndex((x) => x.destination === '/dev')).toBeLessThan(s.mounts.indexOf(m));
    expect(mount(spec(), CONTAINER_INIT_PATH)).toBeUndefined();
  });

  it('records the stop signal as an annotation', () => {
    expect(spec({ stopSignal: 'SIGQUIT' }).annotations['org.opencontainers.image.stopSignal']).toBe('SIGQUIT');
    expect(spec().annotations).toEqual({});
  });
});

describe('buildSpec: capabilities', () => {
  it("gives dockerd's default set (CapEff a80425fb)", () => {
    const caps = spec().process.capabilities;
    expect(caps.bounding.sort()).toEqual([...DEFAULT_CAPABILITIES].sort());
    expect(caps.effective).toEqual(caps.bounding);
    expect(caps.permitted).toEqual(caps.bounding);
    const mask = caps.bounding.reduce((m, c) => m | (1n << BigInt(ALL_CAPABILITIES.indexOf(c))), 0n);
    expect(mask.toString(16)).toBe('a80425fb');
  });

  it('adds and drops with or without CAP_, in any case', () => {
    const caps = resolveCapabilities(['net_admin', 'CAP_SYS_PTRACE'], ['MKNOD', 'cap_net_raw'], false);
    expect(caps).toContain('CAP_NET_ADMIN');
    expect(caps).toContain('CAP_SYS_PTRACE');
    expect(caps).not.toContain('CAP_MKNOD');
    expect(caps).not.toContain('CAP_NET_RAW');
    expect(caps).toContain('CAP_CHOWN');
  });

  it('handles ALL in add and drop as dockerd does', () => {
    // ALL is every capability berthd itself holds (its bounding set).
    expect(resolveCapabilities(['ALL'], [], false)).toEqual(grantableCapabilities());
    expect(resolveCapabilities(['all'], ['SYS_ADMIN'], false)).not.toContain('CAP_SYS_ADMIN');
    expect(resolveCapabilities(['CHOWN'], ['ALL'], false)).toEqual(['CAP_CHOWN']);
    expect(resolveCapabilities([], ['ALL'], false)).toEqual([]);
  });

  it('lets an add win over a drop of the same capability', () => {
    expect(resolveCapabilities(['KILL'], ['KILL'], false)).toContain('CAP_KILL');
  });

  it('refuses unknown capabilities as an invalid parameter', () => {
    try {
      spec({ CapAdd: ['CAP_FLY'] });
      expect.fail('should throw');
    } catch (e) {
      expect(isEngineError(e, 'invalid')).toBe(true);
      expect((e as Error).message).toBe('unknown capability: "CAP_FLY"');
    }
  });

  it('gives a privileged container every capability the host lets berthd grant', () => {
    expect(spec({ Privileged: true, CapDrop: ['ALL'] }).process.capabilities.bounding).toEqual(grantableCapabilities());
    expect(grantableCapabilities().length).toBeGreaterThan(30);
    expect(grantableCapabilities().every((c) => ALL_CAPABILITIES.includes(c))).toBe(true);
  });
});

describe('buildSpec: mounts and paths', () => {
  it('mounts /proc, /dev, /dev/pts, /dev/shm, /dev/mqueue, /sys and the cgroup tree as dockerd does', () => {
    const s = spec();
    expect(mount(s, '/proc')).toMatchObject({ type: 'proc', options: ['nosuid', 'noexec', 'nodev'] });
    expect(mount(s, '/dev')!.type).toBe('tmpfs');
    expect(mount(s, '/dev')!.options).toContain('mode=755');
    const pts = mount(s, '/dev/pts')!;
    expect(pts.type).toBe('devpts');
    expect(pts.options).toEqual(expect.arrayContaining(['newinstance', 'ptmxmode=0666', 'gid=5', 'mode=0620']));
    const shm = mount(s, '/dev/shm')!;
    expect(shm.options).toEqual(expect.arrayContaining(['mode=1777', `size=${64 * 1024 * 1024}`, 'noexec']));
    expect(mount(s, '/dev/mqueue')!.type).toBe('mqueue');
    expect(mount(s, '/sys')!.options).toContain('ro');
    expect(mount(s, '/sys/fs/cgroup')).toMatchObject({ type: 'cgroup' });
    expect(mount(s, '/sys/fs/cgroup')!.options).toContain('ro');
  });

  it('masks and write-protects /proc and /sys paths, not when privileged', () => {
    const s = spec();
    expect(s.linux.maskedPaths).toEqual([...MASKED_PATHS]);
    expect(s.linux.maskedPaths).toEqual(expect.arrayContaining(['/proc/kcore', '/proc/keys', '/sys/firmware']));
    expect(s.linux.readonlyPaths).toEqual([...READONLY_PATHS]);
    expect(s.linux.readonlyPaths).toContain('/proc/sysrq-trigger');
    const p = spec({ Privileged: true });
    expect(p.linux.maskedPaths).toEqual([]);
    expect(p.linux.readonlyPaths).toEqual([]);
    expect(mount(p, '/sys')!.options).not.toContain('ro');
    expect(mount(p, '/sys/fs/cgroup')!.options).not.toContain('ro');
  });

  it('uses the MaskedPaths and ReadonlyPaths given, an empty list and privileged included', () => {
    const s = spec({ MaskedPaths: ['/proc/kcore'], ReadonlyPaths: [] });
    expect(s.linux.maskedPaths).toEqual(['/proc/kcore']);
    expect(s.linux.readonlyPaths).toEqual([]);
    expect(spec({ Privileged: true, MaskedPaths: ['/proc/keys'] }).linux.maskedPaths).toEqual(['/proc/keys']);
  });

  it('sets the NIS domain through kernel.domainname and merges HostConfig.Annotations', () => {
    const s = spec({ domainname: 'example.org', Annotations: { 'io.example/a': 'b' }, stopSignal: 'SIGINT' });
    expect(s.linux.sysctl?.['kernel.domainname']).toBe('example.org');
    expect(s.annotations).toEqual({ 'org.opencontainers.image.stopSignal': 'SIGINT', 'io.example/a': 'b' });
    expect(spec().linux.sysctl?.['kernel.domainname']).toBeUndefined();
  });

  it('bind-mounts hosts, hostname and resolv.conf, read-only with a read-only rootfs', () => {
    const hostsFiles = { hosts: '/c/hosts', hostname: '/c/hostname', resolvConf: '/c/resolv.conf' };
    const rw = spec({ hostsFiles });
    expect(mount(rw, '/etc/hosts')).toMatchObject({ type: 'bind', source: '/c/hosts' });
    expect(mount(rw, '/etc/hostname')!.source).toBe('/c/hostname');
    expect(mount(rw, '/etc/resolv.conf')!.options).toContain('rw');
    const ro = spec({ hostsFiles, ReadonlyRootfs: true });
    expect(ro.root.readonly).toBe(true);
    expect(mount(ro, '/etc/resolv.conf')!.options).toContain('ro');
  });

  it('adds user binds with rw/ro and propagation (rprivate by default), replacing a default at the same place', () => {
    const s = spec({
      mounts: [
        { source: '/host/data', destination: '/data', readonly: true },
        { source: '/host/shm', destination: '/dev/shm/' },
        { source: '/host/shared', destination: '/shared', propagation: 'rshared' },
      ],
    });
    expect(mount(s, '/data')).toMatchObject({
      type: 'bind',
      source: '/host/data',
      options: ['rbind', 'rprivate', 'ro'],
    });
    expect(s.mounts.filter((m) => m.destination === '/dev/shm')).toEqual([
      { destination: '/dev/shm', type: 'bind', source: '/host/shm', options: ['rbind', 'rprivate', 'rw'] },
    ]);
    expect(mount(s, '/shared')!.options).toContain('rshared');
    expect(s.linux.rootfsPropagation).toBe('shared');
    expect(spec().linux.rootfsPropagation).toBeUndefined();
  });

  it('orders mounts parents first', () => {
    const s = spec({
      mounts: [
        { source: '/a', destination: '/x/y/z' },
        { source: '/b', destination: '/x' },
      ],
    });
    const dests = s.mounts.map((m) => m.destination);
    expect(dests.indexOf('/x')).toBeLessThan(dests.indexOf('/x/y/z'));
    expect(dests.indexOf('/dev')).toBeLessThan(dests.indexOf('/dev/pts'));
    expect(dests.indexOf('/sys')).toBeLessThan(dests.indexOf('/sys/fs/cgroup'));
  });
});

describe('buildSpec: namespaces', () => {
  it('unshares mount, network, uts, pid and ipc', () => {
    expect(nsTypes(spec())).toEqual(['ipc', 'mount', 'network', 'pid', 'uts']);
    expect(nsTypes(spec({ networkMode: 'none' }))).toContain('network');
  });

  it('shares the host network in host mode, keeping its own hostname namespace', () => {
    const s = spec({ networkMode: 'host' });
    expect(nsTypes(s)).toEqual(['ipc', 'mount', 'pid', 'uts']);
    expect(s.linux.sysctl).toBeUndefined();
  });

  it('allows unprivileged low ports and ping inside a private network', () => {
    expect(spec().linux.sysctl).toEqual({
      'net.ipv4.ip_unprivileged_port_start': '0',
      'net.ipv4.ping_group_range': '0 2147483647',
    });
  });
});

describe('buildSpec: resources', () => {
  it('denies all devices, then allows mknod and the standard nodes', () => {
    const devices = spec().linux.resources.devices;
    expect(devices[0]).toEqual({ allow: false, access: 'rwm' });
    const allowed = (type: string, major: number, minor?: number) =>
      devices.some((d) => d.allow && d.type === type && d.major === major && d.minor === minor && d.access === 'rwm');
    expect(allowed('c', 1, 3)).toBe(true); // null
    expect(allowed('c', 1, 5)).toBe(true); // zero
    expect(allowed('c', 1, 9)).toBe(true); // urandom
    expect(allowed('c', 5, 2)).toBe(true); // ptmx
    expect(allowed('c', 136)).toBe(true); // pts
    expect(allowed('c', 1, 1)).toBe(false); // /dev/mem
    expect(devices.some((d) => d.allow && d.type === 'c' && d.major === undefined && d.access === 'm')).toBe(true);
    expect(spec({ Privileged: true }).linux.resources.devices).toEqual([{ allow: true, access: 'rwm' }]);
  });

  it('sets no limits unless asked', () => {
    const r = spec().linux.resources;
    expect(r.memory).toBeUndefined();
    expect(r.cpu).toBeUndefined();
    expect(r.pids).toBeUndefined();
  });

  it("translates memory with Docker's swap rules", () => {
    const mb = 1024 * 1024;
    expect(spec({ Memory: 64 * mb }).linux.resources.memory).toEqual({ limit: 64 * mb, swap: 128 * mb });
    expect(spec({ Memory: 64 * mb, MemorySwap: -1 }).linux.resources.memory).toEqual({ limit: 64 * mb, swap: -1 });
    expect(spec({ Memory: 64 * mb, MemorySwap: 100 * mb }).linux.resources.memory).toEqual({
      limit: 64 * mb,
      swap: 100 * mb,
    });
    // A swap below the memory limit never gets here: create refuses it (container-create.test.ts).
  });

  it('translates CPU and pids limits', () => {
    const r = spec({ NanoCpus: 1.5e9, CpuShares: 512, CpusetCpus: '0-1', PidsLimit: 100 }).linux.resources;
    expect(r.cpu).toEqual({ shares: 512, period: 100000, quota: 150000, cpus: '0-1' });
    expect(r.pids).toEqual({ limit: 100 });
    expect(spec({ PidsLimit: -1 }).linux.resources.pids).toBeUndefined();
  });

  it('passes the real-time period and runtime to runc', () => {
    const r = spec({ CpuRealtimePeriod: 1_000_000, CpuRealtimeRuntime: 10_000 }).linux.resources;
    expect(r.cpu).toEqual({ realtimePeriod: 1_000_000, realtimeRuntime: 10_000 });
    expect(spec({ CpuRealtimeRuntime: 0 }).linux.resources.cpu).toBeUndefined();
  });
});
