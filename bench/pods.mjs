// Pods through cri-dockerd, berthd beside dockerd in one run (issue 28):
//   (a) the time from RunPodSandbox to a running two-container pod, as kubelet
//       asks it: RunPodSandbox, then CreateContainer + StartContainer of two
//       busybox containers in it, until ContainerStatus shows both running;
//       N pods one after the other, the daemons interleaved pod by pod;
//       median/p90 of the whole and of each step. The calls go through the
//       bench's own CRI client on one gRPC connection (cri-client.mjs), as
//       kubelet keeps one, so no client process start is in the figure. The
//       pod and container configs are shaped like kubelet 1.26's for a
//       best-effort pod: cgroup parent, log directory and log paths, DNS
//       config, labels and annotations, PID namespace per container, the
//       default masked and read-only paths, the kubelet-managed /etc/hosts,
//       termination-log and service-account mounts, the image by its id.
//   (a2) the Engine-API requests cri-dockerd makes for each CRI call, timed
//       by the proxy in front of each daemon (cri.mjs): where a pod's time goes.
//   (b) memory per pod with the N pods standing: the PSS of the daemon and its
//       monitors (berthd + conmon; dockerd + its containerd + containerd-shim-
//       runc-v2), minus the same with no pod (the lower of before the first
//       and after the last: see below), divided by N; (b2) the
//       same with only the daemon's anonymous PSS (its file pages are shared
//       with other processes of the machine, so their PSS moves with those).
//       cri-dockerd's own growth is shown beside it (the same program on both
//       sides, so not in the ratio). berthd runs with --expose-gc and the
//       bench's memory hook, which collects its heap before each sample.
// Needs cri-dockerd, not built here: CRI_DOCKERD=/path/to/cri-dockerd (v0.3.7
// was used), Debian's CNI plugins in $CNI_BIN_DIR (default /usr/lib/cni) and
// dockerd (bench/run.sh --with-dockerd). BERTH_BENCH_BERTHD=/path/to/berthd.cjs runs
// another build of berthd than this tree's.
// Pods get a CNI bridge and subnet of their own per daemon (bench/cri.mjs),
// and a cgroup parent of their own per daemon, removed at the end; the
// sandbox's negative OomScoreAdj goes through a clamping proxy on both sides.
// The pause image is busybox whose shell waits for TERM; all images are built
// here and served from a loopback registry of the bench's own.
//
// Usage: CRI_DOCKERD=... node bench/pods.mjs [pods=10]
import crypto from 'node:crypto';
import { mkdirSync, readdirSync, rmdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { busyboxImage, pushImage } from '../fixtures/images.mjs';
import { CONTAINER_RUNNING } from './cri-client.mjs';
import { criTools, removeAllPods, startCriDockerd } from './cri.mjs';
import {
  clamp,
  daemonPids,
  fmtMs,
  hookFigures,
  MEMORY_HOOK,
  memoryOf,
  monitorsOf,
  now,
  onCleanup,
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
const STEPS = ['RunPodSandbox', 'CreateContainer', 'StartContainer', 'ContainerStatus'];

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

/** Every directory under `dir` removed, deepest first (cgroup directories take only rmdir). */
function rmdirTree(dir) {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const e of entries) if (e.isDirectory()) rmdirTree(path.join(dir, e.name));
  try {
    rmdirSync(dir);
  } catch (e) {
    console.error(`bench clean-up: rmdir ${dir}: ${e.code}`);
  }
}

/**
 * A daemon with its cri-dockerd, images pulled, a bridge and a /24 of its
 * own, and a cgroup root of its own for its pods (kubelet's /kubepods),
 * removed from every hierarchy once cri-dockerd has removed the pods.
 */
async function side(d, refs, n) {
  await pull(d, refs.busybox);
  await pull(d, refs.pause);
  // kubelet names the image by its id in CreateContainer (what ImageStatus answered).
  const image = (await d.request('GET', `/images/${encodeURIComponent(refs.busybox)}/json`)).json.Id;
  const tag = `${process.pid % 10000}${n}`;
  const cgroupRoot = `podbench${tag}`;
  onCleanup(() => {
    for (const h of readdirSync('/sys/fs/cgroup')) rmdirTree(path.join('/sys/fs/cgroup', h, cgroupRoot));
  });
  const cri = await startCriDockerd(d, {
    bridge: `bpod${tag}`,
    subnet: `10.${crypto.randomInt(200, 250)}.${crypto.randomInt(0, 250)}.0/24`,
    pauseImage: refs.pause,
  });
  return {
    d,
    cri,
    image,
    cgroupRoot,
    dir: path.join(cri.dir, 'pods'),
    steps: Object.fromEntries(STEPS.map((k) => [k, []])),
    total: [],
    n: 0,
  };
}

/** One CRI call on the side's connection; the proxy labels the Engine-API requests it causes. */
async function call(s, method, request) {
  s.cri.timing.call = s.timed ? method : null;
  try {
    return await s.cri.cri.call(method, request);
  } catch (e) {
    throw new Error(`${method} on ${s.d.kind}: ${e.message}\n${s.cri.log().slice(-2000)}`);
  } finally {
    s.cri.timing.call = null;
  }
}

// kubelet's defaults for a container that is not privileged (pkg/securitycontext).
const MASKED_PATHS = [
  '/proc/asound',
  '/proc/acpi',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/sys/firmware',
];
const READONLY_PATHS = ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'];
const POD_NS = 0;
const CONTAINER_NS = 1;
const UNCONFINED = 1;

/** A best-effort pod's sandbox config as kubelet 1.26 makes it (cgroupfs driver). */
function sandboxConfig(s, i) {
  const uid = crypto.randomUUID();
  const name = `bench-${i}`;
  const namespace = 'bench';
  const podDir = path.join(s.dir, uid);
  const logDir = path.join(s.dir, 'logs', `${namespace}_${name}_${uid}`);
  mkdirSync(logDir, { recursive: true });
  mkdirSync(path.join(podDir, 'serviceaccount'), { recursive: true });
  writeFileSync(path.join(podDir, 'etc-hosts'), `127.0.0.1\tlocalhost\n::1\tlocalhost\n`);
  writeFileSync(path.join(podDir, 'serviceaccount', 'token'), 'bench');
  const labels = {
    'io.kubernetes.pod.name': name,
    'io.kubernetes.pod.namespace': namespace,
    'io.kubernetes.pod.uid': uid,
  };
  return {
    podDir,
    labels,
    config: {
      metadata: { name, uid, namespace, attempt: 0 },
      hostname: name,
      log_directory: logDir,
      dns_config: {
        servers: ['10.96.0.10'],
        searches: [`${namespace}.svc.cluster.local`, 'svc.cluster.local', 'cluster.local'],
        options: ['ndots:5'],
      },
      labels,
      annotations: { 'kubernetes.io/config.source': 'api', 'kubernetes.io/config.seen': new Date().toISOString() },
      linux: {
        cgroup_parent: `/${s.cgroupRoot}/besteffort/pod${uid}`,
        security_context: {
          namespace_options: { network: POD_NS, pid: CONTAINER_NS, ipc: POD_NS },
          seccomp: { profile_type: UNCONFINED },
        },
      },
    },
  };
}

/** A container of that pod as kubelet 1.26 makes it. */
function containerConfig(s, pod, name) {
  const termination = path.join(pod.podDir, `${name}-termination-log`);
  writeFileSync(termination, '');
  mkdirSync(path.join(pod.config.log_directory, name)); // kubelet makes the container's log directory
  return {
    metadata: { name, attempt: 0 },
    image: { image: s.image },
    command: ['sh', '-c'],
    args: [`echo ${name} up; exec sleep 3600`],
    envs: [
      { key: 'KUBERNETES_SERVICE_HOST', value: '10.96.0.1' },
      { key: 'KUBERNETES_SERVICE_PORT', value: '443' },
      { key: 'KUBERNETES_PORT', value: 'tcp://10.96.0.1:443' },
    ],
    mounts: [
      {
        container_path: '/var/run/secrets/kubernetes.io/serviceaccount',
        host_path: path.join(pod.podDir, 'serviceaccount'),
        readonly: true,
      },
      { container_path: '/etc/hosts', host_path: path.join(pod.podDir, 'etc-hosts') },
      { container_path: '/dev/termination-log', host_path: termination },
    ],
    labels: { ...pod.labels, 'io.kubernetes.container.name': name },
    annotations: {
      'io.kubernetes.container.hash': crypto.randomBytes(4).toString('hex'),
      'io.kubernetes.container.restartCount': '0',
      'io.kubernetes.container.terminationMessagePath': '/dev/termination-log',
      'io.kubernetes.container.terminationMessagePolicy': 'File',
    },
    log_path: `${name}/0.log`,
    linux: {
      resources: { cpu_shares: 2, oom_score_adj: 1000 },
      security_context: {
        namespace_options: { network: POD_NS, pid: CONTAINER_NS, ipc: POD_NS },
        masked_paths: MASKED_PATHS,
        readonly_paths: READONLY_PATHS,
        seccomp: { profile_type: UNCONFINED },
      },
    },
  };
}

/** One pod: RunPodSandbox, create + start of two containers, until both run; times go in s.steps and s.total. */
async function pod(s) {
  const pod = sandboxConfig(s, s.n++);
  const containers = ['app1', 'app2'].map((name) => containerConfig(s, pod, name));
  const t = [now()];
  const { pod_sandbox_id: podId } = await call(s, 'RunPodSandbox', { config: pod.config });
  t.push(now());
  const ids = [];
  for (const config of containers)
    ids.push(
      (await call(s, 'CreateContainer', { pod_sandbox_id: podId, config, sandbox_config: pod.config })).container_id,
    );
  t.push(now());
  for (const id of ids) await call(s, 'StartContainer', { container_id: id });
  t.push(now());
  for (const deadline = Date.now() + 60_000; ; ) {
    let running = 0;
    for (const id of ids)
      if ((await call(s, 'ContainerStatus', { container_id: id })).status?.state === CONTAINER_RUNNING) running++;
    if (running === ids.length) break;
    if (Date.now() > deadline) throw new Error(`pod ${podId} on ${s.d.kind}: containers not running after 60 s`);
    await sleep(10);
  }
  t.push(now());
  for (const [k, step] of STEPS.entries()) s.steps[step].push(t[k + 1] - t[k]);
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

/** The median time of a Version call: the floor of one CRI round trip on the connection. */
async function criFloor(s) {
  const times = [];
  for (let i = 0; i < 20; i++) {
    const t0 = now();
    await call(s, 'Version');
    times.push(now() - t0);
  }
  return stats(times).median;
}

/**
 * (a2): per CRI call, the Engine-API requests cri-dockerd made for it, each
 * with how many per call and its median time, berthd beside dockerd.
 */
function requestBreakdown(sides) {
  const per = sides.map((s) => {
    const by = new Map();
    for (const e of s.cri.timing.log) {
      const key = `${e.call}\t${e.request}`;
      if (!by.has(key)) by.set(key, []);
      by.get(key).push(e.ms);
    }
    return by;
  });
  const keys = [...new Set(per.flatMap((m) => [...m.keys()]))].sort();
  const calls = Object.fromEntries(
    sides.map((s) => [s.d.kind, Object.fromEntries(STEPS.map((k) => [k, s.steps[k].length]))]),
  );
  let last = '';
  for (const key of keys) {
    const [c, request] = key.split('\t');
    if (c !== last) console.log(`${c}:`);
    last = c;
    const cols = sides.map((s, k) => {
      const xs = per[k].get(key) ?? [];
      const n = calls[s.d.kind][c] || PODS;
      const st = xs.length ? stats(xs) : undefined;
      // per pod: how many of it and the sum of their times
      const perPod = xs.reduce((a, x) => a + x, 0) / n;
      return `${s.d.kind} ${(xs.length / n).toFixed(1)}× med ${st ? st.median.toFixed(1) : '-'} p90 ${st ? st.p90.toFixed(1) : '-'} = ${perPod.toFixed(1)} ms/pod`;
    });
    console.log(`  ${request.padEnd(34)} ${cols.join(' | ')}`);
  }
}

await runBench(async () => {
  criTools();
  if (!which('dockerd')) throw new Error('dockerd is not installed (bench/run.sh --with-dockerd installs it)');
  const refs = await images();
  const hook = path.join(tempDir('berth-bench-pods-'), 'hook.json');
  const berthd = await startBerthd({
    nodeArgs: ['--expose-gc', '--require', MEMORY_HOOK],
    env: { BERTH_MEMORY_HOOK: hook, BERTH_MEMORY_HOOK_GC: '1' },
    // e.g. BERTH_BENCH_BERTHD_ARGS=--debug with BERTH_BENCH_LOGS=1: berthd's own step timings
    args: (process.env.BERTH_BENCH_BERTHD_ARGS ?? '').split(' ').filter(Boolean),
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
    await pod(s);
    await removeAllPods(s.cri.cri);
    for (const times of [s.total, ...Object.values(s.steps)]) times.length = 0;
  }
  const idle = [];
  for (const s of sides) idle.push(await pss(s));

  console.log(
    `\n== (a) RunPodSandbox to a running two-container pod through cri-dockerd: ${PODS} pods each, interleaved`,
  );
  for (const s of sides) s.timed = true;
  for (let i = 0; i < PODS; i++) for (const s of sides) await pod(s);
  for (const s of sides) s.timed = false;
  const res = {};
  for (const s of sides)
    console.log(
      `${s.d.kind.padEnd(8)} a Version call (one CRI round trip's floor): ${(await criFloor(s)).toFixed(1)} ms median`,
    );
  for (const s of sides) {
    res[s.d.kind] = { total: stats(s.total), runp: stats(s.steps.RunPodSandbox) };
    console.log(`${s.d.kind.padEnd(8)} pod running: ${fmtMs(res[s.d.kind].total)}`);
    for (const [k, v] of Object.entries(s.steps))
      console.log(`${s.d.kind.padEnd(8)}   ${k.padEnd(16)} ${fmtMs(stats(v))}`);
  }
  console.log('(CreateContainer, StartContainer: both containers; ContainerStatus: both, until running)');
  console.log(
    '\n== (a2) the Engine-API requests of each CRI call (per pod: how many, median and p90 ms each, their sum)',
  );
  requestBreakdown(sides);

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
    await removeAllPods(s.cri.cri);
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
