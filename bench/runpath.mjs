// The run path (issue 32): what a start costs on berthd beside what runc alone
// costs for the same bundle, step by step, and the docker CLI's `run` on
// berthd beside dockerd.
//   (a) API start (POST /containers/{id}/start) of a created container on
//       berthd (and dockerd), beside `runc create` + `runc start` of a copy of
//       the very bundle berthd wrote (its config.json, its mounted rootfs), and
//       beside the same create run by conmon as berthd runs it (conmon's
//       share). Interleaved run by run.
//   (b) where berthd's start goes: the steps of its start as its debug log
//       records them (containers' "container started" and the runtime's
//       "container created"), medians over the runs of (a).
//   (c) the requests `docker run --rm busybox true` makes (create, attach,
//       wait, start, the wait's answer), replayed over HTTP and timed one by
//       one on each daemon; then the CLI itself beside `runc run` (the floor).
//   (d) PARALLEL `docker run -d busybox sleep 600` at once, without networking
//       (`--network none`): containers per second from the first CLI started
//       to the last one answered.
//
// Usage: node bench/runpath.mjs [runs=20] [rounds=5] [parallel=20]   (as root, after npm run build)
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { busyboxImage } from '../fixtures/images.mjs';
import {
  busyboxRegistry,
  clamp,
  cliRunner,
  createContainer,
  dockerCli,
  fmtMs,
  mapLimit,
  now,
  onCleanup,
  pull,
  ratio,
  removeAllContainers,
  runBench,
  runcFloor,
  sleep,
  startBerthd,
  startDockerd,
  stats,
  tag,
  tempDir,
  which,
  burstRates,
} from './lib.mjs';

const RUNS = clamp(process.argv[2], 1, 200, 20);
const ROUNDS = clamp(process.argv[3], 1, 50, 5);
const PARALLEL = clamp(process.argv[4], 1, 100, 20);
const WARMUP = 2;

const load = () =>
  os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
const median = (xs) => stats(xs).median;

/** `file args…`; resolves with its milliseconds once it exits (its stdio /dev/null: a container's init may hold a pipe). */
function timed(file, args, opts = {}) {
  return new Promise((resolve, reject) => {
    const t0 = now();
    const p = spawn(file, args, { stdio: 'ignore', ...opts });
    p.once('error', reject);
    p.once('exit', (code) =>
      code === 0 ? resolve(now() - t0) : reject(new Error(`${file} ${args.join(' ')}: ${code}`)),
    );
  });
}

// ─────────────────────────────── (a) runc beside berthd ───────────────────────────────

/**
 * A copy of the bundle berthd wrote for container `id` (config.json; the
 * rootfs is berthd's, mounted, named by the spec's absolute path) and the
 * ways to start it without berthd: runc alone, and conmon running runc.
 */
function bundleRunners(d, id) {
  const dir = tempDir('berth-bench-rp-');
  const bundle = path.join(dir, 'bundle');
  const root = path.join(dir, 'runc');
  const exitDir = path.join(dir, 'exits');
  for (const p of [bundle, root, exitDir]) mkdirSync(p, { recursive: true });
  const spec = JSON.parse(readFileSync(path.join(d.dir, 'data', 'containers', id, 'config.json'), 'utf8'));
  // A cgroup of its own (not the berthd container's), under a parent removed at the end (after
  // the containers: clean-ups run last-in first-out); runc removes only the container's own.
  const parent = path.basename(dir);
  spec.linux.cgroupsPath = `/${parent}/ctr`;
  onCleanup(() => {
    for (const h of readdirSync('/sys/fs/cgroup')) {
      for (const c of [`/sys/fs/cgroup/${h}/${parent}/ctr`, `/sys/fs/cgroup/${h}/${parent}`])
        if (existsSync(c)) rmdirSync(c);
    }
  });
  writeFileSync(path.join(bundle, 'config.json'), JSON.stringify(spec));
  let n = 0;
  const runc = (...args) => timed('runc', ['--root', root, ...args]);
  const started = [];
  onCleanup(async () => {
    for (const cid of started) await runc('delete', '--force', cid).catch(() => undefined);
  });
  const end = async (cid) => {
    // `true` exits at once; runc's delete would refuse a container still running.
    for (let i = 0; i < 200; i++) {
      if (
        await runc('delete', cid).then(
          () => true,
          () => false,
        )
      )
        return;
      await sleep(5);
    }
    throw new Error(`runc delete ${cid} failed`);
  };
  return {
    /** runc create, then runc start: their milliseconds. */
    async runcAlone() {
      const cid = `rp-${process.pid}-${n++}`;
      started.push(cid);
      const create = await runc('create', '--bundle', bundle, cid);
      const start = await runc('start', cid);
      await end(cid);
      return { create, start, total: create + start };
    },
    /** conmon (as berthd spawns it) running runc create until its report, then runc start. */
    async conmon() {
      const cid = `rp-${process.pid}-${n++}`;
      started.push(cid);
      const t0 = now();
      await conmonCreate({ id: cid, bundle, root, exitDir });
      const create = now() - t0;
      const start = await runc('start', cid);
      await end(cid);
      rmSync(path.join(exitDir, cid), { force: true });
      return { create, start, total: create + start };
    },
  };
}

