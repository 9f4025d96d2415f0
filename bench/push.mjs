// Push throughput of a ~105 MB 4-layer image to a loopback registry, berthd vs
// dockerd (Debian docker.io, when installed). Each daemon pulls the image once
// from a source registry (not timed); each run then pushes it, under a new
// tag name, to a fresh empty registry, so that every blob is uploaded (none
// skipped, none mounted). The clock runs from the POST /images/{name}/push
// request to the end of its progress stream. MB/s = compressed bytes of the
// image's layers / that wall time (MB = 10^6 bytes).
//
// Usage: node bench/push.mjs [runs=3] [totalMiB=100] [randomLayers=3]
//   (the image is busybox + randomLayers layers of random data)
import * as lib from './lib.mjs';

const runs = Math.max(1, Math.min(20, Number(process.argv[2] ?? 3)));
const totalMiB = Number(process.argv[3] ?? 100);
const randomLayers = Number(process.argv[4] ?? 3);
/** `{}`: anonymous (dockerd 20.10 refuses a push without the header). */
const ANONYMOUS = Buffer.from('{}').toString('base64');

async function push(d, name, tagName) {
  const r = await d.request('POST', `/images/${encodeURIComponent(name)}/push?tag=${encodeURIComponent(tagName)}`, {
    headers: { 'X-Registry-Auth': ANONYMOUS },
  });
  if (r.status !== 200) throw new Error(`push ${name}:${tagName} on ${d.kind}: ${r.status} ${r.text}`);
  const msgs = r.text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  const failed = msgs.find((m) => m.error);
  if (failed) throw new Error(`push ${name}:${tagName} on ${d.kind}: ${failed.error}`);
  return msgs;
}

async function timedPushes(name, start, source, bytes) {
  const d = await start();
  const rates = [];
  try {
    await lib.pull(d, source);
    for (let i = 0; i < runs; i++) {
      const target = await lib.startRegistry();
      try {
        const repo = `${target.host}/pushed`;
        await lib.tag(d, source, repo, 'latest');
        const t0 = lib.now();
        await push(d, repo, 'latest');
        const seconds = (lib.now() - t0) / 1000;
        const mbs = bytes / 1e6 / seconds;
        rates.push(mbs);
        console.log(`  ${name} run ${i + 1}: ${seconds.toFixed(2)} s, ${mbs.toFixed(1)} MB/s`);
      } finally {
        await target.stop();
      }
    }
  } finally {
    await d.stop();
  }
  const s = lib.stats(rates);
  console.log(
    `${name.padEnd(8)} push: median ${s.median.toFixed(1)} MB/s, min ${s.min.toFixed(1)}, max ${s.max.toFixed(1)} (${runs} runs, empty registry each)`,
  );
  return s;
}

await lib.runBench(async () => {
  const { image, ref: source, bytes } = await lib.largeImageRegistry(totalMiB, randomLayers);
  console.log(
    `image: ${image.layers.length} layers (busybox + ${randomLayers} of random data), ${(bytes / 1e6).toFixed(1)} MB (${(bytes / lib.MiB).toFixed(1)} MiB) compressed`,
  );
  const berth = await timedPushes('berthd', () => lib.startBerthd(), source, bytes);
  if (!lib.which('dockerd')) {
    console.log('dockerd not installed: run bench/run.sh --with-dockerd to compare');
    return;
  }
  const docker = await timedPushes('dockerd', () => lib.startDockerd(), source, bytes);
  console.log(`ratio berthd/dockerd throughput (median): ${lib.ratio(berth.median, docker.median, 1.5, 'higher')}`);
});
