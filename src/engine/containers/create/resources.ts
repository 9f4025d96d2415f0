// A create's or an update's resource limits, checked as dockerd checks them
// (verifyPlatformContainerResources): a limit that runc or the kernel would
// refuse at start is refused; one the host's cgroups cannot apply
// (cgroupinfo.ts) is discarded with dockerd's warning.
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { invalidParameter, messageOf } from '../../../errors.js';
import { canRaiseLimits } from '../spec/capabilities.js';
import { type CgroupFeatures, cgroupFeatures } from '../../os/cgroupinfo.js';
import type { Given, HostConfigBody } from '../config.js';
import { checkRealtime } from '../spec/realtime.js';

/** dockerd's floor for a memory limit, room for a container's own start-up (moby linuxMinMemory). */
const MIN_MEMORY = 6 * 1024 * 1024;
/** The highest CPU number a cpuset may name, unless the host has higher ones (moby's defaultMaxCPUs). */
const MAX_CPU = 8192;

/** The limits a create or an update may carry, as dockerd's Resources (and OomScoreAdj). */
export type ResourceRequest = Pick<
  Given<HostConfigBody>,
  | 'Memory'
  | 'MemorySwap'
  | 'MemorySwappiness'
  | 'MemoryReservation'
  | 'KernelMemory'
  | 'OomKillDisable'
  | 'NanoCpus'
  | 'CpuShares'
  | 'CpuPeriod'
  | 'CpuQuota'
  | 'CpuPercent'
  | 'CpusetCpus'
  | 'CpusetMems'
  | 'CpuRealtimePeriod'
  | 'CpuRealtimeRuntime'
  | 'BlkioWeight'
  | 'BlkioWeightDevice'
  | 'BlkioDeviceReadBps'
  | 'BlkioDeviceWriteBps'
  | 'BlkioDeviceReadIOps'
  | 'BlkioDeviceWriteIOps'
  | 'IOMaximumIOps'
  | 'IOMaximumBandwidth'
  | 'OomScoreAdj'
>;

/**
 * dockerd's checks of a create's or an update's limits
 * (verifyPlatformContainerResources), in its order: what the host's cgroups
 * cannot apply is discarded with dockerd's warning (so never stored), what
 * is out of range or contradicts another limit is refused in dockerd's
 * words. An update may give a swap limit alone. Returns the request with the
 * discarded fields taken out, and the warnings for the answer.
 */
export function verifyResources<T extends ResourceRequest>(
  request: T,
  o: { update?: boolean } = {},
): { resources: T; warnings: string[] } {
  const warnings: string[] = [];
  // A create's are refused as its body is decoded (dockerd's validateQoS), before any other check.
  if (!o.update && request.IOMaximumBandwidth) {
    throw invalidParameter('Invalid QoS settings: linux does not support configuration of maximum bandwidth');
  }
  if (!o.update && request.IOMaximumIOps) {
    throw invalidParameter('Invalid QoS settings: linux does not support configuration of maximum IOPs');
  }
  const r: T = { ...request };
  // fixMemorySwappiness: -1 is the docker CLI's "not set".
  if (r.MemorySwappiness === -1) delete r.MemorySwappiness;
  const host = cgroupFeatures();
  verifyMemory(r, host, warnings, o.update ?? false);
  verifyCpu(r, host, warnings);
  verifyBlkio(r, host, warnings);
  checkRealtime(r);
  if (r.OomScoreAdj) checkOomScoreAdj(r.OomScoreAdj);
  return { resources: r, warnings };
}

