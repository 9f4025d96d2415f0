// Cgroup paths (cgroups.ts), the host's cgroup features (os/cgroupinfo.ts) on
// trees of the test's own, and the limits written into the spec and into
// runc update's resources (limits.ts).
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cgroupsPath } from '../../src/engine/containers/spec/cgroups.js';
import { specLimits, updatedResources } from '../../src/engine/containers/spec/limits.js';
import { buildSpec } from '../../src/engine/containers/spec/spec.js';
import { detect } from '../../src/engine/os/cgroupinfo.js';
import { scratchDir } from '../harness/tmp.js';

const MB = 1024 * 1024;

describe('cgroupsPath', () => {
  it("is berth's parent, or the container's, joined with the id as Go's filepath.Join joins them", () => {
    const c = (CgroupParent?: string) => cgroupsPath({ id: 'abc', hostConfig: { CgroupParent } });
    expect(c()).toBe('/berth/abc');
    expect(c('')).toBe('/berth/abc');
    expect(c('/kubepods/besteffort/pod1')).toBe('/kubepods/besteffort/pod1/abc');
    expect(c('/../../x/')).toBe('/x/abc');
    // A relative one stays relative (runc takes it from its own cgroup, and cleans it).
    expect(c('test')).toBe('test/abc');
    expect(c('../../x')).toBe('../../x/abc');
    // The systemd form is a plain name under cgroupfs, as with dockerd's cgroupfs driver.
    expect(c('user.slice:docker:x')).toBe('user.slice:docker:x/abc');
  });
});

describe('detect', () => {
  const tree = (files: Record<string, string>) => {
    const root = scratchDir('berth-cgroups-');
    for (const [f, text] of Object.entries(files)) {
      mkdirSync(path.dirname(path.join(root, f)), { recursive: true });
      writeFileSync(path.join(root, f), text);
    }
    return root;
  };

  it('reads v1 features from the controllers’ files, as dockerd’s sysinfo', () => {
    const f = detect(
      tree({
        'memory/memory.limit_in_bytes': '',
        'memory/memory.soft_limit_in_bytes': '',
        'memory/memory.oom_control': '',
        'cpu/cpu.cfs_quota_us': '',
        'cpuset/cpuset.cpus': '0-3',
        'cpuset/cpuset.mems': '0-1\n',
        'blkio/blkio.throttle.read_bps_device': '',
      }),
    );
    expect(f).toMatchObject({
      memoryLimit: true,
      swapLimit: false,
      memoryReservation: true,
      oomKillDisable: true,
      memorySwappiness: false,
      kernelMemory: false,
      cpuCfs: true,
      cpuShares: false,
      cpuset: true,
      mems: '0-1',
      blkioWeight: false,
      blkioReadBpsDevice: true,
      blkioWriteBpsDevice: false,
      pidsLimit: false,
    });
  });

  it('reads a pure v2 host from the root’s controllers; v1-only switches are off', () => {
    const f = detect(tree({ 'cgroup.controllers': 'cpuset cpu io memory pids\n', 'cpuset.mems.effective': '0' }));
    expect(f).toMatchObject({
      memoryLimit: true,
      memoryReservation: true,
      oomKillDisable: false,
      memorySwappiness: false,
      kernelMemory: false,
      cpuCfs: true,
      blkioWeight: true,
      pidsLimit: true,
      mems: '0',
    });
  });
});

describe('limits', () => {
  it('writes the CFS period and quota, cpuset mems, the soft limit, the OOM switch and TCP buffers into the spec', () => {
    expect(
      specLimits({
        CpuPeriod: 200_000,
        CpuQuota: 50_000,
        CpusetMems: '0',
        Memory: 64 * MB,
        MemoryReservation: 32 * MB,
        OomKillDisable: true,
        KernelMemoryTCP: 8 * MB,
      }),
    ).toEqual({
      cpu: { period: 200_000, quota: 50_000, mems: '0' },
      memory: { limit: 64 * MB, swap: 128 * MB, reservation: 32 * MB, disableOOMKiller: true, kernelTCP: 8 * MB },
    });
    expect(specLimits({ OomKillDisable: false })).toEqual({});
  });

  it('turns blkio devices into major:minor at each start, with dockerd’s words for a missing one', () => {
    const b = specLimits({
      BlkioWeight: 300,
      BlkioWeightDevice: [{ Path: '/dev/null', Weight: 100 }],
      BlkioDeviceReadBps: [{ Path: '/dev/null', Rate: MB }],
      BlkioDeviceWriteIOps: [{ Path: '/dev/zero', Rate: 10 }],
    }).blockIO;
    expect(b).toEqual({
      weight: 300,
      weightDevice: [{ major: 1, minor: 3, weight: 100 }],
      throttleReadBpsDevice: [{ major: 1, minor: 3, rate: MB }],
      throttleWriteIOPSDevice: [{ major: 1, minor: 5, rate: 10 }],
    });
    expect(() => specLimits({ BlkioDeviceReadBps: [{ Path: '/dev/berth-none', Rate: 1 }] })).toThrow(
      'stat /dev/berth-none: no such file or directory',
    );
  });

  it('updates what dockerd updates: a quota of -1 lifts it, the OOM switch is left alone', () => {
    expect(
      updatedResources({ CpuQuota: -1, CpusetMems: '0', MemoryReservation: 16 * MB, OomKillDisable: true }),
    ).toEqual({
      cpu: { quota: -1, mems: '0' },
      memory: { reservation: 16 * MB },
    });
    expect(updatedResources({ BlkioWeight: 500 }).blockIO).toEqual({ weight: 500 });
  });

  it('gives a cgroup namespace to CgroupnsMode private only', () => {
    const base = { args: ['true'], rootfsPath: '/r', cgroupsPath: '/berth/x' };
    const types = (CgroupnsMode?: string) => buildSpec({ ...base, CgroupnsMode }).linux.namespaces.map((n) => n.type);
    expect(types('private')).toContain('cgroup');
    expect(types('host')).not.toContain('cgroup');
    expect(types()).not.toContain('cgroup');
  });
});
