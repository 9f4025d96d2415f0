// The workload after which issue 18's table reads an idle daemon's memory, shared
// by bench/table.mjs (berthd beside dockerd) and bench/memory.mjs (berthd alone,
// its memory taken apart over time): a registry holding busybox, 2 × IMAGES
// small images and a large one; then on a daemon IMAGES images pulled,
// containers created and listed, COMMITS commits of containers that wrote 8 MiB
// and 200 small files.
import { busyboxImage, largeImage, pushImage } from '../fixtures/images.mjs';
import { createContainer, mapLimit, now, pull, startContainer, startRegistry, stats } from './lib.mjs';

export const IMAGES = 50;
export const COMMITS = 5;

/** A registry with busybox, table/img0 … table/img{2 × IMAGES - 1} and large (100 MiB in 4 layers). */
export async function tableRegistry() {
  const registry = await startRegistry();
  const busybox = await busyboxImage();
  await pushImage(registry.url, 'busybox', 'latest', busybox);
  await mapLimit(
    Array.from({ length: 2 * IMAGES }, (_, i) => i),
    8,
    async (i) =>
      pushImage(registry.url, `table/img${i}`, 'latest', await busyboxImage({ config: { Labels: { n: String(i) } } })),
  );
  const large = await largeImage(100, 4);
  await pushImage(registry.url, 'large', 'latest', large);
  return {
    registry,
    large,
    largeBytes: large.layers.reduce((a, l) => a + l.size, 0),
    largeRef: `${registry.host}/large:latest`,
    busyboxRef: `${registry.host}/busybox:latest`,
  };
}

/** Pulls table/img{from} … table/img{to - 1}, four at a time. */
export async function pullImages(d, registry, from, to) {
  await mapLimit(
    Array.from({ length: to - from }, (_, i) => from + i),
    4,
    (i) => pull(d, `${registry.host}/table/img${i}:latest`),
  );
}

/** A busybox container that ran `cmd` to a zero exit; its id. */
export async function finishedContainer(d, cmd) {
  const id = await createContainer(d, { Image: 'busybox', Cmd: cmd });
  await startContainer(d, id);
  const w = await d.request('POST', `/containers/${id}/wait`);
  if (w.json?.StatusCode !== 0) throw new Error(`${d.kind}: ${cmd.join(' ')} exited ${w.text}`);
  return id;
}

/** COMMITS commits, each of a container that wrote 8 MiB and 200 small files, removed after. */
export async function commits(d) {
  for (let i = 0; i < COMMITS; i++) {
    const id = await finishedContainer(d, [
      'sh',
      '-c',
      `mkdir -p /data && dd if=/dev/urandom of=/data/blob bs=1M count=8 2>/dev/null && for n in $(seq 1 200); do echo $n > /data/f$n; done`,
    ]);
    const r = await d.request('POST', `/commit?container=${id}&repo=table/commit&tag=c${i}`);
    if (r.status !== 201) throw new Error(`${d.kind} commit: ${r.status} ${r.text}`);
    await d.request('DELETE', `/containers/${id}?force=1`);
  }
}

/** Creates `containers` busybox containers (eight at a time), then lists them all five times; prints the times. */
export async function fill(d, containers) {
  const t0 = now();
  await mapLimit(
    Array.from({ length: containers }, (_, i) => i),
    8,
    (i) => createContainer(d, { Image: 'busybox', Cmd: ['true'], Labels: { 'bench.n': String(i) } }),
  );
  const created = now() - t0;
  const list = [];
  for (let i = 0; i < 5; i++) {
    const t = now();
    const r = await d.request('GET', '/containers/json?all=1');
    if (r.status !== 200 || r.json.length < containers) throw new Error(`${d.kind} list: ${r.status}`);
    list.push(now() - t);
  }
  console.log(
    `${d.kind.padEnd(8)} created ${containers} containers in ${(created / 1000).toFixed(1)} s; list median ${stats(list).median.toFixed(1)} ms`,
  );
}

/** The workload whose end starts the idle clock: IMAGES pulls, `containers` created and listed, COMMITS commits. */
export async function workload(d, registry, containers) {
  await pullImages(d, registry, 0, IMAGES);
  await fill(d, containers);
  await commits(d);
}
