// Pods through cri-dockerd, berthd beside dockerd in one run (issue 28):
//   (a) the time from RunPodSandbox to a running two-container pod: `crictl
//       runp`, then `crictl create` + `crictl start` of two busybox containers
//       in it, until `crictl ps` shows both running; N pods one after the
//       other, the daemons interleaved pod by pod; median/p90, and RunPodSandbox
//       alone. Each step is a crictl process, as a person at a shell would
//       drive it; the same on both sides.
//   (b) memory per pod with the N pods standing: the PSS of the daemon and its
//       monitors (berthd + conmon; dockerd + its containerd + containerd-shim-
//       runc-v2), minus the same with no pod (the lower of before the first
//       and after the last: see below), divided by N; (b2) the
//       same with only the daemon's anonymous PSS (its file pages are shared
//       with other processes of the machine, so their PSS moves with those).
//       cri-dockerd's own growth is shown beside it (the same program on both
//       sides, so not in the ratio). berthd runs with --expose-gc and the
//       bench's memory hook, which collects its heap before each sample.
// Needs cri-dockerd and crictl, not built here: CRI_DOCKERD=/path/to/cri-dockerd
// CRICTL=/path/to/crictl (v0.3.7 and v1.26.1 were used), Debian's CNI plugins
// in $CNI_BIN_DIR (default /usr/lib/cni) and dockerd (bench/run.sh --with-dockerd).
// Pods get a CNI bridge and subnet of their own per daemon (bench/cri.mjs); the
// sandbox's negative OomScoreAdj goes through a clamping proxy on both sides.
// The pause image is busybox whose shell waits for TERM; all images are built
// here and served from a loopback registry of the bench's own.
//
// Usage: CRI_DOCKERD=... CRICTL=... node bench/pods.mjs [pods=10]
import crypto from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { busyboxImage, pushImage } from '../fixtures/images.mjs';
import { criTools, startCriDockerd } from './cri.mjs';
import {
  clamp,
  daemonPids,
  fmtMs,
  hookFigures,
  MEMORY_HOOK,
  memoryOf,
  monitorsOf,
  now,
  pull,
  ratio,
  runBench,
  sleep,
  startBerthd,
  startDockerd,
  startRegistry,
  stats,
  tempDir,
  which,
} from './lib.mjs';

const PODS = clamp(process.argv[2], 1, 100, 10);
const MiB = (kib) => (kib / 1024).toFixed(2);

/** pause: PID 1 is a shell that sleeps until TERM or INT, and exits 0 on either. */
const PAUSE_CONFIG = {
  Entrypoint: ['sh', '-c', 'trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done'],
  Cmd: null,
};

async function images() {
  const registry = await startRegistry();
  await pushImage(registry.url, 'busybox', 'latest', await busyboxImage());
  await pushImage(registry.url, 'pause', 'bench', await busyboxImage({ config: PAUSE_CONFIG }));
  return { busybox: `${registry.host}/busybox:latest`, pause: `${registry.host}/pause:bench` };
}

/** A daemon with its cri-dockerd, images pulled, a bridge and a /24 of its own. */
async function side(d, refs, n) {
  await pull(d, refs.busybox);
  await pull(d, refs.pause);
  const tag = `${process.pid % 10000}${n}`;
  const cri = await startCriDockerd(d, {
    bridge: `bpod${tag}`,
    subnet: `10.${crypto.randomInt(200, 250)}.${crypto.randomInt(0, 250)}.0/24`,
    pauseImage: refs.pause,
  });
  const dir = path.join(cri.dir, 'pods');
  return { d, cri, dir, steps: { runp: [], create: [], start: [], seen: [] }, total: [], n: 0 };
}

async function ok(s, args) {
  const r = await s.cri.crictl(args);
  if (r.code !== 0)
    throw new Error(`crictl ${args.join(' ')} on ${s.d.kind}: ${r.stderr.trim()}\n${s.cri.log().slice(-2000)}`);
  return r;
}

