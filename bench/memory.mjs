// Where an idle berthd's memory is: berthd alone through bench/table.mjs's
// steps (pulls of busybox and a 100 MiB image, `docker run`s, log reads) and
// its workload (bench/workload.mjs: 50 images, containers created and listed,
// 5 commits), then its memory every few seconds of idleness, taken apart:
//   - PSS from smaps_rollup, anonymous against file-backed;
//   - /proc/<pid>/smaps by mapping: glibc's main arena ([heap]), the arenas of
//     other threads (64 MiB-aligned reservations), thread stacks (behind a
//     guard page), V8's executable pages, the rest of the anonymous memory
//     (mostly V8's heap), the node binary, other files;
//   - the threads alive, by name;
//   - the main isolate's figures through bench/memory-hook.cjs (SIGUSR2):
//     V8 heap size and used, its new space, code space, external memory and
//     ArrayBuffers.
// A file-backed page's PSS is its size divided by the processes mapping it:
// other node processes on the machine (the bench's own, other daemons) share
// the node binary's pages, so the PSS of code swings with them. The summary
// also gives anonymous PSS plus file-backed RSS: the PSS on a machine where
// nothing else runs this node.
// Then the first `docker run` after idleness: its time and berthd's CPU for it.
// Several builds (launchers, or directories holding bin/berthd.cjs) are run in
// turn, round after round, to compare them on the same load.
//
// Usage: node bench/memory.mjs [rounds=1] [containers=1000] [seconds=40] [build ...]   (as root, after npm run build)
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  buildSnapshot,
  clamp,
  hookFigures,
  MEMORY_HOOK,
  cliRunner,
  now,
  pull,
  runBench,
  runInterleaved,
  sleep,
  startBerthd,
  stats,
  tag,
  tempDir,
} from './lib.mjs';
import { finishedContainer, tableRegistry, workload } from './workload.mjs';

const ROUNDS = clamp(process.argv[2], 1, 20, 1);
const CONTAINERS = clamp(process.argv[3], 1, 5000, 1000);
const SECONDS = clamp(process.argv[4], 5, 600, 40);
const BUILDS = process.argv.slice(5);
const EVERY_MS = 2000;
const MB = (kib) => (kib / 1024).toFixed(1);
const load = () =>
  os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

function launcher(build) {
  if (!build) return buildSnapshot();
  const file = build.endsWith('.cjs') ? build : path.join(build, 'bin/berthd.cjs');
  if (!existsSync(file)) throw new Error(`${file} is missing`);
  return file;
}

// ─────────────────────────────── /proc/<pid>/smaps ───────────────────────────────

const GiB64 = 64n * 1024n * 1024n;

/** Each mapping of `pid`: start, end, perms, path, and its Rss/Pss/Anonymous (KiB). */
function mappings(pid) {
  const out = [];
  let cur;
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const h = /^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (h) {
      cur = { start: BigInt(`0x${h[1]}`), end: BigInt(`0x${h[2]}`), perms: h[3], path: h[4], rss: 0, pss: 0, anon: 0 };
      out.push(cur);
      continue;
    }
    const f = /^(Rss|Pss|Anonymous):\s+(\d+) kB/.exec(line);
    if (f && cur) cur[{ Rss: 'rss', Pss: 'pss', Anonymous: 'anon' }[f[1]]] = Number(f[2]);
  }
  return out;
}