function verifyMemory(r: ResourceRequest, host: CgroupFeatures, warnings: string[], update: boolean): void {
  const discard = (warning: string, field: keyof ResourceRequest) => {
    warnings.push(warning);
    delete r[field];
  };
  // A limit below 6 MB (or negative) would otherwise run unlimited.
  if (r.Memory && r.Memory < MIN_MEMORY) throw invalidParameter('Minimum memory limit allowed is 6MB');
  if (r.Memory && r.Memory > 0 && !host.memoryLimit) {
    discard(
      'Your kernel does not support memory limit capabilities or the cgroup is not mounted. Limitation discarded.',
      'Memory',
    );
    r.MemorySwap = -1;
  }
  if (r.Memory && r.Memory > 0 && r.MemorySwap !== -1 && !host.swapLimit) {
    warnings.push(
      'Your kernel does not support swap limit capabilities or the cgroup is not mounted. Memory limited without swap.',
    );
    r.MemorySwap = -1;
  }
  const memory = r.Memory ?? 0;
  const swap = r.MemorySwap ?? 0;
  if (memory > 0 && swap > 0 && swap < memory) {
    throw invalidParameter('Minimum memoryswap limit should be larger than memory limit, see usage');
  }
  if (memory === 0 && swap > 0 && !update) {
    throw invalidParameter('You should always set the Memory limit when using Memoryswap limit, see usage');
  }
  if (r.MemorySwappiness !== undefined && !host.memorySwappiness) {
    discard(
      'Your kernel does not support memory swappiness capabilities or the cgroup is not mounted. Memory swappiness discarded.',
      'MemorySwappiness',
    );
  }
  const swappiness = r.MemorySwappiness;
  if (swappiness !== undefined && (swappiness < 0 || swappiness > 100)) {
    throw invalidParameter(`Invalid value: ${swappiness}, valid memory swappiness range is 0-100`);
  }
  if (r.MemoryReservation && r.MemoryReservation > 0 && !host.memoryReservation) {
    discard(
      'Your kernel does not support memory soft limit capabilities or the cgroup is not mounted. Limitation discarded.',
      'MemoryReservation',
    );
  }
  const reservation = r.MemoryReservation ?? 0;
  if (reservation > 0 && reservation < MIN_MEMORY) throw invalidParameter('Minimum memory reservation allowed is 6MB');
  if (memory > 0 && reservation > 0 && memory < reservation) {
    throw invalidParameter('Minimum memory limit can not be less than memory reservation limit, see usage');
  }
  if (r.KernelMemory && r.KernelMemory > 0) {
    warnings.push('Specifying a kernel memory limit is deprecated and will be removed in a future release.');
    if (!host.kernelMemory) {
      discard(
        'Your kernel does not support kernel memory limit capabilities or the cgroup is not mounted. Limitation discarded.',
        'KernelMemory',
      );
    }
  }
  if (r.KernelMemory && r.KernelMemory > 0 && r.KernelMemory < MIN_MEMORY) {
    throw invalidParameter('Minimum kernel memory limit allowed is 6MB');
  }
  if (r.OomKillDisable !== undefined && !host.oomKillDisable) {
    // Only a request to disable the killer is worth a warning.
    if (r.OomKillDisable) warnings.push('Your kernel does not support OomKillDisable. OomKillDisable discarded.');
    delete r.OomKillDisable;
  }
  if (r.OomKillDisable && memory === 0) {
    warnings.push(
      'OOM killer is disabled for the container, but no memory limit is set, this can result in the system running out of resources.',
    );
  }
}

function verifyCpu(r: ResourceRequest, host: CgroupFeatures, warnings: string[]): void {
  const nanoCpus = r.NanoCpus ?? 0;
  if (nanoCpus > 0 && (r.CpuPeriod ?? 0) > 0) {
    throw invalidParameter('Conflicting options: Nano CPUs and CPU Period cannot both be set');
  }
  if (nanoCpus > 0 && (r.CpuQuota ?? 0) > 0) {
    throw invalidParameter('Conflicting options: Nano CPUs and CPU Quota cannot both be set');
  }
  if (nanoCpus > 0 && !host.cpuCfs) {
    throw invalidParameter(
      'NanoCPUs can not be set, as your kernel does not support CPU CFS scheduler or the cgroup is not mounted',
    );
  }
  const cpus = os.availableParallelism();
  if (nanoCpus < 0 || nanoCpus > cpus * 1e9) {
    throw invalidParameter(`Range of CPUs is from 0.01 to ${cpus}.00, as there are only ${cpus} CPUs available`);
  }
  if (r.CpuShares && r.CpuShares > 0 && !host.cpuShares) {
    warnings.push('Your kernel does not support CPU shares or the cgroup is not mounted. Shares discarded.');
    delete r.CpuShares;
  }
  if ((r.CpuPeriod || r.CpuQuota) && !host.cpuCfs) {
    warnings.push('Your kernel does not support CPU CFS scheduler. CPU period/quota discarded.');
    delete r.CpuPeriod;
    delete r.CpuQuota;
  }
  if (r.CpuPeriod && (r.CpuPeriod < 1000 || r.CpuPeriod > 1_000_000)) {
    throw invalidParameter('CPU cfs period can not be less than 1ms (i.e. 1000) or larger than 1s (i.e. 1000000)');
  }
  if (r.CpuQuota && r.CpuQuota > 0 && r.CpuQuota < 1000) {
    throw invalidParameter('CPU cfs quota can not be less than 1ms (i.e. 1000)');
  }
  if (r.CpuPercent && r.CpuPercent > 0) {
    warnings.push('linux does not support CPU percent. Percent discarded.');
    delete r.CpuPercent;
  }
  if ((r.CpusetCpus || r.CpusetMems) && !host.cpuset) {
    warnings.push('Your kernel does not support cpuset or the cgroup is not mounted. Cpuset discarded.');
    delete r.CpusetCpus;
    delete r.CpusetMems;
  }
  if (r.CpusetCpus) checkCpuset(r.CpusetCpus);
  if (r.CpusetMems) checkCpusetMems(r.CpusetMems, host.mems);
}

/** Docker's fields of device throttles, the host's feature, and dockerd's words when it lacks it. */
const THROTTLES = [
  ['BlkioDeviceReadBps', 'blkioReadBpsDevice', 'BPS Block I/O read limit', 'Block I/O BPS read limit'],
  ['BlkioDeviceWriteBps', 'blkioWriteBpsDevice', 'BPS Block I/O write limit', 'Block I/O BPS write limit'],
  ['BlkioDeviceReadIOps', 'blkioReadIOpsDevice', 'IOPS Block read limit', 'Block I/O IOPS read limit'],
  ['BlkioDeviceWriteIOps', 'blkioWriteIOpsDevice', 'IOPS Block write limit', 'Block I/O IOPS write limit'],
] as const;