/** conmon with berthd's arguments for a container without a log, resolved on its sync report. */
async function conmonCreate({ id, bundle, root, exitDir }) {
  const { conmonArgs } = await import('../dist/engine/runtime/conmon.js');
  const args = conmonArgs(
    { runcPath: which('runc'), runcRoot: root, socketDir: path.join(path.dirname(root), 'sock') },
    { id, bundleDir: bundle, logPath: null, exitDir },
  );
  mkdirSync(path.join(path.dirname(root), 'sock'), { recursive: true });
  const p = spawn(which('conmon'), args, {
    cwd: bundle,
    env: { PATH: process.env.PATH, _OCI_SYNCPIPE: '3' },
    stdio: ['ignore', 'ignore', 'ignore', 'pipe'],
  });
  const sync = p.stdio[3];
  let text = '';
  for await (const c of sync) {
    text += c;
    if (text.includes('\n')) break;
  }
  sync.destroy();
  const report = JSON.parse(text.split('\n')[0]);
  if (!(report.data > 0)) throw new Error(`conmon: ${text}`);
}

async function apiStart(d) {
  const id = await createContainer(d, { Image: 'busybox', Cmd: ['true'], HostConfig: { NetworkMode: 'none' } });
  await sleep(30); // what a create prepares in the background (berthd's bundle) is done
  const t0 = now();
  const r = await d.request('POST', `/containers/${id}/start`);
  const ms = now() - t0;
  if (r.status !== 204) throw new Error(`start on ${d.kind}: ${r.status} ${r.text}`);
  await d.request('POST', `/containers/${id}/wait`);
  await d.request('DELETE', `/containers/${id}`);
  return ms;
}

async function startBeside(daemons, berthd) {
  console.log(
    `\n== (a) API start of a created container (busybox true, --network none) beside runc create + runc start of the same bundle: ${RUNS} runs each (after ${WARMUP} warm-up), interleaved`,
  );
  const id = await createContainer(berthd, { Image: 'busybox', Cmd: ['true'], HostConfig: { NetworkMode: 'none' } });
  // The bundle is written at the first start (or in the background right after the create).
  await sleep(300);
  const bundle = bundleRunners(berthd, id);
  const targets = [
    ...daemons.map((d) => ({ name: `${d.kind} API start`, run: async () => ({ total: await apiStart(d) }) })),
    { name: 'runc create + runc start', run: bundle.runcAlone },
    { name: 'conmon → runc create + runc start', run: bundle.conmon },
  ];
  const times = targets.map(() => []);
  for (let i = 0; i < WARMUP + RUNS; i++) {
    for (const [k, t] of targets.entries()) {
      const r = await t.run();
      if (i >= WARMUP) times[k].push(r);
    }
  }
  const out = {};
  for (const [k, t] of targets.entries()) {
    const s = stats(times[k].map((r) => r.total));
    out[t.name] = s;
    const parts =
      times[k][0].create === undefined
        ? ''
        : ` (create ${median(times[k].map((r) => r.create)).toFixed(1)}, start ${median(times[k].map((r) => r.start)).toFixed(1)})`;
    console.log(`${t.name.padEnd(34)} ${fmtMs(s)}${parts}`);
  }
  return out;
}