/** PSS (KiB) by kind of mapping; see the head of this file. */
function byKind(pid) {
  const maps = mappings(pid);
  const node = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0];
  const kinds = {};
  const add = (k, m) => {
    kinds[k] ??= { pss: 0, rss: 0, n: 0 };
    kinds[k].pss += m.pss;
    kinds[k].rss += m.rss;
    kinds[k].n++;
  };
  for (const [i, m] of maps.entries()) {
    if (m.pss === 0) continue;
    const prev = maps[i - 1];
    const next = maps[i + 1];
    let k;
    if (m.path === '[heap]') k = 'main arena';
    else if (m.path === '[stack]') k = 'main stack';
    else if (m.path.startsWith('[')) k = m.path;
    else if (m.path === node || m.path.endsWith('/bin/node')) k = 'node binary';
    else if (m.path.endsWith('.node')) k = 'addon';
    else if (/\.so(\.|$)/.test(m.path)) k = 'libraries';
    else if (m.path) k = 'other files';
    else if (m.perms.includes('x')) k = 'V8 code';
    else if (m.start % GiB64 === 0n && next && next.start === m.end && next.perms === '---p' && !next.path)
      k = 'thread arenas';
    else if (prev && prev.end === m.start && prev.perms === '---p' && !prev.path && prev.end - prev.start <= 65536n)
      k = 'thread stacks';
    else k = 'other anon (V8 heap…)';
    add(k, m);
  }
  return kinds;
}

function rollup(pid) {
  const text = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  const f = (name) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN);
  return { rss: f('Rss'), pss: f('Pss'), pssAnon: f('Pss_Anon'), pssFile: f('Pss_File'), anon: f('Anonymous') };
}

function threads(pid) {
  const names = {};
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    try {
      const n = readFileSync(`/proc/${pid}/task/${t}/comm`, 'utf8').trim();
      names[n] = (names[n] ?? 0) + 1;
    } catch {}
  }
  return names;
}

/** berthd's CPU time (ms, every thread's, from schedstat's nanoseconds) and minor page faults so far. */
function cpuAndFaults(pid) {
  let ns = 0;
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
    } catch {}
  }
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return { cpu: ns / 1e6, minflt: Number(f[7]) };
}

async function sample(d, file) {
  const r = rollup(d.pid);
  const kinds = byKind(d.pid);
  const th = threads(d.pid);
  const iso = await hookFigures(d, file);
  return { r, kinds, th, iso };
}

function describe(label, s) {
  const { r, kinds, th, iso } = s;
  const parts = Object.entries(kinds)
    .sort((a, b) => b[1].pss - a[1].pss)
    .filter(([, v]) => v.pss >= 256)
    .map(([k, v]) => `${k} ${MB(v.pss)}${v.rss - v.pss > 512 ? ` (RSS ${MB(v.rss)})` : ''}${v.n > 1 ? `/${v.n}` : ''}`)
    .join(', ');
  const nThreads = Object.values(th).reduce((a, b) => a + b, 0);
  const thText = Object.entries(th)
    .map(([k, v]) => `${k}×${v}`)
    .join(' ');
  let v8Text = '';
  if (iso) {
    const m = iso.memoryUsage;
    const sp = Object.fromEntries(iso.spaces.map((x) => [x.space_name, x]));
    const mib = (b) => (b / 1048576).toFixed(1);
    v8Text = `\n    V8 heap ${mib(m.heapTotal)} (used ${mib(m.heapUsed)}): new ${mib(sp.new_space?.space_size ?? 0)}, old ${mib(sp.old_space?.space_size ?? 0)}, code ${mib(sp.code_space?.space_size ?? 0)}, large ${mib((sp.large_object_space?.space_size ?? 0) + (sp.code_large_object_space?.space_size ?? 0))}; external ${mib(m.external)} (ArrayBuffers ${mib(m.arrayBuffers)}); malloced ${mib(iso.heap.malloced_memory)} (peak ${mib(iso.heap.peak_malloced_memory)}); contexts ${iso.heap.number_of_native_contexts}`;
  }
  console.log(
    `${label.padEnd(9)} PSS ${MB(r.pss)} MiB (anon ${MB(r.pssAnon)}, file ${MB(r.pssFile)}; RSS ${MB(r.rss)}, file ${MB(r.rss - r.anon)}); ${parts}; threads ${nThreads}: ${thText}${v8Text}`,
  );
}

// ─────────────────────────────────── main ───────────────────────────────────

