// The cost of json-file's copy (containers/io/jsonlog.ts): berthd's CPU per MiB
// of output, the log's bytes on disk, and `docker run --rm` with and without.
//   (a) a container writes N MiB of 80-byte lines; berthd's CPU time (utime +
//       stime of its process) over the run, and the files in its directory.
//   (b) `docker run --rm busybox true` and `echo hi` through the docker CLI,
//       interleaved run by run with a baseline berthd when
//       BERTH_BENCH_BASELINE names another build's bin/berthd.cjs (e.g. one
//       made from the commit before the copy).
// dockerd, when installed, is measured alike in (a) (dockerd and its
// containerd; the shim not counted).
//
// Usage: [BERTH_BENCH_BASELINE=…/bin/berthd.cjs] node bench/logcopy.mjs [MiB=32] [runs=30]
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { busyboxImage, pushImage } from '../fixtures/images.mjs';
import {
  clamp,
  cliRunner,
  dockerCli,
  MiB,
  pull,
  runBench,
  runInterleaved,
  startBerthd,
  startDockerd,
  startRegistry,
  tag,
  which,
} from './lib.mjs';

const SIZE = clamp(process.argv[2], 1, 1024, 32);
const RUNS = clamp(process.argv[3], 1, 200, 30);
const LINE = '0123456789'.repeat(8).slice(0, 79); // and its newline: 80 bytes

/** CPU time of the processes, ms (utime + stime, in USER_HZ = 100). */
function cpuMs(pids) {
  let ticks = 0;
  for (const pid of pids) {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    ticks += Number(f[11]) + Number(f[12]);
  }
  return ticks * 10;
}

/** dockerd's containerd (a child of it), when it started its own. */
function childrenOf(pid) {
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return readFileSync(`/proc/${p}/stat`, 'utf8').split(') ')[1].split(' ')[1] === String(pid);
      } catch {
        return false;
      }
    })
    .map(Number);
}

async function output(name, d, pids, containersDir) {
  const docker = dockerCli(d);
  const script = `yes ${LINE} | head -c ${SIZE * MiB}`;
  const c0 = cpuMs(pids);
  const t0 = performance.now();
  const r = await docker(['run', '-d', '--network', 'none', 'busybox', 'sh', '-c', script]);
  const id = r.stdout.trim();
  await docker(['wait', id]);
  const ms = performance.now() - t0;
  const cpu = cpuMs(pids) - c0;
  const dir = path.join(containersDir, id);
  const files = readdirSync(dir)
    .filter((f) => f.includes('.log') && !f.startsWith('runc'))
    .map((f) => `${f.length > 20 ? '<id>-json.log' : f} ${(statSync(path.join(dir, f)).size / MiB).toFixed(1)} MiB`);
  console.log(
    `${name.padEnd(10)} ${SIZE} MiB written, exit after ${ms.toFixed(0)} ms; CPU ${cpu} ms (${(cpu / SIZE).toFixed(1)} ms/MiB); ${files.join(', ')}`,
  );
  await docker(['rm', id]);
}

await runBench(async () => {
  const registry = await startRegistry();
  await pushImage(registry.url, 'busybox', 'latest', await busyboxImage());
  const ref = `${registry.host}/busybox:latest`;
  const named = [['berthd', await startBerthd()]];
  if (process.env.BERTH_BENCH_BASELINE)
    named.unshift(['baseline', await startBerthd({ bin: process.env.BERTH_BENCH_BASELINE })]);
  const dockerd = which('dockerd') ? await startDockerd() : null;
  for (const [, d] of [...named, ...(dockerd ? [['dockerd', dockerd]] : [])]) {
    await pull(d, ref);
    await tag(d, ref, 'busybox', 'latest');
  }
  console.log(`\n== (a) ${SIZE} MiB of 80-byte lines`);
  for (const [name, d] of named) await output(name, d, [d.proc.pid], path.join(d.dir, 'data/containers'));
  if (dockerd)
    await output(
      'dockerd',
      dockerd,
      [dockerd.pid, ...childrenOf(dockerd.pid)],
      path.join(dockerd.dir, 'data/containers'),
    );
  for (const [title, args, expected] of [
    ['(b) docker run --rm busybox true', undefined, ''],
    ['(b) docker run --rm busybox echo hi', ['run', '--rm', 'busybox', 'echo', 'hi'], 'hi\n'],
  ]) {
    await runInterleaved(
      title,
      named.map(([name, d]) => ({ name, run: cliRunner(d, args, expected) })),
      RUNS,
      3,
    );
  }
});
