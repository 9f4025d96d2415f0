// `GET /containers/{id}/stats` and `/top`, read from the container's cgroups
// (v1 hierarchies, or the unified one on a pure v2 host) and the host's /proc.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import { promisify } from 'node:util';
import { invalidParameter } from '../../../errors.js';
import { cgroupDir } from '../spec/cgroups.js';

const run = promisify(execFile);

const readNum = async (p: string): Promise<number | undefined> => {
  const t = await readFile(p, 'utf8').catch(() => undefined);
  const n = t === undefined ? NaN : Number(t.trim());
  return Number.isFinite(n) ? n : undefined;
};

async function readKeyed(p: string): Promise<Record<string, number>> {
  const t = await readFile(p, 'utf8').catch(() => '');
  return Object.fromEntries(
    t
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(/\s+/))
      .map(([k, v]) => [k!, Number(v)]),
  );
}

/** Host CPU time in nanoseconds, as dockerd's system_cpu_usage. */
async function systemCpuNanos(): Promise<number> {
  return systemCpuNanosOf(await readFile('/proc/stat', 'utf8'));
}

/** Nanoseconds per clock tick: USER_HZ is 100 on Linux. */
const NANOS_PER_TICK = 1e9 / 100;

/**
 * The host's CPU time from /proc/stat's first line, in whole nanoseconds: the
 * clients decode it as an unsigned integer, and one with a fraction fails the
 * whole sample (the docker CLI's stats then prints `EOF`). Whole ticks times a
 * whole number of nanoseconds per tick, never ticks divided first, whose float
 * product misses the integer for some tick counts (203 → 2029999999.9999998).
 */
export function systemCpuNanosOf(procStat: string): number {
  const ticks = procStat
    .split('\n')[0]!
    .split(/\s+/)
    .slice(1, 8)
    .reduce((a, v) => a + Number(v), 0);
  return ticks * NANOS_PER_TICK;
}

/** `cgroupsPath` is the one given to runc (cgroups.ts), e.g. /berth/<id> or <CgroupParent>/<id>. */
export async function cgroupStats(cgroupsPath: string, id: string, name: string) {
  const memory = cgroupDir('memory', cgroupsPath);
  const cpuacct = cgroupDir('cpuacct', cgroupsPath);
  const mem = await readKeyed(`${memory}/memory.stat`);
  const usage = (await readNum(`${memory}/memory.usage_in_bytes`)) ?? 0;
  const limit = (await readNum(`${memory}/memory.limit_in_bytes`)) ?? os.totalmem();
  const percpu = ((await readFile(`${cpuacct}/cpuacct.usage_percpu`, 'utf8').catch(() => '')) || '')
    .trim()
    .split(/\s+/)
    .filter(Boolean)
    .map(Number);
  const cpuStat = await readKeyed(`${cpuacct}/cpuacct.stat`);
  const cpu = {
    cpu_usage: {
      total_usage: (await readNum(`${cpuacct}/cpuacct.usage`)) ?? 0,
      percpu_usage: percpu,
      usage_in_kernelmode: (cpuStat.system ?? 0) * NANOS_PER_TICK,
      usage_in_usermode: (cpuStat.user ?? 0) * NANOS_PER_TICK,
    },
    system_cpu_usage: await systemCpuNanos(),
    online_cpus: os.availableParallelism(),
    throttling_data: { periods: 0, throttled_periods: 0, throttled_time: 0 },
  };
  return {
    read: new Date().toISOString(),
    preread: '0001-01-01T00:00:00Z',
    pids_stats: { current: (await readNum(`${cgroupDir('pids', cgroupsPath)}/pids.current`)) ?? 0 },
    blkio_stats: {
      io_service_bytes_recursive: null,
      io_serviced_recursive: null,
      io_queue_recursive: null,
      io_service_time_recursive: null,
      io_wait_time_recursive: null,
      io_merged_recursive: null,
      io_time_recursive: null,
      sectors_recursive: null,
    },
    num_procs: 0,
    storage_stats: {},
    cpu_stats: cpu,
    precpu_stats: {
      cpu_usage: { total_usage: 0, usage_in_kernelmode: 0, usage_in_usermode: 0 },
      throttling_data: { periods: 0, throttled_periods: 0, throttled_time: 0 },
    },
    memory_stats: {
      usage,
      max_usage: (await readNum(`${memory}/memory.max_usage_in_bytes`)) ?? usage,
      stats: mem,
      limit: Math.min(limit, os.totalmem()),
    },
    name: `/${name}`,
    id,
  };
}

/** One interface's counters, as dockerd's stats `networks` has them. */
export interface NetworkStats {
  rx_bytes: number;
  rx_packets: number;
  rx_errors: number;
  rx_dropped: number;
  tx_bytes: number;
  tx_packets: number;
  tx_errors: number;
  tx_dropped: number;
}

/**
 * The interfaces of a network namespace and their counters, from /proc/net/dev
 * as a process in it sees it: `lo` left out, as dockerd lists only its
 * endpoints' interfaces. Empty when the process is gone.
 */
export async function networkStats(pid: number): Promise<Record<string, NetworkStats>> {
  const text = await readFile(`/proc/${pid}/net/dev`, 'utf8').catch(() => '');
  return parseNetDev(text);
}

/** /proc/net/dev: two header lines, then `name: rx bytes packets errs drop fifo frame compressed multicast, tx bytes packets errs drop …`. */
export function parseNetDev(text: string): Record<string, NetworkStats> {
  const out: Record<string, NetworkStats> = {};
  for (const line of text.split('\n').slice(2)) {
    const colon = line.indexOf(':');
    if (colon === -1) continue;
    const name = line.slice(0, colon).trim();
    const n = line
      .slice(colon + 1)
      .trim()
      .split(/\s+/)
      .map(Number);
    if (name === 'lo' || n.length < 16) continue;
    out[name] = {
      rx_bytes: n[0]!,
      rx_packets: n[1]!,
      rx_errors: n[2]!,
      rx_dropped: n[3]!,
      tx_bytes: n[8]!,
      tx_packets: n[9]!,
      tx_errors: n[10]!,
      tx_dropped: n[11]!,
    };
  }
  return out;
}

/** The processes of a container: `ps <args>` on the host, rows kept for the cgroup's pids. */
export async function top(cgroupsPath: string, psArgs = '-ef'): Promise<{ Titles: string[]; Processes: string[][] }> {
  if (!/^[-a-zA-Z0-9 ,=%]*$/.test(psArgs)) throw invalidParameter(`invalid ps arguments: ${psArgs}`);
  const procs = ((await readFile(`${cgroupDir('pids', cgroupsPath)}/cgroup.procs`, 'utf8').catch(() => '')) || '')
    .split('\n')
    .filter(Boolean);
  const pids = new Set(procs);
  let out: string;
  try {
    out = (await run('ps', psArgs.split(' ').filter(Boolean))).stdout;
  } catch (e) {
    throw invalidParameter(`Error running ps: ${(e as Error).message}`);
  }
  const [head = '', ...rows] = out.trimEnd().split('\n');
  const titles = head.trim().split(/\s+/);
  const pidCol = titles.indexOf('PID');
  if (pidCol === -1) throw invalidParameter(`Couldn't find PID field in ps output`);
  const processes = rows
    .map((r) => {
      const cols = r.trim().split(/\s+/);
      // The last column (the command) keeps its spaces.
      return [...cols.slice(0, titles.length - 1), cols.slice(titles.length - 1).join(' ')];
    })
    .filter((cols) => pids.has(cols[pidCol]!));
  return { Titles: titles, Processes: processes };
}