await runBench(async () => {
  const builds = (BUILDS.length ? BUILDS : [undefined]).map((b) => ({ name: b ?? 'this tree', bin: launcher(b) }));
  console.log(`load average at start: ${load()} (${os.availableParallelism()} CPUs)`);
  const { registry, largeRef, busyboxRef } = await tableRegistry();
  const results = builds.map(() => ({
    idle: [],
    alone: [],
    after: [],
    fresh: [],
    first: [],
    firstCpu: [],
    faults: [],
  }));
  const hookDir = tempDir('berth-bench-mem-');
  for (let round = 0; round < ROUNDS; round++) {
    for (const [b, build] of builds.entries()) {
      console.log(`\n== round ${round + 1}, ${build.name} (load ${load()})`);
      const file = path.join(hookDir, `hook-${round}-${b}.json`);
      const d = await startBerthd({
        bin: build.bin,
        nodeArgs: ['--require', MEMORY_HOOK],
        env: { BERTH_MEMORY_HOOK: file },
      });
      await sleep(1000);
      const fresh = await sample(d, file);
      describe('fresh', fresh);
      // What bench/table.mjs does before its workload.
      await pull(d, busyboxRef);
      await tag(d, busyboxRef, 'busybox', 'latest');
      await pull(d, largeRef);
      const none = ['run', '--rm', '--network', 'none', 'busybox', 'true'];
      const runner = cliRunner(d, none);
      await runInterleaved('docker run --rm --network none busybox true', [{ name: 'berthd', run: runner }], 10, 2);
      const logId = await finishedContainer(d, ['seq', '1', '100']);
      for (let i = 0; i < 55; i++) await d.request('GET', `/containers/${logId}/logs?stdout=1&stderr=1`);
      const t0 = now();
      await workload(d, registry, CONTAINERS);
      const end = now();
      console.log(`workload in ${((end - t0) / 1000).toFixed(1)} s`);
      let last;
      for (let t = 0; t <= SECONDS * 1000; t += EVERY_MS) {
        await sleep(Math.max(0, end + t - now()));
        last = await sample(d, file);
        if (t === 0) results[b].after.push(last.r.pss / 1024);
        if (t === 30_000) {
          results[b].idle.push(last.r.pss / 1024);
          results[b].alone.push((last.r.pssAnon + last.r.rss - last.r.anon) / 1024);
        }
        describe(`+${(t / 1000).toFixed(0)} s`, last);
      }
      results[b].fresh.push(fresh.r.pss / 1024);
      const c0 = cpuAndFaults(d.pid);
      const ms = await runner();
      const c1 = cpuAndFaults(d.pid);
      const c2 = await runner().then(() => cpuAndFaults(d.pid));
      results[b].first.push(ms);
      results[b].firstCpu.push(c1.cpu - c0.cpu);
      results[b].faults.push(c1.minflt - c0.minflt);
      console.log(
        `first run after idleness: ${ms.toFixed(0)} ms, berthd CPU ${(c1.cpu - c0.cpu).toFixed(1)} ms, ${c1.minflt - c0.minflt} minor faults; the next run: CPU ${(c2.cpu - c1.cpu).toFixed(1)} ms, ${c2.minflt - c1.minflt} faults`,
      );
      await sleep(200);
      describe('after it', await sample(d, file));
      await d.stop();
    }
  }
  const f = (xs, digits = 1) => {
    const s = stats(xs);
    return `${s.median.toFixed(digits)} (${s.min.toFixed(digits)}–${s.max.toFixed(digits)})`;
  };
  console.log(`\n== summary: median (range) over ${ROUNDS} round(s); load now ${load()}`);
  console.log(
    '| build | fresh PSS MiB | right after | 30 s after | 30 s after, file pages unshared | first run after idle, ms | its berthd CPU, ms | its minor faults |',
  );
  console.log('|---|---|---|---|---|---|---|---|');
  for (const [b, build] of builds.entries()) {
    const x = results[b];
    console.log(
      `| ${build.name} | ${f(x.fresh)} | ${f(x.after)} | ${x.idle.length ? f(x.idle) : '—'} | ${x.alone.length ? f(x.alone) : '—'} | ${f(x.first, 0)} | ${f(x.firstCpu, 1)} | ${f(x.faults, 0)} |`,
    );
  }
});
