// A CI job on each daemon, berthd and (when installed) dockerd 20.10 with the
// containerd it starts, jobs alternating round by round (the order flips each
// round) so that the machine's load weighs on both alike. One job:
//   1. start: the daemon on an empty data root, to its first /_ping;
//   2. pull: `docker pull` of busybox from a loopback registry the bench starts;
//   3. runs: `runs` × `docker run --rm <image> true` through the docker CLI;
//   4. api: `calls` small requests, one connection each, in a fixed mix:
//      /_ping, /version, /containers/json?all=1, /images/json, inspect and
//      logs of a finished container that printed 20 lines (made first);
//   5. stop: SIGTERM to the daemon's exit.
// It prints the whole job's wall time, each phase's, the daemon's CPU (its own
// threads and the children it reaped) and its peak memory: PSS summed, at
// samples every SAMPLE_MS, over the daemon and what it runs beside its
// containers: for dockerd its containerd and the containerd-shim-runc-v2 of its
// containers alive at the sample, for berthd the conmons alive at the sample
// (runc and the containers' own processes are not counted on either side).
//
// Usage: node bench/ci.mjs [rounds=3] [runs=200] [calls=500]   (as root, after npm run build)
import { readFileSync } from 'node:fs';
import os from 'node:os';
import {
  buildSnapshot,
  busyboxRegistry,
  clamp,
  cliRunner,
  createContainer,
  daemonPids,
  memoryOf,
  monitorsOf,
  now,
  ratio,
  runBench,
  startBerthd,
  startContainer,
  startDockerd,
  stats,
  which,
} from './lib.mjs';

const ROUNDS = clamp(process.argv[2], 1, 50, 3);
const RUNS = clamp(process.argv[3], 1, 5000, 200);
const CALLS = clamp(process.argv[4], 6, 50_000, 500);
const SAMPLE_MS = 100;
const TARGET = 0.5;
const PHASES = ['start', 'pull', 'runs', 'api', 'stop'];

const load = () =>
  os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

/** CPU seconds of `pids` so far: their threads and the children they reaped (/proc/<pid>/stat, in ticks). */
function cpuSeconds(pids) {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
    } catch {}
  }
  return ticks / 100;
}

/** Samples the daemon's PSS (alone, and with its helpers and monitors) until stopped; keeps the peaks (KiB). */
function peakSampler(d) {
  const peak = { daemon: 0, all: 0, monitors: 0 };
  const pss = (pid) => {
    try {
      return memoryOf(pid).pss || 0;
    } catch {
      return 0; // gone between listing and reading
    }
  };
  const take = () => {
    const own = pss(d.pid);
    const helpers = daemonPids(d)
      .filter((p) => p !== d.pid)
      .reduce((a, p) => a + pss(p), 0);
    const mons = monitorsOf(d).pids;
    const all = own + helpers + mons.reduce((a, p) => a + pss(p), 0);
    peak.daemon = Math.max(peak.daemon, own);
    if (all > peak.all) Object.assign(peak, { all, monitors: mons.length });
  };
  take();
  const timer = setInterval(take, SAMPLE_MS);
  return () => {
    clearInterval(timer);
    take();
    return peak;
  };
}

/** The API phase's requests, in turn: the finished container `id` for inspect and logs. */
const apiMix = (id) => [
  ['/_ping', (r) => r.text === 'OK'],
  ['/version', (r) => !!r.json?.ApiVersion],
  ['/containers/json?all=1', (r) => Array.isArray(r.json)],
  ['/images/json', (r) => r.json?.length >= 1],
  [`/containers/${id}/json`, (r) => r.json?.State?.ExitCode === 0],
  [`/containers/${id}/logs?stdout=1&stderr=1`, (r) => r.body.length > 20 * 2],
];

