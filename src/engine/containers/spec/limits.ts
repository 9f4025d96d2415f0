// A container's cgroup limits as runc takes them: the spec's
// linux.resources at start (less the devices rules, spec.ts's), and what
// `runc update` changes of a running container (moby daemon/oci_linux.go
// WithResources, daemon/update_linux.go). Values were checked, and those the
// host cannot apply discarded, at create or update (resources.ts); a blkio
// device is looked up on the host at each start, as dockerd does.
import { statSync } from 'node:fs';
import { invalidParameter, messageOf } from '../../../errors.js';
import type { HostConfig } from '../config.js';
import { major, minor } from './devices.js';
import type { OciResources, OciResourcesUpdate, OciThrottleDevice } from './oci.js';

/**
 * The HostConfig fields the limits are made of, as Docker names and means
 * them; absent means Docker's default. Memory: bytes, 0 unlimited.
 * MemorySwap: memory+swap, -1 unlimited, 0 twice Memory. MemorySwappiness:
 * 0-100 (cgroup v1), null the kernel's. PidsLimit: 0 or negative unlimited.
 * NanoCpus: a CFS quota over a 100 ms period; CpuPeriod and CpuQuota set
 * either (create and update refuse them with NanoCpus).
 */
export type LimitsInput = Partial<
  Pick<
    HostConfig,
    | 'Memory'
    | 'MemorySwap'
    | 'MemorySwappiness'
    | 'MemoryReservation'
    | 'KernelMemoryTCP'
    | 'OomKillDisable'
    | 'NanoCpus'
    | 'CpuShares'
    | 'CpuPeriod'
    | 'CpuQuota'
    | 'CpusetCpus'
    | 'CpusetMems'
    | 'CpuRealtimePeriod'
    | 'CpuRealtimeRuntime'
    | 'PidsLimit'
    | 'BlkioWeight'
    | 'BlkioWeightDevice'
    | 'BlkioDeviceReadBps'
    | 'BlkioDeviceWriteBps'
    | 'BlkioDeviceReadIOps'
    | 'BlkioDeviceWriteIOps'
  >
>;

/** The CFS period NanoCpus is a quota of, µs. */
const CPU_PERIOD = 100_000;

/** The spec's limits (linux.resources without its devices rules). */
export function specLimits(h: LimitsInput): Omit<OciResources, 'devices'> {
  const out: Omit<OciResources, 'devices'> = {};
  const memory = memoryLimits(h, true);
  if (memory) out.memory = memory;
  const cpu = cpuLimits(h);
  if (cpu) out.cpu = cpu;
  if (h.PidsLimit && h.PidsLimit > 0) out.pids = { limit: h.PidsLimit };
  const blockIO = blkioLimits(h);
  if (blockIO) out.blockIO = blockIO;
  return out;
}

/**
 * The limits `runc update` sets on a running container, from its updated
 * HostConfig: each one an update may change (dockerd's
 * toContainerdResources), with "unlimited" spelled out where a limit is
 * lifted (runc keeps what it is not told).
 */
export function updatedResources(h: LimitsInput): OciResourcesUpdate {
  const out: OciResourcesUpdate = {};
  const memory = memoryLimits(h, false);
  if (memory) out.memory = memory;
  const cpu = cpuLimits(h);
  if (cpu) out.cpu = cpu;
  // moby's getPidsLimit: runc needs -1 to lift a limit set before.
  if (h.PidsLimit !== undefined && h.PidsLimit !== null) out.pids = { limit: h.PidsLimit > 0 ? h.PidsLimit : -1 };
  if (h.BlkioWeight) out.blockIO = { weight: h.BlkioWeight };
  return out;
}

/** Memory limits; the OOM switch and the TCP buffers' limit only at start (dockerd does not update them). */
function memoryLimits(h: LimitsInput, atStart: boolean): OciResources['memory'] {
  const m: NonNullable<OciResources['memory']> = {};
  const memory = h.Memory ?? 0;
  if (memory > 0) {
    m.limit = memory;
    m.swap = swapLimit(memory, h.MemorySwap);
  }
  if (h.MemoryReservation && h.MemoryReservation > 0) m.reservation = h.MemoryReservation;
  if (h.MemorySwappiness !== undefined && h.MemorySwappiness !== null) m.swappiness = h.MemorySwappiness;
  if (atStart && h.KernelMemoryTCP) m.kernelTCP = h.KernelMemoryTCP;
  if (atStart && h.OomKillDisable) m.disableOOMKiller = true;
  return Object.keys(m).length ? m : undefined;
}

/** A swap below the memory limit is refused at create and update; 0 (containers made before berth stored dockerd's default) is twice the memory. */
const swapLimit = (memory: number, memorySwap?: number) =>
  memorySwap === -1 ? -1 : memorySwap && memorySwap > 0 ? memorySwap : memory * 2;

function cpuLimits(h: LimitsInput): OciResources['cpu'] {
  const cpu: NonNullable<OciResources['cpu']> = {};
  if (h.CpuShares && h.CpuShares > 0) cpu.shares = h.CpuShares;
  if (h.NanoCpus && h.NanoCpus > 0) {
    cpu.period = CPU_PERIOD;
    cpu.quota = Math.round((h.NanoCpus * CPU_PERIOD) / 1e9);
  }
  if (h.CpuPeriod) cpu.period = h.CpuPeriod;
  if (h.CpuQuota) cpu.quota = h.CpuQuota;
  if (h.CpusetCpus) cpu.cpus = h.CpusetCpus;
  if (h.CpusetMems) cpu.mems = h.CpusetMems;
  if (h.CpuRealtimePeriod) cpu.realtimePeriod = h.CpuRealtimePeriod;
  if (h.CpuRealtimeRuntime) cpu.realtimeRuntime = h.CpuRealtimeRuntime;
  return Object.keys(cpu).length ? cpu : undefined;
}

function blkioLimits(h: LimitsInput): OciResources['blockIO'] {
  const b: NonNullable<OciResources['blockIO']> = {};
  if (h.BlkioWeight) b.weight = h.BlkioWeight;
  if (h.BlkioWeightDevice?.length) {
    b.weightDevice = h.BlkioWeightDevice.map((d) => ({ ...blockDevice(d.Path), weight: d.Weight }));
  }
  const throttles = [
    ['throttleReadBpsDevice', h.BlkioDeviceReadBps],
    ['throttleWriteBpsDevice', h.BlkioDeviceWriteBps],
    ['throttleReadIOPSDevice', h.BlkioDeviceReadIOps],
    ['throttleWriteIOPSDevice', h.BlkioDeviceWriteIOps],
  ] as const;
  for (const [key, devices] of throttles) {
    if (devices?.length) b[key] = devices.map((d): OciThrottleDevice => ({ ...blockDevice(d.Path), rate: d.Rate }));
  }
  return Object.keys(b).length ? b : undefined;
}

/** The major and minor numbers of a device on the host, with dockerd's words (a Go PathError) when it is not there. */
function blockDevice(file: string): { major: number; minor: number } {
  try {
    const st = statSync(file);
    return { major: major(st.rdev), minor: minor(st.rdev) };
  } catch (e) {
    const why = (e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file or directory' : messageOf(e);
    throw invalidParameter(`stat ${file}: ${why}`);
  }
}