// ─────────────────────────────── (b) berthd's steps ───────────────────────────────

/** Medians of the step timings berthd's debug log gave for its starts. */
function steps(berthd) {
  const records = berthd
    .logs()
    .split('\n')
    .filter((l) => l.includes('"startSteps"') || l.includes('"createSteps"'))
    .map((l) => JSON.parse(l));
  console.log(
    `\n== (b) berthd's start, step by step (medians of ${records.filter((r) => r.startSteps).length} starts, ms)`,
  );
  for (const key of ['startSteps', 'createSteps']) {
    const rows = records.map((r) => r[key]).filter(Boolean);
    if (!rows.length) continue;
    const names = Object.keys(rows[0]);
    console.log(
      `${key.padEnd(12)} ${names.map((n) => `${n} ${median(rows.map((r) => r[n] ?? 0)).toFixed(1)}`).join(', ')}`,
    );
  }
}

// ─────────────────────────────── (c) docker run's requests ───────────────────────────────

/**
 * One hijacked request (attach) over the daemon's socket: resolves once the
 * answer's head is in, with the socket (closed by the caller) and a promise
 * of its end.
 */
function hijack(d, urlPath) {
  return new Promise((resolve, reject) => {
    const s = net.createConnection(d.socket);
    s.once('error', reject);
    s.write(
      `POST ${urlPath} HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: 0\r\n\r\n`,
    );
    let head = '';
    const ended = new Promise((r) => s.once('close', r));
    s.on('data', function onData(c) {
      head += c.toString('latin1');
      if (head.includes('\r\n\r\n')) {
        s.off('data', onData);
        s.resume();
        resolve({ socket: s, ended });
      }
    });
  });
}

/** docker run --rm busybox true's requests, timed each: create, attach, wait (removed), start, the wait's answer. */
async function cliRequests(d) {
  const t = {};
  let t0 = now();
  const c = await d.request('POST', '/containers/create', {
    body: {
      Image: 'busybox',
      Cmd: ['true'],
      AttachStdout: true,
      AttachStderr: true,
      HostConfig: { AutoRemove: true, NetworkMode: 'none' },
    },
  });
  if (c.status !== 201) throw new Error(`create on ${d.kind}: ${c.status} ${c.text}`);
  const id = c.json.Id;
  t.create = now() - t0;
  t0 = now();
  const attach = await hijack(d, `/containers/${id}/attach?stream=1&stdout=1&stderr=1`);
  t.attach = now() - t0;
  t0 = now();
  const wait = d.request('POST', `/containers/${id}/wait?condition=removed`);
  // The CLI sends the start once the wait is sent, not answered: the wait's head comes with its body.
  await sleep(0);
  t0 = now();
  const s = await d.request('POST', `/containers/${id}/start`);
  if (s.status !== 204) throw new Error(`start on ${d.kind}: ${s.status} ${s.text}`);
  t.start = now() - t0;
  t0 = now();
  const w = await wait;
  t.waitAnswer = now() - t0;
  if (w.status !== 200) throw new Error(`wait on ${d.kind}: ${w.status} ${w.text}`);
  t0 = now();
  await attach.ended;
  t.attachEnd = now() - t0;
  attach.socket.destroy();
  t.total = t.create + t.attach + t.start + t.waitAnswer + t.attachEnd;
  return t;
}

async function requests(daemons) {
  console.log(
    `\n== (c) docker run --rm busybox true's requests replayed over HTTP (--network none), ${RUNS} runs each (after ${WARMUP} warm-up), interleaved: medians, ms`,
  );
  const times = daemons.map(() => []);
  for (let i = 0; i < WARMUP + RUNS; i++) {
    for (const [k, d] of daemons.entries()) {
      const r = await cliRequests(d);
      if (i >= WARMUP) times[k].push(r);
    }
  }
  for (const [k, d] of daemons.entries()) {
    const names = Object.keys(times[k][0]);
    console.log(
      `${d.kind.padEnd(8)} ${names.map((n) => `${n} ${median(times[k].map((r) => r[n])).toFixed(1)}`).join(', ')}`,
    );
  }
}

