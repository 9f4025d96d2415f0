// HostConfig.Ulimits: the process's resource limits, checked at create as
// dockerd checks them (a name it knows, soft under hard) and, berth's own
// check, within the host's hard limits: raising one needs CAP_SYS_RESOURCE,
// which not every host hands berthd (runc would fail at start, opaquely).
import { readFileSync } from 'node:fs';
import { invalidParameter } from '../../../errors.js';
import { canRaiseLimits } from './capabilities.js';
import type { OciRlimit } from './oci.js';

/** Docker's names, and the rows of /proc/self/limits that hold the host's limits. */
const LIMITS: Record<string, string> = {
  as: 'Max address space',
  core: 'Max core file size',
  cpu: 'Max cpu time',
  data: 'Max data size',
  fsize: 'Max file size',
  locks: 'Max file locks',
  memlock: 'Max locked memory',
  msgqueue: 'Max msgqueue size',
  nice: 'Max nice priority',
  nofile: 'Max open files',
  nproc: 'Max processes',
  rss: 'Max resident set',
  rtprio: 'Max realtime priority',
  rttime: 'Max realtime timeout',
  sigpending: 'Max pending signals',
  stack: 'Max stack size',
};

export interface Ulimit {
  Name?: string | null;
  Soft?: number | null;
  Hard?: number | null;
}

let hostLimits: string | undefined;

/**
 * The host's hard limit for a Docker name (Infinity when unlimited or not
 * found), as berthd has it: /proc/self/limits, read once (Node has no getrlimit).
 */
export function hostHardLimit(name: string): number {
  hostLimits ??= readFileSync('/proc/self/limits', 'utf8');
  const row = LIMITS[name];
  const line = row === undefined ? undefined : hostLimits.split('\n').find((l) => l.startsWith(row));
  const hard = line?.slice(row!.length).trim().split(/\s+/)[1];
  return hard === undefined || hard === 'unlimited' ? Number.POSITIVE_INFINITY : Number(hard);
}

/** Refuses a Ulimits entry runc could not apply, in dockerd's words where dockerd has them. */
export function checkUlimits(ulimits: readonly Ulimit[]): void {
  for (const u of ulimits) {
    const name = u.Name ?? '';
    if (!(name in LIMITS)) throw invalidParameter(`invalid ulimit type: ${name}`);
    const soft = u.Soft ?? 0;
    const hard = u.Hard ?? 0;
    if (soft > hard)
      throw invalidParameter(`ulimit soft limit must be less than or equal to hard limit: ${soft} > ${hard}`);
    const host = hostHardLimit(name);
    if (hard > host && !canRaiseLimits()) {
      throw invalidParameter(
        `ulimit ${name}: hard limit ${hard} is above this host's (${host}); raising it needs CAP_SYS_RESOURCE, which berthd does not have here`,
      );
    }
  }
}

/** The spec's rlimits: the defaults, each replaced by a Ulimits entry of the same type. */
export function rlimits(defaults: readonly OciRlimit[], ulimits: readonly Ulimit[]): OciRlimit[] {
  const out = new Map(defaults.map((r) => [r.type, r]));
  for (const u of ulimits) {
    const type = `RLIMIT_${(u.Name ?? '').toUpperCase()}`;
    out.set(type, { type, soft: u.Soft ?? 0, hard: u.Hard ?? 0 });
  }
  return [...out.values()];
}
