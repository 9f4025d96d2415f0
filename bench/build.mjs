// `docker build` with the classic builder, berthd beside dockerd's (issue 17's
// "Done when"): a 5-step Dockerfile (FROM busybox, COPY of 2,000 files, RUN,
// ENV, CMD), timed
//   cold:   every step made (nocache=1; the base image is present), and
//   cached: every step from the cache (a build of the same context again),
// both through the API (POST /build with the context tar made once: the
// daemon's own time) and through the docker CLI (DOCKER_BUILDKIT=0 docker
// build: what a user waits for, the CLI packing the context each time). The
// targets interleaved run by run. Each run's stream is checked: the steps, the
// cache lines, the id.
//
// Both daemons have networking on their default bridge (a RUN step's
// container joins it): dockerd in a network namespace of its own, berthd with
// a bridge, pool and chains of its own (bench/network.mjs does the same).
//
// Usage: node bench/build.mjs [runs=10] [files=2000]   (as root, after npm run build)
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import tarStream from 'tar-stream';
import { busyboxImage } from '../fixtures/images.mjs';
import {
  berthdWithNetworks,
  clamp,
  dockerCli,
  dockerdWithNetworks,
  fmtMs,
  loadImage,
  now,
  ratio,
  runBench,
  stats,
  tempDir,
  which,
} from './lib.mjs';

const RUNS = clamp(process.argv[2], 1, 100, 10);
const FILES = clamp(process.argv[3], 1, 100_000, 2000);
const WARMUP = 1;
const id = randomBytes(3).toString('hex');
// The classic builder for every `docker build` below (the CLI's environment is taken when dockerCli makes it).
process.env.DOCKER_BUILDKIT = '0';

const DOCKERFILE = [
  'FROM busybox',
  'COPY files/ /files/',
  'RUN find /files -type f | wc -l > /count.txt',
  'ENV BENCH=build',
  'CMD ["cat", "/count.txt"]',
  '',
].join('\n');

/** The context on disk (for the CLI) and as a tar (for the API): 2,000 files of 1–4 KiB in 20 directories. */
async function makeContext() {
  const dir = tempDir('berth-bench-build-');
  writeFileSync(path.join(dir, 'Dockerfile'), DOCKERFILE);
  const pack = tarStream.pack();
  const chunks = [];
  const packed = (async () => {
    for await (const c of pack) chunks.push(c);
  })();
  const entry = (name, body) =>
    new Promise((resolve, reject) => pack.entry({ name, mode: 0o644 }, body, (e) => (e ? reject(e) : resolve())));
  await entry('Dockerfile', DOCKERFILE);
  let bytes = 0;
  for (let i = 0; i < FILES; i++) {
    const rel = `files/d${i % 20}/f${i}.txt`;
    const body = randomBytes(512 + (i % 7) * 256)
      .toString('base64')
      .slice(0, 1024 + (i % 4) * 1024);
    mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    writeFileSync(path.join(dir, rel), body);
    await entry(rel, body);
    bytes += body.length;
  }
  pack.finalize();
  await packed;
  return { dir, tar: Buffer.concat(chunks), bytes };
}

/** Checks a build's printed output: five steps, `hits` of them from the cache, an image at the end. */
function check(d, how, out, hits) {
  const steps = out.match(/^Step \d\/5 : /gm)?.length ?? 0;
  const cached = out.split('\n').filter((l) => l === ' ---> Using cache').length;
  if (steps !== 5 || cached !== hits || !/^Successfully built [0-9a-f]{12}$/m.test(out))
    throw new Error(`${d.kind} ${how}: expected 5 steps, ${hits} from the cache:\n${out.slice(-3000)}`);
}

/** POST /build of the tar; resolves with its milliseconds (request to the end of the stream). */
function apiRunner(d, tar, { nocache }) {
  const q = `t=bench-build:api${nocache ? '&nocache=1' : ''}`;
  return async () => {
    const t0 = now();
    const r = await d.request('POST', `/v1.41/build?${q}`, {
      body: tar,
      headers: { 'Content-Type': 'application/x-tar' },
    });
    const ms = now() - t0;
    if (r.status !== 200) throw new Error(`${d.kind} build: HTTP ${r.status} ${r.text.slice(0, 500)}`);
    const records = r.text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    const failed = records.find((x) => x.error);
    if (failed) throw new Error(`${d.kind} build: ${failed.error}`);
    check(d, 'API', records.map((x) => x.stream ?? '').join(''), nocache ? 0 : 4);
    return ms;
  };
}

