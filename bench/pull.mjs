// Cold pull throughput of a 100 MiB image from a loopback registry, berthd vs
// dockerd (Debian docker.io, when installed). Each run gets a freshly started
// daemon on a fresh data root; the clock runs from the POST /images/create
// request to the end of its progress stream. MB/s = compressed bytes of the
// image's layers / that wall time (MB = 10^6 bytes; MiB/s also shown).
//
// Usage: node bench/pull.mjs [runs=3] [totalMiB=100] [layers=4]
//   BERTH_BENCH_PROFILE=DIR  also writes a berthd CPU profile (node --cpu-prof) per run into DIR
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import {
  largeImageRegistry,
  MiB,
  now,
  pull,
  ratio,
  runBench,
  startBerthd,
  startDockerd,
  stats,
  which,
} from './lib.mjs';

const runs = Math.max(1, Math.min(20, Number(process.argv[2] ?? 3)));
const totalMiB = Number(process.argv[3] ?? 100);
const layerCount = Number(process.argv[4] ?? 4);
const profileDir = process.env.BERTH_BENCH_PROFILE ? path.resolve(process.env.BERTH_BENCH_PROFILE) : undefined;

async function timedPulls(name, start, ref, bytes) {
  const rates = [];
  for (let i = 0; i < runs; i++) {
    const d = await start();
    try {
      const t0 = now();
      await pull(d, ref);
      const seconds = (now() - t0) / 1000;
      const mbs = bytes / 1e6 / seconds;
      rates.push(mbs);
      console.log(
        `  ${name} run ${i + 1}: ${seconds.toFixed(2)} s, ${mbs.toFixed(1)} MB/s (${(bytes / MiB / seconds).toFixed(1)} MiB/s)`,
      );
    } finally {
      await d.stop();
    }
  }
  const s = stats(rates);
  console.log(
    `${name.padEnd(8)} cold pull: median ${s.median.toFixed(1)} MB/s, min ${s.min.toFixed(1)}, max ${s.max.toFixed(1)} (${runs} runs, fresh data root each)`,
  );
  return s;
}

await runBench(async () => {
  const { registry, image, ref, bytes } = await largeImageRegistry(totalMiB, layerCount);
  console.log(
    `image: ${image.layers.length} layers (busybox base + ${layerCount} of random data), ${(bytes / MiB).toFixed(1)} MiB compressed, from docker-registry at ${registry.host}`,
  );

  if (profileDir) mkdirSync(profileDir, { recursive: true });
  const berthArgs = profileDir ? { nodeArgs: ['--cpu-prof', '--cpu-prof-dir', profileDir] } : {};
  const berth = await timedPulls('berthd', () => startBerthd(berthArgs), ref, bytes);
  if (profileDir) console.log(`  berthd CPU profiles in ${profileDir}`);

  if (!which('dockerd')) {
    console.log('dockerd not installed: run bench/run.sh --with-dockerd to compare');
    return;
  }
  const docker = await timedPulls('dockerd', () => startDockerd(), ref, bytes);
  console.log(`ratio berthd/dockerd throughput (median): ${ratio(berth.median, docker.median, 1.5, 'higher')}`);
});