async function job(kind, ref) {
  const t = {};
  const mark = (phase, t0) => {
    t[phase] = now() - t0;
    return now();
  };
  let t0 = now();
  const start = t0;
  const d = kind === 'berthd' ? await startBerthd() : await startDockerd();
  const peakOf = peakSampler(d);
  t0 = mark('start', t0);
  await cliRunner(d, ['pull', '-q', ref], `${ref}\n`)();
  t0 = mark('pull', t0);
  const run = cliRunner(d, ['run', '--rm', ref, 'true']);
  for (let i = 0; i < RUNS; i++) await run();
  t0 = mark('runs', t0);
  const id = await createContainer(d, { Image: ref, Cmd: ['seq', '1', '20'] });
  await startContainer(d, id);
  await d.request('POST', `/containers/${id}/wait`);
  const mix = apiMix(id);
  for (let i = 0; i < CALLS; i++) {
    const [p, ok] = mix[i % mix.length];
    const r = await d.request('GET', p);
    if (r.status !== 200 || !ok(r)) throw new Error(`${kind} GET ${p}: ${r.status} ${r.text.slice(0, 200)}`);
  }
  t0 = mark('api', t0);
  const cpu = cpuSeconds(daemonPids(d));
  const peak = peakOf();
  const exited = new Promise((r) => d.proc.once('exit', r));
  d.proc.kill('SIGTERM');
  await exited;
  mark('stop', t0);
  t.job = now() - start;
  await d.stop(); // removes its directories (and, for dockerd, the cgroups it left)
  const mib = (k) => (k / 1024).toFixed(1);
  console.log(
    `${kind.padEnd(8)} job ${(t.job / 1000).toFixed(2)} s: ${PHASES.map((p) => `${p} ${(t[p] / 1000).toFixed(2)}`).join(', ')} s; CPU ${cpu.toFixed(2)} s; peak PSS ${mib(peak.all)} MiB (daemon alone ${mib(peak.daemon)}; ${peak.monitors} monitors at the peak) (load ${load()})`,
  );
  return { ...t, cpu, pss: peak.all / 1024, pssDaemon: peak.daemon / 1024 };
}

await runBench(async () => {
  const kinds = ['berthd', ...(which('dockerd') ? ['dockerd'] : [])];
  console.log(
    `CI job × ${ROUNDS} on ${kinds.join(' and ')}: start, pull, ${RUNS} docker run --rm, ${CALLS} API calls, stop (load ${load()}, ${os.availableParallelism()} CPUs)`,
  );
  if (kinds.length === 1) console.log('(dockerd is not installed: berthd alone)');
  buildSnapshot(); // before any timing
  const { ref } = await busyboxRegistry();
  const results = Object.fromEntries(kinds.map((k) => [k, []]));
  for (let round = 0; round < ROUNDS; round++) {
    console.log(`\n== round ${round + 1}`);
    for (const kind of round % 2 ? [...kinds].reverse() : kinds) results[kind].push(await job(kind, ref));
  }
  const figures = [
    ['whole job, s', 'job', 1000],
    ...PHASES.map((p) => [`${p}, s`, p, 1000]),
    ['daemon CPU, s', 'cpu', 1],
    ['peak PSS with helpers, MiB', 'pss', 1],
    ['peak PSS of the daemon alone, MiB', 'pssDaemon', 1],
  ];
  const median = (kind, key, div) => stats(results[kind].map((r) => r[key] / div)).median;
  const range = (kind, key, div) => {
    const s = stats(results[kind].map((r) => r[key] / div));
    return `${s.median.toFixed(2)} (${s.min.toFixed(2)}–${s.max.toFixed(2)})`;
  };
  console.log(`\n== medians (range) over ${ROUNDS} round(s); load now ${load()}`);
  console.log(`| figure | ${kinds.join(' | ')} |${kinds.length > 1 ? ' berthd/dockerd |' : ''}`);
  console.log(`|---|${kinds.map(() => '---|').join('')}${kinds.length > 1 ? '---|' : ''}`);
  for (const [name, key, div] of figures) {
    const cells = kinds.map((k) => range(k, key, div));
    const r =
      kinds.length > 1
        ? ` ${ratio(median('berthd', key, div), median('dockerd', key, div), key === 'job' ? TARGET : undefined)} |`
        : '';
    console.log(`| ${name} | ${cells.join(' | ')} |${r}`);
  }
});