/** DOCKER_BUILDKIT=0 docker build of the directory; resolves with its milliseconds. */
function cliBuildRunner(d, dir, { nocache }) {
  const docker = dockerCli(d);
  const args = ['build', ...(nocache ? ['--no-cache'] : []), '-t', 'bench-build:cli', dir];
  return async () => {
    const r = await docker(args);
    if (r.code !== 0) throw new Error(`docker build on ${d.kind} exited ${r.code}: ${r.stderr}`);
    check(d, 'CLI', r.stdout, nocache ? 0 : 4);
    return r.ms;
  };
}

/** The image does what it says: 2,000 files counted by its RUN, ENV and CMD set. */
async function checkImage(d, ref) {
  const img = await d.request('GET', `/images/${ref}/json`);
  if (img.status !== 200) throw new Error(`${d.kind}: ${ref}: ${img.status} ${img.text}`);
  const c = img.json.Config;
  if (!c.Env.includes('BENCH=build') || JSON.stringify(c.Cmd) !== '["cat","/count.txt"]')
    throw new Error(`${d.kind}: ${ref} config ${JSON.stringify(c)}`);
  const out = await dockerCli(d)(['run', '--rm', '--network', 'none', ref]);
  if (out.stdout.trim() !== String(FILES)) throw new Error(`${d.kind}: ${ref} counted ${JSON.stringify(out.stdout)}`);
}

await runBench(async () => {
  if (!which('dockerd') || !which('docker'))
    throw new Error('needs dockerd and the docker CLI: bench/run.sh --with-dockerd');
  const load = () => execFileSync('cat', ['/proc/loadavg'], { encoding: 'utf8' }).split(' ').slice(0, 3).join(' ');
  console.log(`load average at start: ${load()} (${execFileSync('nproc', { encoding: 'utf8' }).trim()} cores)`);
  const ctx = await makeContext();
  console.log(
    `context: Dockerfile + ${FILES} files, ${(ctx.bytes / 1024 / 1024).toFixed(1)} MiB (tar ${(ctx.tar.length / 1024 / 1024).toFixed(1)} MiB)`,
  );
  const berthd = await berthdWithNetworks(id);
  const dockerd = await dockerdWithNetworks(id);
  const image = await busyboxImage();
  for (const d of [berthd, dockerd]) await loadImage(d, image, 'busybox:latest');

  const targets = [];
  for (const d of [berthd, dockerd]) {
    // A first build of each, so that the cached runs find every step.
    await apiRunner(d, ctx.tar, { nocache: true })();
    await cliBuildRunner(d, ctx.dir, { nocache: true })();
    await checkImage(d, 'bench-build:api');
    await checkImage(d, 'bench-build:cli');
  }
  for (const [label, nocache] of [
    ['cold', true],
    ['cached', false],
  ]) {
    for (const how of ['API', 'CLI']) {
      for (const d of [berthd, dockerd]) {
        const run = how === 'API' ? apiRunner(d, ctx.tar, { nocache }) : cliBuildRunner(d, ctx.dir, { nocache });
        targets.push({ name: `${label} ${how} ${d.kind}`, label, how, kind: d.kind, run });
      }
    }
  }

  console.log(`\n== 5-step build: ${RUNS} runs each (after ${WARMUP} warm-up), all eight interleaved`);
  const times = targets.map(() => []);
  for (let i = 0; i < WARMUP + RUNS; i++) {
    for (const [k, t] of targets.entries()) {
      const ms = await t.run();
      if (i >= WARMUP) times[k].push(ms);
    }
  }
  const s = {};
  for (const [k, t] of targets.entries()) {
    s[t.name] = stats(times[k]);
    console.log(`${t.name.padEnd(22)} ${fmtMs(s[t.name])}`);
  }

  console.log(`\n== summary (load average now ${load()}: figures taken under whatever else runs)`);
  for (const how of ['API', 'CLI']) {
    for (const [label, target] of [
      ['cold', 0.5],
      ['cached', 0.3],
    ]) {
      const b = s[`${label} ${how} berthd`];
      const dk = s[`${label} ${how} dockerd`];
      console.log(
        `${label.padEnd(6)} via ${how}: berthd ${b.median.toFixed(0)} ms, dockerd ${dk.median.toFixed(0)} ms (medians): ${ratio(b.median, dk.median, target)}; min/min ${ratio(b.min, dk.min)}`,
      );
    }
  }
});
