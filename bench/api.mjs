// Small API requests, berthd beside dockerd 20.10 (when installed) and beside other
// berthd builds (A/B), on one kept connection per daemon, sent one at a time, a burst
// of them to each daemon in turn, round after round, so that whatever else loads the
// machine weighs on every daemon alike. Two phases:
//   - on fresh, empty daemons: GET /_ping, GET /containers/json?all=1 (docker ps -a),
//     GET /images/json (docker images);
//   - after loading busybox, running a container that prints 100 lines and creating
//     `containers` more: GET /_ping, the finished container's logs
//     (GET /containers/{id}/logs?stdout=1&stderr=1), its inspect, the image's inspect,
//     GET /containers/json (docker ps: none runs), GET /containers/json?all=1 and
//     GET /images/json.
// Beside each wall-clock median it prints the daemon's CPU time per request, which the
// machine's load disturbs far less: berthd's main thread (its event loop, where a
// request's work is) and, for both daemons, all of the process's threads (a Go daemon
// has no main thread: its requests run on any of them), from /proc's schedstat, in ns.
//
// Usage: node bench/api.mjs [rounds=20] [containers=0] [launcher ...]   (rounds of 10 requests back to back)
//   launchers: bin/berthd.cjs of other builds (default: this work tree's build).
//   BERTH_BENCH_NO_DOCKERD=1: berthd builds only.
//   BERTH_BENCH_NEW_CONNECTIONS=1: a connection of its own for each request.
//   BERTH_BENCH_PROF=dir: run each berthd under `node --cpu-prof` (a sample each 100 µs) into dir/<n>/, and write
//   dir/requests.json: each request's span (monotonic µs, the profile's clock), to
//   tell its samples from the set-up's.
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
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
  request,
  runBench,
  startBerthd,
  startContainer,
  startDockerd,
  stats,
  which,
} from './lib.mjs';

const ROUNDS = clamp(process.argv[2], 1, 10_000, 20);
const CONTAINERS = clamp(process.argv[3], 0, 5000, 0);
const BINS = process.argv.slice(4);
const WARMUP = 10;
const BURST = 10;
const LOG_LINES = 100;
/** A connection of its own for each request (as each `docker` command opens one), instead of one kept. */
const NEW_CONNECTIONS = !!process.env.BERTH_BENCH_NEW_CONNECTIONS;

const load = () =>
  os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

/** A thread's CPU time in ms: the scheduler's own count in ns (/proc/<pid>/stat counts in 10 ms ticks). */
const threadMs = (pid, tid) => Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;

/** The main thread's CPU time and all threads' (of those alive now), in ms. */
function cpuMs(pid) {
  let all = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      all += threadMs(pid, tid);
    } catch {} // a thread that ended meanwhile
  }
  return { main: threadMs(pid, pid), all };
}

/** Length of a multiplexed log of `n` lines of `seq 1 n` (an 8-byte header per line). */
const seqLogBytes = (n) => Array.from({ length: n }, (_, i) => 8 + String(i + 1).length + 1).reduce((a, b) => a + b, 0);

const EMPTY = [
  { name: 'GET /_ping', path: () => '/_ping', check: (r) => r.text === 'OK' },
  {
    name: 'GET /containers/json?all=1 (empty)',
    path: () => '/containers/json?all=1',
    check: (r) => r.json?.length === 0,
  },
  { name: 'GET /images/json (empty)', path: () => '/images/json', check: (r) => r.json?.length === 0 },
];

