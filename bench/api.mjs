// API request latency on berthd alone, for comparing builds (A/B) on a shared
// machine: each berthd gets a finished container that printed 100 lines and
// `containers` created ones, then the requests below are sent to each daemon
// in turn, round after round, so that whatever else loads the machine weighs
// on every build alike:
//   - GET /_ping
//   - GET /containers/{id}/logs?stdout=1&stderr=1
//   - GET /containers/json (docker ps: none runs)
//   - GET /containers/json?all=1
// Beside the wall-clock medians it prints each daemon's CPU time per request (its
// main thread's, from /proc), which the machine's load disturbs far less.
//
// Usage: node bench/api.mjs [rounds=50] [containers=1000] [launcher ...]
//   launchers: bin/berthd.cjs of other builds (default: this work tree's build).
//   BERTH_BENCH_PROF=dir: run each berthd under `node --cpu-prof` (a sample each 100 µs) into dir/<n>/, and write
//   dir/requests.json: each request's span (monotonic µs, the profile's clock), to
//   tell its samples from the set-up's.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { busyboxImage } from '../fixtures/images.mjs';
import {
  buildSnapshot,
  clamp,
  createContainer,
  loadImage,
  mapLimit,
  now,
  runBench,
  startBerthd,
  startContainer,
  stats,
} from './lib.mjs';

const ROUNDS = clamp(process.argv[2], 1, 1000, 50);
const CONTAINERS = clamp(process.argv[3], 0, 5000, 1000);
const BINS = process.argv.slice(4);
const LIST_EVERY = 5; // the list is long next to the others: one round in LIST_EVERY
const WARMUP = 5;

const load = () =>
  os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

/**
 * CPU time of a process's main thread (its event loop: where a request's work is), in ms:
 * the scheduler's own count in nanoseconds, where /proc/<pid>/stat counts in 10 ms ticks.
 */
function cpuMs(pid) {
  return Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;
}

const REQUESTS = [
  { name: 'GET /_ping', path: () => '/_ping', every: 1, check: (r) => r.text === 'OK' },
  {
    name: 'GET /containers/{id}/logs?stdout=1&stderr=1 (100 lines)',
    path: (d) => `/containers/${d.logId}/logs?stdout=1&stderr=1`,
    every: 1,
    check: (r) => r.body.length === 8 * 100 + 292, // one frame per line
  },
  {
    name: `GET /containers/json (none of the ${CONTAINERS + 1} runs)`,
    path: () => '/containers/json',
    every: 1,
    check: (r) => r.json?.length === 0,
  },
  {
    name: `GET /containers/json?all=1 (${CONTAINERS + 1} containers)`,
    path: () => '/containers/json?all=1',
    every: LIST_EVERY,
    check: (r) => r.json?.length === CONTAINERS + 1,
  },
];

await runBench(async () => {
  const bins = BINS.length ? BINS.map((b) => path.resolve(b)) : [buildSnapshot()];
  console.log(`load average at start: ${load()} (${os.availableParallelism()} CPUs)`);
  const busybox = await busyboxImage();
  const daemons = [];
  for (const [n, bin] of bins.entries()) {
    const prof = process.env.BERTH_BENCH_PROF;
    const d = await startBerthd({
      bin,
      nodeArgs: prof ? ['--cpu-prof', '--cpu-prof-interval=100', `--cpu-prof-dir=${path.join(prof, String(n))}`] : [],
    });
    d.name = `${String.fromCharCode(65 + n)} ${bin}`;
    await loadImage(d, busybox, 'busybox:latest');
    d.logId = await createContainer(d, { Image: 'busybox', Cmd: ['seq', '1', '100'] });
    await startContainer(d, d.logId);
    const w = await d.request('POST', `/containers/${d.logId}/wait`);
    if (w.json?.StatusCode !== 0) throw new Error(`seq exited ${w.text}`);
    const t0 = now();
    await mapLimit(
      Array.from({ length: CONTAINERS }, (_, i) => i),
      8,
      (i) => createContainer(d, { Image: 'busybox', Cmd: ['true'], Labels: { 'bench.n': String(i) } }),
    );
    console.log(`${d.name}: ${CONTAINERS} containers created in ${((now() - t0) / 1000).toFixed(1)} s`);
    daemons.push(d);
  }
  const times = REQUESTS.map(() => daemons.map(() => []));
  const cpu = REQUESTS.map(() => daemons.map(() => []));
  const spans = REQUESTS.map(() => daemons.map(() => []));
  for (let i = 0; i < ROUNDS + WARMUP; i++) {
    for (const [q, req] of REQUESTS.entries()) {
      if (i % req.every !== 0) continue;
      for (const [k, d] of daemons.entries()) {
        const c0 = cpuMs(d.pid);
        const t0 = now();
        const r = await d.request('GET', req.path(d));
        const ms = now() - t0;
        if (r.status !== 200 || !req.check(r)) throw new Error(`${d.name} ${req.name}: ${r.status} ${r.body.length} B`);
        if (i >= WARMUP) {
          times[q][k].push(ms);
          cpu[q][k].push(cpuMs(d.pid) - c0);
          spans[q][k].push([Math.round(t0 * 1000), Math.round((t0 + ms) * 1000)]);
        }
      }
    }
  }
  if (process.env.BERTH_BENCH_PROF) {
    const out = REQUESTS.map((req, q) => ({ name: req.name, spans: spans[q] }));
    mkdirSync(process.env.BERTH_BENCH_PROF, { recursive: true });
    writeFileSync(path.join(process.env.BERTH_BENCH_PROF, 'requests.json'), JSON.stringify(out));
  }
  for (const [q, req] of REQUESTS.entries()) {
    console.log(`\n== ${req.name}`);
    for (const [k, d] of daemons.entries()) {
      const s = stats(times[q][k]);
      const c = stats(cpu[q][k]);
      const ratio =
        k > 0
          ? `; ${(s.median / stats(times[q][0]).median).toFixed(2)}× A's time, ${(c.median / stats(cpu[q][0]).median).toFixed(2)}× its CPU`
          : '';
      console.log(
        `${d.name}: median ${s.median.toFixed(2)} ms (${s.min.toFixed(2)}–${s.max.toFixed(2)}, p90 ${s.p90.toFixed(2)}, n=${s.n}); main thread CPU median ${c.median.toFixed(3)} ms (${c.min.toFixed(3)}–${c.p90.toFixed(3)} p90)${ratio}`,
      );
    }
  }
  console.log(`\nload average at end: ${load()}`);
});
