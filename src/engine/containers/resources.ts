// A create's resource limits, checked as dockerd checks them
// (verifyPlatformContainerResources): a limit that runc or the kernel would
// refuse at start, or that would quietly not apply, is refused at create.
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { invalidParameter, messageOf } from '../../errors.js';
import { cgroupVersion } from '../os/kernel.js';
import { canRaiseLimits } from './capabilities.js';
import type { Given, HostConfigBody } from './config.js';
import { checkRealtime } from './realtime.js';

/** dockerd's floor for a memory limit, room for a container's own start-up (moby linuxMinMemory). */
const MIN_MEMORY = 6 * 1024 * 1024;
/** The highest CPU number a cpuset may name, unless the host has higher ones (moby's defaultMaxCPUs). */
const MAX_CPU = 8192;

/** dockerd's checks of a create's or an update's limits (an update may give a swap limit alone). */
export function checkResources(
  h: Pick<
    Given<HostConfigBody>,
    'Memory' | 'MemorySwap' | 'NanoCpus' | 'CpusetCpus' | 'CpuRealtimePeriod' | 'CpuRealtimeRuntime' | 'OomScoreAdj'
  >,
  o: { update?: boolean } = {},
): void {
  const memory = h.Memory ?? 0;
  const swap = h.MemorySwap ?? 0;
  // A limit below 6 MB (or negative) would otherwise run unlimited.
  if (memory !== 0 && memory < MIN_MEMORY) throw invalidParameter('Minimum memory limit allowed is 6MB');
  if (memory > 0 && swap > 0 && swap < memory) {
    throw invalidParameter('Minimum memoryswap limit should be larger than memory limit, see usage');
  }
  if (memory === 0 && swap > 0 && !o.update) {
    throw invalidParameter('You should always set the Memory limit when using Memoryswap limit, see usage');
  }
  const nanoCpus = h.NanoCpus ?? 0;
  const cpus = os.availableParallelism();
  if (nanoCpus < 0 || nanoCpus > cpus * 1e9) {
    throw invalidParameter(`Range of CPUs is from 0.01 to ${cpus}.00, as there are only ${cpus} CPUs available`);
  }
  if (h.CpusetCpus) checkCpuset(h.CpusetCpus);
  checkRealtime(h);
  if (h.OomScoreAdj) checkOomScoreAdj(h.OomScoreAdj);
}

/**
 * MemorySwappiness as dockerd keeps it (fixMemorySwappiness, then
 * verifyPlatformContainerResources): -1, the docker CLI's "not set", is null;
 * a cgroup v2 host has no swappiness, so a value is dropped with dockerd's
 * warning (it is not applied, and the answer says so); else 0 to 100.
 */
export function memorySwappiness(value: number | undefined, warnings: string[]): number | null {
  if (value === undefined || value === -1) return null;
  if (cgroupVersion() === '2') {
    warnings.push(
      'Your kernel does not support memory swappiness capabilities or the cgroup is not mounted. Memory swappiness discarded.',
    );
    return null;
  }
  if (value < 0 || value > 100) {
    throw invalidParameter(`Invalid value: ${value}, valid memory swappiness range is 0-100`);
  }
  return value;
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