/** One pod: runp, create + start of two containers, until both run; times go in s.steps and s.total. */
async function pod(s, refs) {
  const i = s.n++;
  const podFile = path.join(s.cri.dir, `pod-${i}.json`);
  const files = [podFile, path.join(s.cri.dir, `c1-${i}.json`), path.join(s.cri.dir, `c2-${i}.json`)];
  mkdirSync(path.join(s.dir, String(i)), { recursive: true });
  writeFileSync(
    podFile,
    JSON.stringify({
      metadata: { name: `bench-${i}`, namespace: 'bench', uid: crypto.randomUUID(), attempt: 0 },
      log_directory: path.join(s.dir, String(i)),
      linux: {},
    }),
  );
  for (const [k, file] of files.slice(1).entries())
    writeFileSync(
      file,
      JSON.stringify({
        metadata: { name: `app${k + 1}` },
        image: { image: refs.busybox },
        command: ['sh', '-c', `echo app${k + 1} up; exec sleep 3600`],
        log_path: `app${k + 1}.log`,
        linux: {},
      }),
    );
  const t = [now()];
  const podId = (await ok(s, ['runp', podFile])).stdout.trim();
  t.push(now());
  const ids = [];
  for (const file of files.slice(1)) ids.push((await ok(s, ['create', podId, file, podFile])).stdout.trim());
  t.push(now());
  for (const id of ids) await ok(s, ['start', id]);
  t.push(now());
  for (const deadline = Date.now() + 60_000; ; ) {
    const r = await ok(s, ['ps', '-p', podId, '-s', 'Running', '-q']);
    if (r.stdout.trim().split('\n').filter(Boolean).length === 2) break;
    if (Date.now() > deadline) throw new Error(`pod ${podId} on ${s.d.kind}: containers not running after 60 s`);
    await sleep(10);
  }
  t.push(now());
  for (const [k, step] of Object.keys(s.steps).entries()) s.steps[step].push(t[k + 1] - t[k]);
  s.total.push(t[4] - t[0]);
}

/**
 * PSS (KiB) of the daemon (+ containerd), its anonymous part, and the PSS of
 * its monitors; cri-dockerd's apart. The median of 5 samples 1 s apart.
 * berthd's heap is collected before each (bench/memory-hook.cjs): otherwise
 * its figure swings by tens of MiB with when V8 last collected, more than
 * the pods themselves weigh. dockerd's Go heap is taken as it is.
 */
async function pss(s) {
  const sum = (pids, k = 'pss') => pids.reduce((a, pid) => a + (memoryOf(pid)[k] || 0), 0);
  const samples = [];
  for (let i = 0; i < 5; i++) {
    if (i) await sleep(1000);
    if (s.hook) await hookFigures(s.d, s.hook); // berthd: a full collection first
    const mon = monitorsOf(s.d);
    const daemon = daemonPids(s.d);
    samples.push({
      daemon: sum(daemon),
      daemonAnon: sum(daemon, 'pssAnon'),
      monitors: sum(mon.pids),
      count: mon.pids.length,
      cri: sum([s.cri.pid]),
    });
  }
  const med = (k) => stats(samples.map((x) => x[k])).median;
  return Object.fromEntries(Object.keys(samples[0]).map((k) => [k, med(k)]));
}

/** The median time of `crictl version`: the share of each of a pod's crictl calls that is crictl itself. */
async function crictlFloor(s) {
  const times = [];
  for (let i = 0; i < 10; i++) times.push((await ok(s, ['version'])).ms);
  return stats(times).median;
}

