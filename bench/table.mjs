// Issue 18's table in one run, berthd beside dockerd (Debian docker.io, with
// its own containerd) after the same workload on each:
//   - cold pull of a ~105 MB 4-layer image (fresh daemons, `rounds` each);
//   - `docker run --rm --network none busybox true` through the docker CLI;
//   - API logs (GET /containers/{id}/logs) of a finished container;
//   - the workload: 50 images pulled, 1,000 containers created and listed,
//     commits; then 30 s of idleness and the daemons' PSS (smaps_rollup):
//     berthd's, and dockerd's plus its containerd's;
//   - start → first /_ping with 1,000 containers and 100 images recorded
//     (50 more images pulled), each daemon restarted `rounds` times.
//   - `docker run --rm busybox true` on each daemon's default bridge (dockerd
//     in a network namespace of its own, berthd with a bridge of its own, as
//     bench/network.mjs runs them);
//
// Usage: node bench/table.mjs [rounds=2] [runs=15] [containers=1000]   (as root, after npm run build)
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { busyboxImage } from '../fixtures/images.mjs';
import {
  berthdWithNetworks,
  clamp,
  cliRunner,
  daemonPids,
  dockerdWithNetworks,
  loadImage,
  memoryOf,
  now,
  pull,
  request,
  runBench,
  runInterleaved,
  sleep,
  startBerthd,
  startDockerd,
  stats,
  tag,
  which,
} from './lib.mjs';
import { COMMITS, finishedContainer, IMAGES, pullImages, tableRegistry, workload } from './workload.mjs';

const ROUNDS = clamp(process.argv[2], 1, 20, 2);
const RUNS = clamp(process.argv[3], 1, 200, 15);
const CONTAINERS = clamp(process.argv[4], 1, 5000, 1000);
const IDLE_MS = 30_000;
const LOG_SAMPLES = 50;

const load = () =>
  os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
const rows = [];
const row = (figure, dockerd, berthd, ratioText, target) => rows.push({ figure, dockerd, berthd, ratioText, target });

const pssMiB = (d) => daemonPids(d).reduce((a, pid) => a + memoryOf(pid).pss, 0) / 1024;

// ─────────────────────────────── start → first /_ping ───────────────────────────────

async function restartTimes(d) {
  const times = [];
  for (let i = 0; i < ROUNDS + 1; i++) {
    const exited = new Promise((r) => d.proc.once('exit', r));
    d.proc.kill('SIGTERM');
    await exited;
    const t0 = now();
    const p =
      d.kind === 'berthd'
        ? spawn(process.execPath, d.argv, { stdio: ['ignore', 'ignore', 'pipe'] })
        : spawn(d.file, d.argv, { stdio: ['ignore', 'ignore', 'pipe'] });
    p.stderr.resume();
    for (;;) {
      if (p.exitCode !== null) throw new Error(`${d.kind} exited ${p.exitCode} on restart`);
      const ok = await request(d.socket, 'GET', '/_ping', { timeoutMs: 5000 }).then(
        (r) => r.status === 200,
        () => false,
      );
      if (ok) break;
      await sleep(1);
    }
    if (i > 0) times.push(now() - t0); // the first start after a stop warms the page cache
    // The handle's clean-up stops whatever process is current.
    d.proc = p;
    d.pid = p.pid;
  }
  return stats(times);
}

// ─────────────────────────────────── main ───────────────────────────────────

const fmt = (s, unit, digits = 1) =>
  `${s.median.toFixed(digits)} ${unit} (${s.min.toFixed(digits)}–${s.max.toFixed(digits)}, n=${s.n})`;

