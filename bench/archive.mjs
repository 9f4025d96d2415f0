// docker save and docker load of a ~105 MB image (busybox + 4 layers of random
// data), berthd vs dockerd (Debian docker.io, when installed). Each daemon
// pulls the image from a loopback registry once; then, per run: save (GET
// /images/get, the archive written to a file, clock to its last byte), remove
// the image (its layers go), and load that daemon's own archive (POST
// /images/load, clock to the end of the answer).
//
// Usage: node bench/archive.mjs [runs=5] [totalMiB=100] [layers=4]
import { createReadStream, createWriteStream, readFileSync, statSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import {
  largeImageRegistry,
  now,
  pull,
  ratio,
  runBench,
  startBerthd,
  startDockerd,
  stats,
  tempDir,
  which,
} from './lib.mjs';

const runs = Math.max(1, Math.min(20, Number(process.argv[2] ?? 5)));
const totalMiB = Number(process.argv[3] ?? 100);
const layerCount = Number(process.argv[4] ?? 4);

/** One streamed request over the daemon's socket: the body from `input` (a file), the answer to `output` (a file) or drained. */
function stream(d, method, urlPath, { input, output } = {}) {
  return new Promise((resolve, reject) => {
    const headers = {
      Host: 'localhost',
      ...(input ? { 'Content-Type': 'application/x-tar', 'Content-Length': String(statSync(input).size) } : {}),
    };
    const req = http.request({ socketPath: d.socket, method, path: urlPath, headers, agent: false }, (res) => {
      if (res.statusCode !== 200) {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => reject(new Error(`${method} ${urlPath} on ${d.kind}: HTTP ${res.statusCode} ${text}`)));
        return;
      }
      if (output) {
        pipeline(res, createWriteStream(output)).then(() => resolve(''), reject);
        return;
      }
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => (text.includes('"error"') ? reject(new Error(`${d.kind}: ${text}`)) : resolve(text)));
    });
    req.on('error', reject);
    if (input) pipeline(createReadStream(input), req).catch(reject);
    else req.end();
  });
}

/**
 * CPU time (user + system, ms) the daemon's process has used: on a shared
 * machine, a steadier measure of what a save costs than its wall time.
 */
function cpuMs(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // utime, stime in clock ticks (USER_HZ 100)
}

async function bench(name, start, ref) {
  const d = await start();
  const dir = tempDir('ba-');
  const saves = [];
  const saveCpu = [];
  const loads = [];
  try {
    await pull(d, ref);
    for (let i = 0; i < runs; i++) {
      const file = path.join(dir, `${name}-${i}.tar`);
      let t0 = now();
      const c0 = cpuMs(d.pid);
      await stream(d, 'GET', `/images/get?names=${encodeURIComponent(ref)}`, { output: file });
      saves.push(now() - t0);
      saveCpu.push(cpuMs(d.pid) - c0);
      const removed = await d.request('DELETE', `/images/${encodeURIComponent(ref)}`);
      if (removed.status !== 200) throw new Error(`rmi on ${name}: ${removed.status} ${removed.text}`);
      t0 = now();
      await stream(d, 'POST', '/images/load?quiet=1', { input: file });
      loads.push(now() - t0);
      console.log(
        `  ${name} run ${i + 1}: save ${saves.at(-1).toFixed(0)} ms (cpu ${saveCpu.at(-1).toFixed(0)} ms, ${(statSync(file).size / 1e6).toFixed(1)} MB), load ${loads.at(-1).toFixed(0)} ms`,
      );
    }
  } finally {
    await d.stop();
  }
  const s = stats(saves);
  const l = stats(loads);
  console.log(
    `${name.padEnd(8)} save: median ${s.median.toFixed(0)} ms (cpu ${stats(saveCpu).median.toFixed(0)} ms); load: median ${l.median.toFixed(0)} ms (${runs} runs)`,
  );
  return { save: s, load: l };
}

await runBench(async () => {
  const { ref } = await largeImageRegistry(totalMiB, layerCount);
  // BERTH_BENCH_NODE_ARGS: node's arguments for berthd (e.g. --cpu-prof --cpu-prof-dir=DIR to profile it).
  const nodeArgs = (process.env.BERTH_BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const berth = await bench('berthd', () => startBerthd({ nodeArgs }), ref);
  if (!which('dockerd')) {
    console.log('dockerd not installed: run bench/run.sh --with-dockerd to compare');
    return;
  }
  const docker = await bench('dockerd', () => startDockerd(), ref);
  console.log(`save: berthd/dockerd time ${ratio(berth.save.median, docker.save.median, 0.6)}`);
  console.log(`load: berthd/dockerd time ${ratio(berth.load.median, docker.load.median, 0.6)}`);
});
