// CPU real-time scheduling of containers (cgroup v1 built with RT group
// scheduling): HostConfig's CpuRealtimePeriod and CpuRealtimeRuntime checked
// as dockerd checks them, and the daemon's budget (--cpu-rt-period and
// --cpu-rt-runtime) given to the containers' parent cgroups before each start,
// as dockerd's initCPURtController does. A container's real-time runtime has to
// fit in its parent's, which the kernel starts at 0: without a budget, runc's
// write of the container's own fails at start, with the error dockerd gives.
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { invalidParameter, messageOf, systemError } from '../../../errors.js';
import { cgroupDir } from './cgroups.js';

/** The cpu controller's v1 hierarchy (also where a cpu,cpuacct one is linked from). */
const CPU_CGROUP = '/sys/fs/cgroup/cpu';

/** The daemon's budget for the containers' parent cgroups, µs; 0 leaves a value as it is. */
export interface RealtimeBudget {
  period: number;
  runtime: number;
}

/** Why the daemon options cannot be applied on this host (dockerd's validateCPURealtimeOptions), or undefined. */
export function realtimeBudgetProblem(budget: RealtimeBudget, cgroupRoot = '/sys/fs/cgroup'): string | undefined {
  if (budget.period === 0 && budget.runtime === 0) return undefined;
  if (existsSync(path.join(cgroupRoot, 'cgroup.controllers'))) {
    return 'daemon-scoped cpu-rt-period and cpu-rt-runtime are not implemented for cgroup v2';
  }
  if (!existsSync(path.join(cgroupRoot, 'cpu', 'cpu.rt_period_us'))) {
    return 'daemon-scoped cpu-rt-period and cpu-rt-runtime are not supported by the kernel';
  }
  return undefined;
}

/**
 * A create's real-time fields, as dockerd's validateResources checks them. A
 * runtime is held to the period a new cgroup gets when none is given (the
 * kernel's sched_rt_period_us), as the kernel would refuse it at start.
 */
export function checkRealtime(h: { CpuRealtimePeriod?: number; CpuRealtimeRuntime?: number }): void {
  const period = h.CpuRealtimePeriod ?? 0;
  const runtime = h.CpuRealtimeRuntime ?? 0;
  if (period === 0 && runtime === 0) return;
  if (!existsSync(path.join(CPU_CGROUP, 'cpu.rt_period_us'))) {
    throw invalidParameter('Your kernel does not support CPU real-time scheduler');
  }
  if (period < 0) throw invalidParameter(`invalid CpuRealtimePeriod ${period}: it cannot be negative`);
  if (runtime > (period || defaultPeriod())) {
    throw invalidParameter('cpu real-time runtime cannot be higher than cpu real-time period');
  }
}

/** The real-time period of a new cgroup, µs. */
function defaultPeriod(): number {
  try {
    return Number(readFileSync('/proc/sys/kernel/sched_rt_period_us', 'utf8').trim());
  } catch {
    return 1_000_000;
  }
}

/**
 * Gives every cgroup above the container's in the cpu hierarchy (runc's
 * cgroupsPath, e.g. /berth/<id> or <CgroupParent>/<id>: cgroups.ts) the
 * budget, top down, as a parent's budget bounds its children's. Those runc
 * would create are created here first, as dockerd's initCPURtController does.
 */
export async function budgetParents(budget: RealtimeBudget, cgroupsPath: string): Promise<void> {
  if (budget.period === 0 && budget.runtime === 0) return;
  const parents: string[] = [];
  const top = path.resolve(CPU_CGROUP);
  for (let p = path.dirname(cgroupDir('cpu', cgroupsPath)); p.startsWith(`${top}/`); p = path.dirname(p)) {
    parents.unshift(p);
  }
  for (const dir of parents) {
    try {
      await mkdir(dir, { recursive: true, mode: 0o755 });
      if (budget.period) await writeFile(path.join(dir, 'cpu.rt_period_us'), String(budget.period));
      if (budget.runtime) await writeFile(path.join(dir, 'cpu.rt_runtime_us'), String(budget.runtime));
    } catch (e) {
      throw systemError(`unable to init CPU RT controller: ${messageOf(e)}`);
    }
  }
}
