// Containers, side by side in one run: berthd, dockerd (Debian docker.io, when
// installed) and the floor (runc alone).
//   (a) `docker run --rm busybox true` through the docker CLI (DOCKER_HOST) on
//       berthd and on dockerd, and `runc run` of the same busybox rootfs with
//       a plain spec: median/p90. The three are interleaved run by run, so a
//       busy machine weighs on each alike.
//   (b) memory per container: `sleep 600` containers, the RSS and PSS of their
//       monitors (conmon for berthd, containerd-shim-runc-v2 for dockerd), and
//       how much each daemon itself grew.
//   (c) `GET /containers/json?all=1` latency with N created (not started)
//       containers on each daemon.
//
// Usage: node bench/containers.mjs [runs=20] [sleepers=20] [listed=1000]
import { spawnSync } from 'node:child_process';
import { busyboxImage, pushImage } from '../fixtures/images.mjs';
import {
  cliRunner,
  createContainer,
  daemonPids,
  fmtMs,
  mapLimit,
  memoryOf,
  monitorsOf,
  now,
  pull,
  ratio,
  removeAllContainers,
  runBench,
  runcFloor,
  runInterleaved,
  startBerthd,
  startContainer,
  startDockerd,
  startRegistry,
  stats,
  tag,
  which,
  clamp,
} from './lib.mjs';

const RUNS = clamp(process.argv[2], 1, 200, 20);
const SLEEPERS = clamp(process.argv[3], 1, 100, 20);
const LISTED = clamp(process.argv[4], 1, 5000, 1000);
const LIST_SAMPLES = 20;
const WARMUP = 2;

// ─────────────────────────────── (b) memory ───────────────────────────────

/** RSS of the daemon and of its helpers that are not per container (dockerd's containerd). */
function daemonRss(d) {
  return daemonPids(d).reduce((a, pid) => a + memoryOf(pid).rss, 0);
}

async function memory(d) {
  const before = daemonRss(d);
  const ids = [];
  for (let i = 0; i < SLEEPERS; i++) {
    const id = await createContainer(d, { Image: 'busybox', Cmd: ['sleep', '600'] });
    await startContainer(d, id);
    ids.push(id);
  }
  const { comm, pids } = monitorsOf(d);
  await new Promise((r) => setTimeout(r, 1000)); // let the monitors settle
  const mem = pids.map(memoryOf);
  const rss = mem.reduce((a, m) => a + m.rss, 0);
  const pss = mem.reduce((a, m) => a + m.pss, 0);
  const grew = daemonRss(d) - before;
  const res = {
    comm,
    processes: pids.length,
    rssPer: rss / SLEEPERS,
    pssPer: pss / SLEEPERS,
    daemonGrowthPer: grew / SLEEPERS,
  };
  console.log(
    `${d.kind.padEnd(8)} ${SLEEPERS} × sleep 600: ${pids.length} ${comm} processes, ` +
      `per container RSS ${(res.rssPer / 1024).toFixed(2)} MiB, PSS ${(res.pssPer / 1024).toFixed(2)} MiB; ` +
      `daemon${d.kind === 'dockerd' ? '+containerd' : ''} RSS grew ${(grew / 1024).toFixed(1)} MiB (${(res.daemonGrowthPer / 1024).toFixed(2)} MiB per container)`,
  );
  await removeAllContainers(d);
  return res;
}

// ─────────────────────────────── (c) list latency ───────────────────────────────

async function fill(d) {
  const t0 = now();
  await mapLimit(
    Array.from({ length: LISTED }, (_, i) => i),
    8,
    (i) => createContainer(d, { Image: 'busybox', Cmd: ['true'], Labels: { 'bench.n': String(i) } }),
  );
  console.log(`${d.kind.padEnd(8)} created ${LISTED} containers in ${((now() - t0) / 1000).toFixed(1)} s`);
}