function verifyBlkio(r: ResourceRequest, host: CgroupFeatures, warnings: string[]): void {
  if (r.BlkioWeight && r.BlkioWeight > 0 && !host.blkioWeight) {
    warnings.push('Your kernel does not support Block I/O weight or the cgroup is not mounted. Weight discarded.');
    delete r.BlkioWeight;
  }
  if (r.BlkioWeight && r.BlkioWeight > 0 && (r.BlkioWeight < 10 || r.BlkioWeight > 1000)) {
    throw invalidParameter('Range of blkio weight is from 10 to 1000');
  }
  // An update's: dockerd's resource check says it of both.
  if (r.IOMaximumBandwidth || r.IOMaximumIOps) {
    throw invalidParameter('Invalid QoS settings: linux does not support Maximum IO Bandwidth or Maximum IO IOps');
  }
  if (r.BlkioWeightDevice?.length && !host.blkioWeightDevice) {
    warnings.push(
      'Your kernel does not support Block I/O weight_device or the cgroup is not mounted. Weight-device discarded.',
    );
    r.BlkioWeightDevice = [];
  }
  for (const [field, feature, what, limit] of THROTTLES) {
    if (r[field]?.length && !host[feature]) {
      warnings.push(`Your kernel does not support ${what} or the cgroup is not mounted. ${limit} discarded.`);
      r[field] = [];
    }
  }
}

function checkCpuset(requested: string): void {
  const { text, cpus } = availableCpus();
  let wanted: Set<number>;
  try {
    wanted = parseCpuList(requested, Math.max(MAX_CPU, ...cpus));
  } catch (e) {
    throw invalidParameter(`Invalid value ${requested} for cpuset cpus: ${messageOf(e)}`);
  }
  if ([...wanted].some((c) => !cpus.has(c))) {
    throw invalidParameter(`Requested CPUs are not available - requested ${requested}, available: ${text}`);
  }
}

/** CpusetMems: memory nodes the host's root cpuset has (dockerd's IsCpusetMemsAvailable, read as a CPU list is). */
function checkCpusetMems(requested: string, availableText: string): void {
  const available = parseCpuList(availableText);
  let wanted: Set<number>;
  try {
    wanted = parseCpuList(requested, Math.max(MAX_CPU, ...available));
  } catch (e) {
    throw invalidParameter(`Invalid value ${requested} for cpuset mems: ${messageOf(e)}`);
  }
  if ([...wanted].some((m) => !available.has(m))) {
    throw invalidParameter(
      `Requested memory nodes are not available - requested ${requested}, available: ${availableText}`,
    );
  }
}

/** A cgroup CPU list (`0-3,5`), as moby's parsers.ParseUintList reads it; numbers above `max` refused. */
function parseCpuList(list: string, max = 0): Set<number> {
  const out = new Set<number>();
  if (list === '') return out;
  const invalid = () => new Error(`invalid format: ${list}`);
  const int = (s: string) => {
    if (!/^[+-]?\d+$/.test(s)) throw invalid();
    return Number(s);
  };
  for (const part of list.split(',')) {
    const dash = part.indexOf('-');
    const [lo, hi] = dash < 0 ? [int(part), int(part)] : [int(part.slice(0, dash)), int(part.slice(dash + 1))];
    if (hi < lo) throw invalid();
    if (max !== 0 && hi > max) throw new Error(`value of out range, maximum is ${max}`);
    for (let c = lo; c <= hi; c++) out.add(c);
  }
  return out;
}

let available: { text: string; cpus: Set<number> } | undefined;

/** The CPUs containers may use: the root cgroup's cpuset (v2, then v1), else those online. Read once. */
function availableCpus(): { text: string; cpus: Set<number> } {
  if (!available) {
    const files = [
      '/sys/fs/cgroup/cpuset.cpus.effective',
      '/sys/fs/cgroup/cpuset/cpuset.cpus',
      '/sys/devices/system/cpu/online',
    ];
    let text = `0-${os.availableParallelism() - 1}`;
    for (const f of files) {
      try {
        text = readFileSync(f, 'utf8').trim();
        break;
      } catch {
        // not this hierarchy
      }
    }
    available = { text, cpus: parseCpuList(text) };
  }
  return available;
}

/**
 * OomScoreAdj: dockerd's range, and (berth's own check; runc would fail at
 * start with "can't get final child's PID from pipe") a value below berthd's
 * own needs CAP_SYS_RESOURCE, which not every host hands berthd.
 */
export function checkOomScoreAdj(value: number): void {
  if (value < -1000 || value > 1000) {
    throw invalidParameter(`Invalid value ${value}, range for oom score adj is [-1000, 1000]`);
  }
  const own = Number(readFileSync('/proc/self/oom_score_adj', 'utf8').trim());
  if (value < own && !canRaiseLimits()) {
    throw invalidParameter(
      `OomScoreAdj ${value} is below berthd's own (${own}): lowering it needs CAP_SYS_RESOURCE, which berthd does not have here`,
    );
  }
}