await runBench(async () => {
  if (!which('dockerd') || !which('docker'))
    throw new Error('needs dockerd and the docker CLI: bench/run.sh --with-dockerd');
  console.log(`load average at start: ${load()} (${os.availableParallelism()} CPUs)`);
  const { registry, large, largeBytes, largeRef, busyboxRef } = await tableRegistry();

  // Cold pulls on fresh daemons, alternating.
  console.log(`\n== cold pull of ${(largeBytes / 1e6).toFixed(0)} MB, ${large.layers.length} layers`);
  const rates = { berthd: [], dockerd: [] };
  for (let i = 0; i < ROUNDS; i++) {
    for (const start of [startBerthd, startDockerd]) {
      const d = await start();
      const t0 = now();
      await pull(d, largeRef);
      rates[d.kind].push(largeBytes / 1e6 / ((now() - t0) / 1000));
      await d.stop();
    }
  }
  const pullB = stats(rates.berthd);
  const pullD = stats(rates.dockerd);
  console.log(`berthd ${fmt(pullB, 'MB/s')}; dockerd ${fmt(pullD, 'MB/s')}`);

  // On the default bridge: daemons of their own, networked, stopped after.
  const bridged = [await berthdWithNetworks(randomBytes(3).toString('hex'))];
  bridged.push(await dockerdWithNetworks(randomBytes(3).toString('hex')));
  for (const d of bridged) await loadImage(d, await busyboxImage(), 'busybox:latest');
  const bridge = await runInterleaved(
    'docker run --rm busybox true on the default bridge',
    bridged.map((d) => ({ name: d.kind, run: cliRunner(d) })),
    RUNS,
    2,
  );
  for (const d of bridged) await d.stop();

  const berthd = await startBerthd();
  const dockerd = await startDockerd();
  const daemons = [berthd, dockerd];
  for (const d of daemons) {
    await pull(d, busyboxRef);
    await tag(d, busyboxRef, 'busybox', 'latest');
    await pull(d, largeRef);
  }

  const none = ['run', '--rm', '--network', 'none', 'busybox', 'true'];
  const run = await runInterleaved(
    'docker run --rm --network none busybox true',
    daemons.map((d) => ({ name: d.kind, run: cliRunner(d, none) })),
    RUNS,
    2,
  );

  console.log(`\n== GET /containers/{id}/logs?stdout=1&stderr=1 of a finished container (100 lines)`);
  const logIds = [];
  for (const d of daemons) logIds.push(await finishedContainer(d, ['seq', '1', '100']));
  const logTimes = daemons.map(() => []);
  // GET /_ping beside it: each daemon's cost of any request, which the logs' figure includes.
  const pingTimes = daemons.map(() => []);
  for (let i = 0; i < LOG_SAMPLES + 5; i++) {
    for (const [k, d] of daemons.entries()) {
      const t0 = now();
      const r = await d.request('GET', `/containers/${logIds[k]}/logs?stdout=1&stderr=1`);
      const ms = now() - t0;
      if (r.status !== 200 || r.body.length < 292) throw new Error(`${d.kind} logs: ${r.status} ${r.body.length} B`);
      const t1 = now();
      await d.request('GET', '/_ping');
      if (i >= 5) {
        logTimes[k].push(ms);
        pingTimes[k].push(now() - t1);
      }
    }
  }
  const logsB = stats(logTimes[0]);
  const logsD = stats(logTimes[1]);
  console.log(`berthd ${fmt(logsB, 'ms', 2)}; dockerd ${fmt(logsD, 'ms', 2)}`);
  console.log(
    `GET /_ping alongside: berthd ${fmt(stats(pingTimes[0]), 'ms', 2)}; dockerd ${fmt(stats(pingTimes[1]), 'ms', 2)}`,
  );

  console.log(`\n== the workload: ${IMAGES} images, ${CONTAINERS} containers created and listed, ${COMMITS} commits`);
  // Each daemon's idle clock starts at the end of its own workload.
  const ends = [];
  const after = [];
  for (const d of daemons) {
    const t0 = now();
    await workload(d, registry, CONTAINERS);
    ends.push(now());
    after.push(pssMiB(d));
    console.log(
      `${d.kind.padEnd(8)} workload in ${((now() - t0) / 1000).toFixed(1)} s; PSS right after ${after.at(-1).toFixed(1)} MiB`,
    );
  }
  const idle = [];
  for (const [k, d] of daemons.entries()) {
    await sleep(Math.max(0, ends[k] + IDLE_MS - now()));
    idle.push(pssMiB(d));
  }
  console.log(
    `PSS ${IDLE_MS / 1000} s after its workload: berthd ${idle[0].toFixed(1)} MiB, dockerd+containerd ${idle[1].toFixed(1)} MiB (load ${load()})`,
  );
  // The next request after idleness, to see that shrinking did not make it slow.
  const nextRun = [];
  for (const d of daemons) nextRun.push(await cliRunner(d, none)());
  console.log(`first run after idleness: berthd ${nextRun[0].toFixed(0)} ms, dockerd ${nextRun[1].toFixed(0)} ms`);

  console.log(`\n== start → first /_ping with ${CONTAINERS} containers and ${2 * IMAGES} images recorded`);
  for (const d of daemons) await pullImages(d, registry, IMAGES, 2 * IMAGES);
  const startB = await restartTimes(berthd);
  const startD = await restartTimes(dockerd);
  console.log(`berthd ${fmt(startB, 'ms', 0)}; dockerd ${fmt(startD, 'ms', 0)}`);

  const r = (a, b, target, better = 'lower') => {
    const x = a / b;
    const met = better === 'lower' ? x <= target : x >= target;
    return { text: `${x.toFixed(2)}×`, met: met ? 'met' : 'MISSED' };
  };
  const runR = r(run.berthd.median, run.dockerd.median, 0.4);
  const logsR = r(logsB.median, logsD.median, 1);
  const pullR = r(pullB.median, pullD.median, 1.5, 'higher');
  row(
    `daemon PSS idle ${IDLE_MS / 1000} s after the workload`,
    `${idle[1].toFixed(1)} MiB`,
    `${idle[0].toFixed(1)} MiB`,
    `${(idle[0] / idle[1]).toFixed(2)}×`,
    `≤ 64 MiB: ${idle[0] <= 64 ? 'met' : 'MISSED'}`,
  );
  row(
    'docker run --rm busybox true, no network (median)',
    `${run.dockerd.median.toFixed(0)} ms`,
    `${run.berthd.median.toFixed(0)} ms`,
    runR.text,
    `≤ 0.4×: ${runR.met}`,
  );
  const bridgeR = r(bridge.berthd.median, bridge.dockerd.median, 0.45);
  row(
    'same, on the default bridge (median)',
    `${bridge.dockerd.median.toFixed(0)} ms`,
    `${bridge.berthd.median.toFixed(0)} ms`,
    bridgeR.text,
    `≤ 0.45×: ${bridgeR.met}`,
  );
  row(
    'API logs of a finished container (median)',
    `${logsD.median.toFixed(2)} ms`,
    `${logsB.median.toFixed(2)} ms`,
    logsR.text,
    `≤ 1×: ${logsR.met}`,
  );
  row(
    `pull ${(largeBytes / 1e6).toFixed(0)} MB, ${large.layers.length} layers, cold (median)`,
    `${pullD.median.toFixed(0)} MB/s`,
    `${pullB.median.toFixed(0)} MB/s`,
    pullR.text,
    `≥ 1.5×: ${pullR.met}`,
  );
  row(
    `start → first /_ping, ${CONTAINERS} containers, ${2 * IMAGES} images (median)`,
    `${startD.median.toFixed(0)} ms`,
    `${startB.median.toFixed(0)} ms`,
    `${(startB.median / startD.median).toFixed(2)}×`,
    `≤ 300 ms: ${startB.median <= 300 ? 'met' : 'MISSED'}`,
  );
  console.log(`\n== issue 18's table (load average now ${load()}: figures under whatever else runs)`);
  console.log('| figure | dockerd | berthd | berthd/dockerd | target |');
  console.log('|---|---|---|---|---|');
  for (const x of rows) console.log(`| ${x.figure} | ${x.dockerd} | ${x.berthd} | ${x.ratioText} | ${x.target} |`);
});