async function listLatency(daemons) {
  console.log(
    `\n== (c) GET /containers/json?all=1 with ${LISTED} created containers: ${LIST_SAMPLES} requests each (after ${WARMUP} warm-up), interleaved`,
  );
  for (const d of daemons) await fill(d);
  const times = daemons.map(() => []);
  for (let i = 0; i < WARMUP + LIST_SAMPLES; i++) {
    for (const [k, d] of daemons.entries()) {
      const t0 = now();
      const r = await d.request('GET', '/containers/json?all=1');
      const ms = now() - t0;
      if (r.status !== 200 || r.json.length < LISTED)
        throw new Error(`${d.kind} list: ${r.status}, ${r.json?.length} entries`);
      if (i >= WARMUP) times[k].push(ms);
      if (i === 0)
        console.log(`${d.kind.padEnd(8)} answer: ${r.json.length} entries, ${(r.body.length / 1024).toFixed(0)} KiB`);
    }
  }
  const out = {};
  for (const [k, d] of daemons.entries()) {
    out[d.kind] = stats(times[k]);
    console.log(`${d.kind.padEnd(8)} list: ${fmtMs(out[d.kind])}`);
  }
  for (const d of daemons) {
    const t0 = now();
    await removeAllContainers(d);
    console.log(`${d.kind.padEnd(8)} removed them in ${((now() - t0) / 1000).toFixed(1)} s`);
  }
  return out;
}

// ─────────────────────────────────── main ───────────────────────────────────

await runBench(async () => {
  const withDockerd = Boolean(which('dockerd'));
  const registry = await startRegistry();
  const image = await busyboxImage();
  await pushImage(registry.url, 'busybox', 'latest', image);
  const ref = `${registry.host}/busybox:latest`;

  const daemons = [await startBerthd()];
  if (withDockerd) daemons.push(await startDockerd());
  else console.log('dockerd not installed: run bench/run.sh --with-dockerd to compare');
  for (const d of daemons) {
    await pull(d, ref);
    await tag(d, ref, 'busybox', 'latest'); // `docker run busybox` finds it locally on both
  }

  const floor = await runcFloor(image.layers[0]);
  const cli = which('docker');
  if (cli) console.log(`docker CLI: ${cli}, ${spawnSync(cli, ['--version'], { encoding: 'utf8' }).stdout.trim()}`);
  else console.log('no docker CLI on PATH (bench/run.sh --with-dockerd installs one): (a) times runc alone');
  const targets = [
    ...(cli ? daemons.map((d) => ({ name: `${d.kind} (docker CLI)`, run: cliRunner(d) })) : []),
    { name: 'runc run (floor)', run: floor },
  ];
  const run = await runInterleaved('(a) docker run --rm busybox true', targets, RUNS, WARMUP);
  // Issue 6: the same through attach with output to carry.
  const echo = cli
    ? await runInterleaved(
        '(a2) docker run --rm busybox echo hi (output through attach)',
        daemons.map((d) => ({
          name: `${d.kind} (docker CLI)`,
          run: cliRunner(d, ['run', '--rm', 'busybox', 'echo', 'hi'], 'hi\n'),
        })),
        RUNS,
        WARMUP,
      )
    : {};

  console.log(`\n== (b) memory per running container`);
  const mem = [];
  for (const d of daemons) mem.push(await memory(d));

  const list = await listLatency(daemons);

  console.log('\n== summary');
  const b = run['berthd (docker CLI)'];
  const f = run['runc run (floor)'];
  if (b)
    console.log(
      `run latency: berthd ${b.median.toFixed(0)} ms median, runc floor ${f.median.toFixed(0)} ms (berthd overhead over the floor ${(b.median - f.median).toFixed(0)} ms)`,
    );
  if (withDockerd) {
    const d = run['dockerd (docker CLI)'];
    if (b && d)
      console.log(
        `run latency ratio berthd/dockerd (median): ${ratio(b.median, d.median, 0.5)}; p90 ${(b.p90 / d.p90).toFixed(2)}×`,
      );
    const eb = echo['berthd (docker CLI)'];
    const ed = echo['dockerd (docker CLI)'];
    if (eb && ed)
      console.log(
        `echo-through-attach latency ratio berthd/dockerd (median): ${ratio(eb.median, ed.median, 0.5)}; p90 ${(eb.p90 / ed.p90).toFixed(2)}×`,
      );
    console.log(
      `per-container monitor RSS ratio conmon/containerd-shim: ${(mem[0].rssPer / mem[1].rssPer).toFixed(2)}× (PSS ${(mem[0].pssPer / mem[1].pssPer).toFixed(2)}×)`,
    );
    console.log(
      `list latency ratio berthd/dockerd (median): ${ratio(list.berthd.median, list.dockerd.median, 0.5)}; p90 ${(list.berthd.p90 / list.dockerd.p90).toFixed(2)}×`,
    );
  }
});