const LOADED = [
  { name: 'GET /_ping', path: () => '/_ping', check: (r) => r.text === 'OK' },
  {
    name: `GET /containers/{id}/logs?stdout=1&stderr=1 (${LOG_LINES} lines)`,
    path: (d) => `/containers/${d.logId}/logs?stdout=1&stderr=1`,
    check: (r) => r.body.length === seqLogBytes(LOG_LINES),
  },
  {
    name: 'GET /containers/{id}/json',
    path: (d) => `/containers/${d.logId}/json`,
    check: (r, d) => r.json?.Id === d.logId,
  },
  {
    name: 'GET /images/busybox/json',
    path: () => '/images/busybox/json',
    check: (r) => r.json?.RepoTags?.length === 1,
  },
  {
    name: `GET /containers/json (none of the ${CONTAINERS + 1} runs)`,
    path: () => '/containers/json',
    check: (r) => r.json?.length === 0,
  },
  {
    name: `GET /containers/json?all=1 (${CONTAINERS + 1} containers)`,
    path: () => '/containers/json?all=1',
    // A long list next to the others: one round in five when there are many.
    every: CONTAINERS >= 100 ? 5 : 1,
    check: (r) => r.json?.length === CONTAINERS + 1,
  },
  { name: 'GET /images/json (busybox)', path: () => '/images/json', check: (r) => r.json?.length === 1 },
];

/**
 * Sends each of `requests` to each daemon in turn, round after round, a burst of 1 +
 * BURST back to back (as a client sends its calls: a daemon left idle between two
 * requests spends up to twice the CPU and wall time on the second, for reasons of the
 * machine's, not its own). After WARMUP rounds it records each request's wall time
 * but the first's of a burst, and the CPU the daemon spent on those BURST, per request
 * (read before and after them: reading /proc between two requests would part them).
 */
async function measure(daemons, requests) {
  const rows = requests.map(() => daemons.map(() => ({ wall: [], main: [], all: [], spans: [] })));
  const send = async (d, req) => {
    const t0 = now();
    const r = await request(d.socket, 'GET', req.path(d), { agent: NEW_CONNECTIONS ? false : d.agent });
    const ms = now() - t0;
    if (r.status !== 200 || !req.check(r, d))
      throw new Error(`${d.name} ${req.name}: ${r.status} ${r.body.length} B ${r.text.slice(0, 200)}`);
    return [t0, ms];
  };
  for (let i = 0; i < ROUNDS + WARMUP; i++) {
    for (const [q, req] of requests.entries()) {
      if (i % (req.every ?? 1) !== 0) continue;
      for (const [k, d] of daemons.entries()) {
        await send(d, req);
        const times = [];
        const c0 = cpuMs(d.pid);
        for (let b = 0; b < BURST; b++) times.push(await send(d, req));
        const c1 = cpuMs(d.pid);
        if (i < WARMUP) continue;
        const row = rows[q][k];
        row.wall.push(...times.map(([, ms]) => ms));
        row.main.push((c1.main - c0.main) / BURST);
        row.all.push((c1.all - c0.all) / BURST);
        row.spans.push(...times.map(([t0, ms]) => [Math.round(t0 * 1000), Math.round((t0 + ms) * 1000)]));
      }
    }
  }
  if (!NEW_CONNECTIONS && daemons.some((d) => d.connections !== 1))
    throw new Error(`a connection was not kept: ${daemons.map((d) => `${d.name} ${d.connections}`).join(', ')}`);
  return rows;
}

function report(title, daemons, requests, rows) {
  console.log(`\n#### ${title} (load ${load()})`);
  // Ratios to dockerd, or to the first build without it.
  const base = Math.max(
    0,
    daemons.findIndex((d) => d.kind === 'dockerd'),
  );
  for (const [q, req] of requests.entries()) {
    console.log(`\n== ${req.name}`);
    for (const [k, d] of daemons.entries()) {
      const r = rows[q][k];
      const s = stats(r.wall);
      const all = stats(r.all).median;
      const main = d.kind === 'berthd' ? `main thread ${stats(r.main).median.toFixed(3)} ms, ` : '';
      const vs =
        k !== base
          ? `; ${(s.median / stats(rows[q][base].wall).median).toFixed(2)}× ${daemons[base].name}'s time, ${(all / stats(rows[q][base].all).median).toFixed(2)}× its CPU`
          : '';
      console.log(
        `${d.name.padEnd(12)} wall median ${s.median.toFixed(3)} ms (p90 ${s.p90.toFixed(3)}, n=${s.n}); CPU/request (median of bursts): ${main}all threads ${all.toFixed(3)} ms${vs}`,
      );
    }
  }
}

