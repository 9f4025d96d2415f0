// Time of `POST /commit` for a container that wrote one 50 MiB file (random
// bytes, as compressed artifacts are) and 2,000 small text files (20
// directories of 100), berthd vs dockerd through the same API. Each run
// commits a fresh container (created, run to its end, and removed with the
// image it made outside the clock); the clock runs from the request to its
// answer. The container has exited: no pause is involved. With both daemons,
// their runs alternate, so that both see the same load on the machine.
//
// berthd answers once the image is stored (its blob in the content store, its
// record in SQLite) and makes the layer's tree on disk from the blob after;
// dockerd extracts the tree before it answers. So that the deferred work is
// not hidden, a second figure times commit + the first run of the new image
// (create, start and wait for `true`), which needs the tree on both daemons.
//
// Also shown: `tar -c` of berthd's upper dir piped into `tar -x`, what
// extracting the changes at commit time costs at the least.
//
// On ext4 without a journal (these machines), creating files soon after many
// were deleted nearby is slow (see src/engine/os/dirs.ts); every run here
// deletes its container and image, so dockerd's times grow run after run.
// The min-to-min ratio is printed beside the median one for that reason.
//
// Usage: node bench/commit.mjs [runs=5] [--dockerd-socket PATH]
//   --dockerd-socket PATH  compare with a dockerd already running there;
//                          otherwise one is started when dockerd is installed.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  busyboxRegistry,
  createContainer,
  fmtMs,
  now,
  pull,
  ratio,
  request,
  runBench,
  startBerthd,
  startContainer,
  startDockerd,
  stats,
  which,
} from './lib.mjs';

const args = process.argv.slice(2);
const socketAt = args.indexOf('--dockerd-socket');
const dockerdSocket = socketAt >= 0 ? args.splice(socketAt, 2)[1] : undefined;
const runs = Math.max(1, Math.min(50, Number(args[0] ?? 5)));

const WRITE = [
  'set -e',
  'head -c 52428800 /dev/urandom > /big.bin',
  'for d in $(seq 1 20); do mkdir -p /files/d$d; for f in $(seq 1 100); do echo "file $f of directory $d, some text to make it a line or two long" > /files/d$d/f$f.txt; done; done',
].join('\n');

/** A container that has written the files and exited; resolves with its id. */
async function writtenContainer(d, image) {
  const id = await createContainer(d, { Image: image, Cmd: ['sh', '-c', WRITE] });
  await startContainer(d, id);
  const wait = await d.request('POST', `/containers/${id}/wait`);
  if (wait.json?.StatusCode !== 0) throw new Error(`${d.kind}: the writing container exited with ${wait.text}`);
  return id;
}

/** One timed commit of a fresh container, then the timed first run of its image; everything else is untimed. */
async function commitOnce(d, image) {
  const id = await writtenContainer(d, image);
  const t0 = now();
  const r = await d.request('POST', `/commit?container=${id}`);
  const commitMs = now() - t0;
  if (r.status !== 201) throw new Error(`${d.kind} commit: HTTP ${r.status} ${r.text}`);
  const first = await createContainer(d, { Image: r.json.Id, Cmd: ['true'] });
  await startContainer(d, first);
  const wait = await d.request('POST', `/containers/${first}/wait`);
  const thenRunMs = now() - t0;
  if (wait.json?.StatusCode !== 0)
    throw new Error(`${d.kind}: the committed image's container exited with ${wait.text}`);
  for (const c of [first, id]) await d.request('DELETE', `/containers/${c}?force=1`);
  await d.request('DELETE', `/images/${r.json.Id}?force=1`);
  return { commitMs, thenRunMs };
}

/** `tar -c upper | tar -x` into a fresh directory beside the data root, in ms. */
function copyFloor(upper, near) {
  const dir = mkdtempSync(path.join(near, 'floor-'));
  try {
    const t0 = now();
    execFileSync('sh', ['-c', 'tar -C "$0" -cf - . | tar -C "$1" -xf -', upper, dir]);
    return now() - t0;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A dockerd that is already running: the same requests over its socket; nothing of it is stopped here. */
function existingDockerd(socket) {
  return {
    kind: 'dockerd',
    socket,
    host: `unix://${socket}`,
    request: (method, urlPath, opts) => request(socket, method, urlPath, opts),
  };
}

await runBench(async () => {
  const { registry, ref } = await busyboxRegistry();

  const berthd = await startBerthd();
  await pull(berthd, ref);
  let dockerd;
  if (dockerdSocket) dockerd = existingDockerd(dockerdSocket);
  else if (which('dockerd')) dockerd = await startDockerd();
  if (dockerd) await pull(dockerd, ref);
  console.log(
    `busybox from docker-registry at ${registry.host}; ${runs} commits per daemon${dockerd ? ', alternating' : ''}; load average ${os.loadavg()[0].toFixed(2)} on ${os.availableParallelism()} CPUs`,
  );

  const times = { berthd: [], dockerd: [], berthdRun: [], dockerdRun: [], floor: [] };
  const timed = async (d) => {
    const t = await commitOnce(d, ref);
    times[d.kind].push(t.commitMs);
    times[`${d.kind}Run`].push(t.thenRunMs);
  };
  for (let i = 0; i < runs; i++) {
    await timed(berthd);
    if (dockerd) await timed(dockerd);
    times.floor.push(await floorOf(berthd, ref, path.join(berthd.dir, 'data')));
    const line = [
      `berthd ${times.berthd.at(-1).toFixed(0)} ms (+ run ${times.berthdRun.at(-1).toFixed(0)} ms)`,
      dockerd && `dockerd ${times.dockerd.at(-1).toFixed(0)} ms (+ run ${times.dockerdRun.at(-1).toFixed(0)} ms)`,
      `floor ${times.floor.at(-1).toFixed(0)} ms`,
    ];
    console.log(`  run ${i + 1}: ${line.filter(Boolean).join(', ')}`);
  }
  const berth = stats(times.berthd);
  const berthRun = stats(times.berthdRun);
  console.log(`berthd   commit (50 MiB + 2,000 files): ${fmtMs(berth)}`);
  console.log(`berthd   commit + first run of it:      ${fmtMs(berthRun)}`);
  console.log(`floor    tar -c upper | tar -x:          ${fmtMs(stats(times.floor))}`);
  if (!dockerd) {
    console.log('dockerd: not installed and no --dockerd-socket given; berthd figures only');
    return;
  }
  const docker = stats(times.dockerd);
  const dockerRun = stats(times.dockerdRun);
  console.log(`dockerd  commit (50 MiB + 2,000 files): ${fmtMs(docker)}`);
  console.log(`dockerd  commit + first run of it:      ${fmtMs(dockerRun)}`);
  console.log(`ratio berthd/dockerd commit time (median): ${ratio(berth.median, docker.median, 0.6)}`);
  console.log(`ratio berthd/dockerd commit time (min):    ${ratio(berth.min, docker.min, 0.6)}`);
  console.log(`ratio berthd/dockerd commit + first run (median): ${ratio(berthRun.median, dockerRun.median)}`);
});

/** The copy floor, measured on a container of its own (written the same way, then removed). */
async function floorOf(d, image, dataRoot) {
  const id = await writtenContainer(d, image);
  try {
    return copyFloor(path.join(dataRoot, 'containers', id, 'upper'), dataRoot);
  } finally {
    await d.request('DELETE', `/containers/${id}?force=1`);
  }
}
