// What the host's cgroups let a container be limited by, as dockerd's sysinfo
// finds it (moby pkg/sysinfo): on cgroup v1, whether each controller is
// mounted and has the file a limit is written to; on a pure v2 host, which
// controllers the root offers. A limit the host cannot apply is discarded at
// create and update with dockerd's warning (resources.ts), never stored and
// dropped at start. Read once: controllers are not mounted under a running berthd.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';

export interface CgroupFeatures {
  memoryLimit: boolean;
  swapLimit: boolean;
  memoryReservation: boolean;
  oomKillDisable: boolean;
  memorySwappiness: boolean;
  kernelMemory: boolean;
  kernelMemoryTCP: boolean;
  cpuShares: boolean;
  cpuCfs: boolean;
  cpuset: boolean;
  blkioWeight: boolean;
  blkioWeightDevice: boolean;
  blkioReadBpsDevice: boolean;
  blkioWriteBpsDevice: boolean;
  blkioReadIOpsDevice: boolean;
  blkioWriteIOpsDevice: boolean;
  pidsLimit: boolean;
  cgroupNamespaces: boolean;
  /** The memory nodes containers may use (the root cpuset's), e.g. `0` or `0-1`. */
  mems: string;
}

/** Where the hierarchies are mounted. */
export const CGROUP_ROOT = '/sys/fs/cgroup';

let cached: CgroupFeatures | undefined;

export function cgroupFeatures(): CgroupFeatures {
  cached ??= detect(CGROUP_ROOT);
  return cached;
}

/** The features of the hierarchies under `root` (a parameter so that unit tests can give a tree of their own). */
export function detect(root: string): CgroupFeatures {
  const cgroupNamespaces = existsSync('/proc/self/ns/cgroup');
  if (existsSync(path.join(root, 'cgroup.controllers'))) return detectV2(root, cgroupNamespaces);
  const has = (controller: string, file: string) => existsSync(path.join(root, controller, file));
  return {
    memoryLimit: has('memory', 'memory.limit_in_bytes'),
    swapLimit: has('memory', 'memory.memsw.limit_in_bytes'),
    memoryReservation: has('memory', 'memory.soft_limit_in_bytes'),
    oomKillDisable: has('memory', 'memory.oom_control'),
    memorySwappiness: has('memory', 'memory.swappiness'),
    kernelMemory: has('memory', 'memory.kmem.limit_in_bytes'),
    kernelMemoryTCP: has('memory', 'memory.kmem.tcp.limit_in_bytes'),
    cpuShares: has('cpu', 'cpu.shares'),
    cpuCfs: has('cpu', 'cpu.cfs_quota_us'),
    cpuset: has('cpuset', 'cpuset.cpus'),
    blkioWeight: has('blkio', 'blkio.weight'),
    blkioWeightDevice: has('blkio', 'blkio.weight_device'),
    blkioReadBpsDevice: has('blkio', 'blkio.throttle.read_bps_device'),
    blkioWriteBpsDevice: has('blkio', 'blkio.throttle.write_bps_device'),
    blkioReadIOpsDevice: has('blkio', 'blkio.throttle.read_iops_device'),
    blkioWriteIOpsDevice: has('blkio', 'blkio.throttle.write_iops_device'),
    pidsLimit: existsSync(path.join(root, 'pids')),
    cgroupNamespaces,
    mems: readTrimmed(path.join(root, 'cpuset', 'cpuset.mems')) ?? '0',
  };
}

/** A pure v2 host (moby's newV2): what the root's controllers offer; v1's swappiness, OOM switch and kernel memory are gone. */
function detectV2(root: string, cgroupNamespaces: boolean): CgroupFeatures {
  const controllers = new Set((readTrimmed(path.join(root, 'cgroup.controllers')) ?? '').split(/\s+/));
  const memory = controllers.has('memory');
  const cpu = controllers.has('cpu');
  const io = controllers.has('io');
  return {
    memoryLimit: memory,
    swapLimit: memory,
    memoryReservation: memory,
    oomKillDisable: false,
    memorySwappiness: false,
    kernelMemory: false,
    kernelMemoryTCP: false,
    cpuShares: cpu,
    cpuCfs: cpu,
    cpuset: controllers.has('cpuset'),
    blkioWeight: io,
    blkioWeightDevice: io,
    blkioReadBpsDevice: io,
    blkioWriteBpsDevice: io,
    blkioReadIOpsDevice: io,
    blkioWriteIOpsDevice: io,
    pidsLimit: controllers.has('pids'),
    cgroupNamespaces,
    mems: readTrimmed(path.join(root, 'cpuset.mems.effective')) ?? '0',
  };
}

function readTrimmed(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8').trim();
  } catch {
    return undefined;
  }
}
