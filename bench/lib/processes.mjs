// Processes and their memory: by command, their monitors (conmon, containerd shims), PSS and RSS.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT, sleep, stats } from './core.mjs';

/** Pids whose /proc/<pid>/comm is `comm`. */
export function pidsByComm(comm) {
  const out = [];
  for (const name of readdirSafe('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/comm`, 'utf8').trim() === comm) out.push(Number(name));
    } catch {}
  }
  return out;
}

export function cmdline(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  } catch {
    return [];
  }
}

export function readdirSafe(dir) {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** bench/memory-hook.cjs: preloaded into berthd (node --require), it writes the isolate's figures on SIGUSR2. */
export const MEMORY_HOOK = path.join(ROOT, 'bench/memory-hook.cjs');

/** The memory hook's figures from berthd `d` writing to `file`: signals it and waits for a fresh file. */
export async function hookFigures(d, file) {
  const before = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')).n : 0;
  process.kill(d.pid, 'SIGUSR2');
  for (let i = 0; i < 200; i++) {
    await sleep(5);
    try {
      const x = JSON.parse(readFileSync(file, 'utf8'));
      if (x.n > before) return x;
    } catch {}
  }
  return undefined;
}

/** Monitor processes of a daemon's containers (conmon for berthd, containerd-shim-runc-v2 for dockerd), by their command line naming the daemon's directory. */
export function monitorsOf(d) {
  // containerd-shim-runc-v2's comm is cut to 15 characters.
  const comm = d.kind === 'berthd' ? 'conmon' : 'containerd-shim';
  return { comm, pids: pidsByComm(comm).filter((pid) => cmdline(pid).some((a) => a.includes(d.dir))) };
}

/** The daemon and its helpers that are not per container (dockerd's own containerd). */
export function daemonPids(d) {
  if (d.kind !== 'dockerd') return [d.pid];
  return [d.pid, ...pidsByComm('containerd').filter((pid) => cmdline(pid).some((a) => a.includes(d.dir)))];
}

/** VmRSS, Pss and its anonymous part Pss_Anon (from smaps_rollup), in KiB. */
export function memoryOf(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rss = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? NaN);
  let pss = NaN;
  let pssAnon = NaN;
  try {
    const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    pss = Number(/^Pss:\s+(\d+) kB/m.exec(rollup)?.[1] ?? NaN);
    pssAnon = Number(/^Pss_Anon:\s+(\d+) kB/m.exec(rollup)?.[1] ?? NaN);
  } catch {}
  return { rss, pss, pssAnon };
}

/** RSS of a process and all its descendants (KiB), via /proc/<pid>/task/*\/children. */
export function treeRss(pid) {
  let total = 0;
  const seen = new Set();
  const walk = (p) => {
    if (seen.has(p)) return;
    seen.add(p);
    try {
      total += memoryOf(p).rss;
    } catch {
      return;
    }
    for (const t of readdirSafe(`/proc/${p}/task`)) {
      try {
        for (const c of readFileSync(`/proc/${p}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean))
          walk(Number(c));
      } catch {}
    }
  };
  walk(pid);
  return total;
}

/**
 * Bursts of `perBurst` containers started at once on each daemon in turn, `rounds`
 * rounds after one warm-up; burst(d, k) resolves with the burst's ms. Prints and
 * returns each daemon's median and its rate in containers a second.
 */
export async function burstRates(daemons, rounds, perBurst, burst) {
  const times = daemons.map(() => []);
  for (let i = 0; i < rounds + 1; i++) {
    for (const [k, d] of daemons.entries()) {
      const ms = await burst(d, k);
      if (i > 0) times[k].push(ms);
    }
  }
  const out = {};
  for (const [k, d] of daemons.entries()) {
    const s = stats(times[k]);
    out[d.kind] = { ...s, rate: (perBurst * 1000) / s.median };
    console.log(
      `${d.kind.padEnd(8)} wall median ${s.median.toFixed(0)} ms (min ${s.min.toFixed(0)}, max ${s.max.toFixed(0)}, n=${s.n}): ${out[d.kind].rate.toFixed(1)} containers/s`,
    );
  }
  return out;
}