await runBench(async () => {
  criTools();
  if (!which('dockerd')) throw new Error('dockerd is not installed (bench/run.sh --with-dockerd installs it)');
  const refs = await images();
  const hook = path.join(tempDir('berth-bench-pods-'), 'hook.json');
  const berthd = await startBerthd({
    nodeArgs: ['--expose-gc', '--require', MEMORY_HOOK],
    env: { BERTH_MEMORY_HOOK: hook, BERTH_MEMORY_HOOK_GC: '1' },
  });
  const sides = [await side(berthd, refs, 0), await side(await startDockerd(), refs, 1)];
  sides[0].hook = hook;
  console.log(
    `load before: ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')} (1/5/15 min), ${os.cpus().length} CPUs`,
  );
  // One pod each first, removed again: first-use costs (code loaded, the CNI plugins' first run) stay out of both figures.
  for (const s of sides) {
    await pod(s, refs);
    await ok(s, ['rmp', '-af']);
    for (const times of [s.total, ...Object.values(s.steps)]) times.length = 0;
  }
  const idle = [];
  for (const s of sides) idle.push(await pss(s));

  console.log(
    `\n== (a) RunPodSandbox to a running two-container pod through cri-dockerd: ${PODS} pods each, interleaved`,
  );
  for (let i = 0; i < PODS; i++) for (const s of sides) await pod(s, refs);
  const res = {};
  for (const s of sides)
    console.log(
      `${s.d.kind.padEnd(8)} crictl version (a crictl call's floor): ${(await crictlFloor(s)).toFixed(0)} ms median; a pod takes 6 calls or more`,
    );
  for (const s of sides) {
    res[s.d.kind] = { total: stats(s.total), runp: stats(s.steps.runp) };
    console.log(`${s.d.kind.padEnd(8)} pod running: ${fmtMs(res[s.d.kind].total)}`);
    const steps = Object.entries(s.steps).map(([k, v]) => `${k} ${stats(v).median.toFixed(0)}`);
    console.log(
      `${s.d.kind.padEnd(8)}   medians of its steps (ms): ${steps.join(', ')} (create, start: both containers)`,
    );
  }

  console.log(`\n== (b) memory per pod, ${PODS} pods (3 containers each: pause + 2) standing`);
  const standing = [];
  for (const s of sides) standing.push(await pss(s));
  // The idle figure is taken again once the pods are gone, and the lower of the two is used:
  // berthd's PSS right after start-up is tens of MiB above where it settles (V8 gives pages
  // back over time, even after a full collection), more than the pods weigh. dockerd's Go
  // heap keeps what it took, so its second idle figure is the higher: the lower one is again
  // the one before.
  const after = [];
  for (const s of sides) {
    await ok(s, ['rmp', '-af']);
    after.push(await pss(s));
  }
  // A daemon's file-backed pages (the node or dockerd binary) are shared with
  // whatever else maps them, so its PSS moves with other processes on the
  // machine: (b2) counts only its anonymous memory, plus the monitors' PSS.
  const mem = {};
  const memAnon = {};
  for (const [k, s] of sides.entries()) {
    const m = standing[k];
    const low = (key) => Math.min(idle[k][key], after[k][key]);
    const what = s.d.kind === 'berthd' ? 'berthd' : 'dockerd+containerd';
    const mon = (m.monitors - low('monitors')) / PODS;
    mem[s.d.kind] = (m.daemon - low('daemon')) / PODS + mon;
    memAnon[s.d.kind] = (m.daemonAnon - low('daemonAnon')) / PODS + mon;
    console.log(
      `${s.d.kind.padEnd(8)} ${what} PSS idle ${MiB(idle[k].daemon)}, with the pods ${MiB(m.daemon)}, idle again ${MiB(after[k].daemon)} MiB ` +
        `(anonymous ${MiB(idle[k].daemonAnon)}, ${MiB(m.daemonAnon)}, ${MiB(after[k].daemonAnon)}); ` +
        `${m.count} ${monitorsOf(s.d).comm} ${MiB(m.monitors)} MiB; cri-dockerd grew ${MiB((m.cri - low('cri')) / PODS)} MiB per pod`,
    );
    console.log(
      `${s.d.kind.padEnd(8)}   per pod: ${MiB(mem[s.d.kind])} MiB (b), ${MiB(memAnon[s.d.kind])} MiB (b2: daemon anonymous + monitors); ` +
        `the monitors alone ${MiB(mon)} MiB per pod, ${MiB(m.monitors / Math.max(1, m.count))} MiB per container`,
    );
  }

  console.log('\n== summary');
  const b = res.berthd;
  const d = res.dockerd;
  console.log(
    `pod start ratio berthd/dockerd (median): ${ratio(b.total.median, d.total.median, 0.5)}; p90 ${(b.total.p90 / d.total.p90).toFixed(2)}×`,
  );
  console.log(`RunPodSandbox ratio berthd/dockerd (median): ${ratio(b.runp.median, d.runp.median)}`);
  console.log(
    `memory per pod ratio berthd/dockerd: ${ratio(mem.berthd, mem.dockerd, 0.5)} (b); ${ratio(memAnon.berthd, memAnon.dockerd, 0.5)} (b2)`,
  );
  console.log(
    `load after: ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')}`,
  );
});