/** A kept connection for a daemon, counting the connections it opens (one, if it is kept). */
function keptConnection(d) {
  d.agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  d.connections = 0;
  const create = d.agent.createConnection.bind(d.agent);
  d.agent.createConnection = (...args) => {
    d.connections++;
    return create(...args);
  };
}

await runBench(async () => {
  const bins = BINS.length ? BINS.map((b) => path.resolve(b)) : [buildSnapshot()];
  console.log(`load average at start: ${load()} (${os.availableParallelism()} CPUs)`);
  const prof = process.env.BERTH_BENCH_PROF;
  const daemons = [];
  if (which('dockerd') && !process.env.BERTH_BENCH_NO_DOCKERD) {
    const d = await startDockerd();
    d.name = 'dockerd';
    daemons.push(d);
  }
  for (const [n, bin] of bins.entries()) {
    const d = await startBerthd({
      bin,
      nodeArgs: prof ? ['--cpu-prof', '--cpu-prof-interval=100', `--cpu-prof-dir=${path.join(prof, String(n))}`] : [],
    });
    d.name = bins.length > 1 ? `berthd ${String.fromCharCode(65 + n)}` : 'berthd';
    console.log(`${d.name}: ${bin}`);
    daemons.push(d);
  }
  for (const d of daemons) keptConnection(d);

  const empty = await measure(daemons, EMPTY);

  const busybox = await busyboxImage();
  for (const d of daemons) {
    await loadImage(d, busybox, 'busybox:latest');
    d.logId = await createContainer(d, { Image: 'busybox', Cmd: ['seq', '1', String(LOG_LINES)] });
    await startContainer(d, d.logId);
    const w = await d.request('POST', `/containers/${d.logId}/wait`);
    if (w.json?.StatusCode !== 0) throw new Error(`${d.name}: seq exited ${w.text}`);
    const t0 = now();
    await mapLimit(
      Array.from({ length: CONTAINERS }, (_, i) => i),
      8,
      (i) => createContainer(d, { Image: 'busybox', Cmd: ['true'], Labels: { 'bench.n': String(i) } }),
    );
    if (CONTAINERS) console.log(`${d.name}: ${CONTAINERS} containers created in ${((now() - t0) / 1000).toFixed(1)} s`);
  }
  // A new kept connection: the set-up may have outlasted a server's idle timeout.
  for (const d of daemons) {
    d.agent.destroy();
    keptConnection(d);
  }
  const loaded = await measure(daemons, LOADED);

  if (prof) {
    const berthds = daemons.map((d, k) => [d, k]).filter(([d]) => d.kind === 'berthd');
    const spans = (requests, rows) =>
      requests.map((req, q) => ({ name: req.name, spans: berthds.map(([, k]) => rows[q][k].spans) }));
    mkdirSync(prof, { recursive: true });
    writeFileSync(path.join(prof, 'requests.json'), JSON.stringify([...spans(EMPTY, empty), ...spans(LOADED, loaded)]));
  }
  console.log(
    `\n${ROUNDS} rounds of ${BURST} requests back to back after ${WARMUP} of warm-up, ${NEW_CONNECTIONS ? 'a connection of its own for each' : 'one kept connection per daemon'}`,
  );
  report('Empty daemons', daemons, EMPTY, empty);
  report(
    `After busybox, a finished container of ${LOG_LINES} lines and ${CONTAINERS} created`,
    daemons,
    LOADED,
    loaded,
  );
  for (const d of daemons) d.agent.destroy();
  console.log(`\nload average at end: ${load()}`);
});