async function cliRuns(daemons, floor) {
  console.log(
    `\n== (c2) docker run --rm busybox true through the docker CLI: ${RUNS} runs each (after ${WARMUP} warm-up), interleaved`,
  );
  const targets = [
    ...daemons.map((d) => ({ name: `${d.kind} (docker CLI)`, run: cliRunner(d) })),
    ...daemons.map((d) => ({
      name: `${d.kind} docker version (CLI alone)`,
      run: cliRunner(d, ['version'], null),
    })),
    { name: 'runc run (floor)', run: floor },
  ];
  const times = targets.map(() => []);
  for (let i = 0; i < WARMUP + RUNS; i++) {
    for (const [k, t] of targets.entries()) {
      const ms = await t.run();
      if (i >= WARMUP) times[k].push(ms);
    }
  }
  const out = {};
  for (const [k, t] of targets.entries()) {
    out[t.name] = stats(times[k]);
    console.log(`${t.name.padEnd(34)} ${fmtMs(out[t.name])}`);
  }
  return out;
}

// ─────────────────────────────── (d) parallel run -d ───────────────────────────────

async function parallelRun(d) {
  const docker = dockerCli(d);
  const t0 = now();
  const results = await mapLimit(
    Array.from({ length: PARALLEL }, (_, i) => i),
    PARALLEL,
    () => docker(['run', '-d', '--network', 'none', 'busybox', 'sleep', '600']),
  );
  const ms = now() - t0;
  const failed = results.find((r) => r.code !== 0);
  if (failed) throw new Error(`docker run -d on ${d.kind} exited ${failed.code}: ${failed.stderr}`);
  for (const r of results) {
    const i = await d.request('GET', `/containers/${r.stdout.trim()}/json`);
    if (!i.json?.State?.Running) throw new Error(`${d.kind}: container ${r.stdout.trim()} not running`);
  }
  await removeAllContainers(d);
  return ms;
}

async function parallelRuns(daemons) {
  console.log(
    `\n== (d) ${PARALLEL} × docker run -d --network none busybox sleep 600 at once: ${ROUNDS} rounds each (after 1 warm-up), interleaved`,
  );
  return burstRates(daemons, ROUNDS, PARALLEL, (d) => parallelRun(d));
}

// ─────────────────────────────────── main ───────────────────────────────────

await runBench(async () => {
  console.log(`load average at start: ${load()} (${os.cpus().length} cores)`);
  const { ref } = await busyboxRegistry();
  const berthd = await startBerthd({ args: ['--log-level', 'debug'] });
  const daemons = [berthd];
  if (which('dockerd')) daemons.push(await startDockerd());
  else console.log('dockerd not installed: berthd alone (bench/run.sh --with-dockerd to compare)');
  for (const d of daemons) {
    await pull(d, ref);
    await tag(d, ref, 'busybox', 'latest');
  }
  const start = await startBeside(daemons, berthd);
  steps(berthd);
  await requests(daemons);
  const floor = await runcFloor((await busyboxImage()).layers[0]);
  const cli = which('docker') ? await cliRuns(daemons, floor) : undefined;
  const par = which('docker') ? await parallelRuns(daemons) : undefined;

  console.log(`\n== summary (load average now ${load()})`);
  const api = start['berthd API start'].median;
  const runc = start['runc create + runc start'].median;
  console.log(`API start / (runc create + runc start): ${ratio(api, runc, 1.2)}`);
  if (start['dockerd API start'])
    console.log(`API start berthd/dockerd: ${ratio(api, start['dockerd API start'].median)}`);
  if (cli) {
    const b = cli['berthd (docker CLI)'].median;
    const f = cli['runc run (floor)'].median;
    console.log(`docker run --rm / runc run: ${ratio(b, f, 1.5)}`);
    if (cli['dockerd (docker CLI)'])
      console.log(`docker run --rm berthd/dockerd: ${ratio(b, cli['dockerd (docker CLI)'].median)}`);
  }
  if (par?.dockerd)
    console.log(
      `${PARALLEL} parallel run -d, rate berthd/dockerd: ${ratio(par.berthd.rate, par.dockerd.rate, 3, 'higher')}`,
    );
});
