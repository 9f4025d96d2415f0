// Daemon start to first /_ping answer:
//   (a) on a fresh data root, for berthd (and dockerd when installed), and
//       from the same start to the answer of the create sent right after that
//       ping (404, no such image: a fresh data root has none): what the first
//       real request of a client waits for, however the daemon orders its start;
//   (b) restart-to-ready of berthd on a data root that records `containers`
//       containers (half created, half exited) and `images` images: the time
//       from spawn to the first /_ping answer after a clean stop, and after a
//       SIGKILL (the crash recovery path).
// Usage: node bench/startup.mjs [runs=20] [containers=1000] [images=100]
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { busyboxImage, pushImage } from '../fixtures/images.mjs';
import {
  buildSnapshot,
  createContainer,
  fmtMs,
  mapLimit,
  now,
  pull,
  removeAllContainers,
  request,
  runBench,
  sleep,
  startBerthd,
  startContainer,
  startRegistry,
  stats,
  which,
  clamp,
} from './lib.mjs';

const RUNS = clamp(process.argv[2], 1, 200, 20);
const CONTAINERS = clamp(process.argv[3], 0, 5000, 1000);
const IMAGES = clamp(process.argv[4], 1, 1000, 100);
/** Issue 32's target for (b). */
const TARGET_MS = 150;

/** The create a client sends once the daemon answers: its image is not there, so it costs no container. */
const CREATE = { Image: 'berth-bench/none-such:latest' };

/** Spawns `cmd args`, resolves with the ms until `socket` answers /_ping, and the process. */
async function timeToReady(cmd, args, socket) {
  const t0 = now();
  const p = spawn(cmd, args, { stdio: 'ignore' });
  for (;;) {
    if (p.exitCode !== null) throw new Error(`${cmd} exited with ${p.exitCode}`);
    if (
      existsSync(socket) &&
      (await request(socket, 'GET', '/_ping', { timeoutMs: 5000 }).then(
        (r) => r.status === 200,
        () => false,
      ))
    )
      break;
    await sleep(1);
  }
  return { ms: now() - t0, proc: p };
}

async function stopWith(p, signal) {
  const exited = new Promise((r) => (p.exitCode !== null || p.signalCode !== null ? r() : p.once('exit', r)));
  p.kill(signal);
  await exited;
}

/** (a) A fresh data root each run, the daemons (and the floor) in turn run by run, so load weighs alike. */
async function fresh(contenders) {
  const times = contenders.map(() => []);
  const creates = contenders.map(() => []);
  for (let i = 0; i < RUNS; i++) {
    for (const [k, c] of contenders.entries()) {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-bench-'));
      const { cmd, args, socket } = c.mkArgs(dir);
      const t0 = now();
      const { ms, proc } = await timeToReady(cmd, args, socket);
      times[k].push(ms);
      if (c.create) {
        const r = await request(socket, 'POST', '/containers/create', { body: CREATE });
        if (r.status !== 404) throw new Error(`${c.name}: the create answered ${r.status}: ${r.text}`);
        creates[k].push(now() - t0);
      }
      await stopWith(proc, 'SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const result = {};
  for (const [k, c] of contenders.entries()) {
    result[c.name] = stats(times[k]);
    console.log(`${c.name.padEnd(8)} start → first /_ping, ${c.what ?? 'fresh data root'}: ${fmtMs(result[c.name])}`);
  }
  for (const [k, c] of contenders.entries()) {
    if (!c.create) continue;
    result[`${c.name} create`] = stats(creates[k]);
    console.log(
      `${c.name.padEnd(8)} start → that ping, then a create answered (404): ${fmtMs(result[`${c.name} create`])}`,
    );
  }
  return result;
}

/** The floor: node answering /_ping with its own HTTP server on a unix socket, nothing loaded. */
const FLOOR_SERVER = `const s = require('node:http').createServer((q, r) => r.end('OK'));
s.listen(process.argv[1]); process.on('SIGTERM', () => s.close());`;

/** (b) A data root with CONTAINERS containers and IMAGES images, restarted RUNS times. */
async function populated() {
  const registry = await startRegistry();
  const d = await startBerthd();
  // IMAGES images that differ only by a label: one shared layer, distinct configs.
  await mapLimit(
    Array.from({ length: IMAGES }, (_, i) => i),
    8,
    async (i) => {
      await pushImage(
        registry.url,
        `startup/img${i}`,
        'latest',
        await busyboxImage({ config: { Labels: { n: String(i) } } }),
      );
      await pull(d, `${registry.host}/startup/img${i}:latest`);
    },
  );
  const t0 = now();
  await mapLimit(
    Array.from({ length: CONTAINERS }, (_, i) => i),
    8,
    async (i) => {
      const id = await createContainer(d, { Image: `${registry.host}/startup/img${i % IMAGES}:latest`, Cmd: ['true'] });
      if (i % 2) {
        await startContainer(d, id);
        await d.request('POST', `/containers/${id}/wait`);
      }
    },
  );
  console.log(
    `recorded ${CONTAINERS} containers (${Math.ceil(CONTAINERS / 2)} created, ${Math.floor(CONTAINERS / 2)} exited) and ${IMAGES} images in ${((now() - t0) / 1000).toFixed(1)} s`,
  );
  await stopWith(d.proc, 'SIGTERM');

  // Each restart is paired with a start on an empty data root right after it: on a busy machine
  // the difference (what the recorded containers and images cost) means more than either figure.
  const socket = d.socket;
  const emptyArgv = (dir) => d.argv.map((a) => a.replace(d.dir, dir));
  const results = {};
  for (const [how, signal] of [
    ['after a clean stop', 'SIGTERM'],
    ['after a SIGKILL', 'SIGKILL'],
  ]) {
    const times = [];
    const empty = [];
    const extra = [];
    for (let i = 0; i < RUNS; i++) {
      const { ms, proc } = await timeToReady(process.execPath, d.argv, socket);
      times.push(ms);
      await stopWith(proc, signal);
      const dir = mkdtempSync(path.join(os.tmpdir(), 'bb-'));
      writeFileSync(path.join(dir, 'daemon.json'), '{}\n');
      const e = await timeToReady(process.execPath, emptyArgv(dir), path.join(dir, 'berth.sock'));
      empty.push(e.ms);
      extra.push(ms - e.ms);
      await stopWith(e.proc, 'SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    }
    const s = stats(times);
    results[how] = s;
    console.log(
      `berthd restart → first /_ping, ${CONTAINERS} containers and ${IMAGES} images recorded, ${how}: ${fmtMs(s)} (target ≤ ${TARGET_MS} ms: ${s.median <= TARGET_MS ? 'met' : 'MISSED'})`,
    );
    console.log(
      `  paired start on an empty data root: ${fmtMs(stats(empty))}; what the records cost (paired difference): median ${stats(extra).median.toFixed(0)} ms`,
    );
  }
  // Its containers are removed through the API (their rootfs mounts with them) before the clean-up removes the directory.
  const { proc } = await timeToReady(process.execPath, d.argv, socket);
  await removeAllContainers(d);
  await stopWith(proc, 'SIGTERM');
  return results;
}

await runBench(async () => {
  const bin = buildSnapshot();
  const contenders = [
    {
      name: 'node',
      what: 'a bare node HTTP server (the floor)',
      mkArgs: (dir) => ({
        cmd: process.execPath,
        args: ['-e', FLOOR_SERVER, `${dir}/n.sock`],
        socket: `${dir}/n.sock`,
      }),
    },
    {
      name: 'berthd',
      create: true,
      mkArgs: (dir) => ({
        cmd: process.execPath,
        // No networking, as dockerd below (and as the other benches run both): a default bridge would
        // be set up on one side only, and left on the host (a daemon keeps its bridge, as dockerd docker0).
        args: [
          ...[bin, '-H', `unix://${dir}/s.sock`, '--data-root', `${dir}/data`, '--exec-root', `${dir}/exec`],
          ...['--bridge', 'none', '--iptables=false'],
        ],
        socket: `${dir}/s.sock`,
      }),
    },
  ];
  const dockerd = which('dockerd');
  if (dockerd) {
    contenders.push({
      name: 'dockerd',
      create: true,
      mkArgs: (dir) => {
        writeFileSync(path.join(dir, 'daemon.json'), '{}\n');
        return {
          cmd: dockerd,
          args: [
            ...['-H', `unix://${dir}/d.sock`, '--data-root', `${dir}/data`, '--exec-root', `${dir}/exec`],
            ...[
              '--pidfile',
              `${dir}/d.pid`,
              '--config-file',
              `${dir}/daemon.json`,
              '--bridge',
              'none',
              '--iptables=false',
            ],
          ],
          socket: `${dir}/d.sock`,
        };
      },
    });
  }
  const r = await fresh(contenders);
  if (r.dockerd) {
    console.log(`ratio berthd/dockerd (median): ${(r.berthd.median / r.dockerd.median).toFixed(2)}`);
    const create = (r['berthd create'].median / r['dockerd create'].median).toFixed(2);
    console.log(`ratio berthd/dockerd, start to the first create answered (median): ${create}`);
  } else console.log('dockerd not installed: run bench/run.sh --with-dockerd to compare');
  if (CONTAINERS > 0) await populated();
});
