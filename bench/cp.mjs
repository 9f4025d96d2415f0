// `docker cp` of 100 MiB (one file of random bytes) plus 2,000 small files (20
// directories of 100) into a running container and back out, with the docker
// CLI, berthd vs dockerd. Each run copies into a fresh path (`/in-N`) and out
// into a fresh host directory; the clock runs around the CLI command. With
// both daemons, their runs alternate, the first of each pair taking turns, so
// that both see the same load; each copy's CPU time (the daemon's process and
// the children it waited for: dockerd untars in one) is printed beside it, a
// steadier figure than wall time on a shared machine.
//
// The copies are removed only after the last run. On an ext4 without a journal
// (the test machines') a file created within a minute or so of thousands of
// deletions in the same block group pays for a scan past every one of them
// (the kernel's recently_deleted check): removing each run's copy made the next
// run's creations in that daemon's group slower and slower, by how full the
// group happened to be rather than by anything the daemon does.
//
// The copies out land in a host directory, which the docker CLI fills whichever
// daemon sent the tar: on this machine's disk that costs it from a third of a
// second to well over a second, by how much the kernel has left to write back
// (GNU tar takes 0.9-1.6 s to unpack the same tar there, 0.11 s on tmpfs), more
// than either daemon's part. BERTH_BENCH_OUT names another place for them (a
// tmpfs: /dev/shm) to see the daemons' part without the host disk's.
//
// Usage: node bench/cp.mjs [runs=5]
//   BERTH_BENCH_OUT=DIR  writes the copies out under DIR instead of the bench's temp dir
//   BERTH_BENCH_PROFILE=DIR  also writes berthd's CPU profiles (node --cpu-prof; one per thread) into DIR
//   BERTH_BENCH_ONLY_BERTHD=1  skips dockerd (for profiling)
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  busyboxRegistry,
  createContainer,
  dockerCli,
  fmtMs,
  MiB,
  pull,
  ratio,
  runBench,
  startBerthd,
  startContainer,
  startDockerd,
  stats,
  tempDir,
  which,
} from './lib.mjs';

const runs = Math.max(1, Math.min(50, Number(process.argv[2] ?? 5)));
const profileDir = process.env.BERTH_BENCH_PROFILE ? path.resolve(process.env.BERTH_BENCH_PROFILE) : undefined;

/** CPU ms (user + system) of the process and of the children it has waited for. */
function cpuMs(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return ((Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * 1000) / 100; // clock ticks (USER_HZ 100)
}

/**
 * Writes back what the copies before left dirty, off the clock: a copy that
 * found the kernel writing back the last one's 100 MiB was throttled by it,
 * its time set by whichever copy came before rather than by its daemon.
 */
const settle = () => execFileSync('sync');

/** The tree copied in: big.bin and files/dD/fF.txt. */
function sourceTree(dir) {
  const src = path.join(dir, 'src');
  mkdirSync(src);
  writeFileSync(path.join(src, 'big.bin'), randomBytes(100 * MiB));
  for (let d = 1; d <= 20; d++) {
    mkdirSync(path.join(src, 'files', `d${d}`), { recursive: true });
    for (let f = 1; f <= 100; f++)
      writeFileSync(path.join(src, 'files', `d${d}`, `f${f}.txt`), `file ${f} of directory ${d}, a line of text\n`);
  }
  return src;
}

await runBench(async () => {
  const { ref } = await busyboxRegistry();
  const work = tempDir('bench-cp-');
  const src = sourceTree(work);
  const outRoot = process.env.BERTH_BENCH_OUT ? tempDir('bench-cp-out-', process.env.BERTH_BENCH_OUT) : work;
  const daemons = [await startBerthd(profileDir ? { nodeArgs: ['--cpu-prof', '--cpu-prof-dir', profileDir] } : {})];
  if (which('dockerd') && !process.env.BERTH_BENCH_ONLY_BERTHD) daemons.push(await startDockerd());
  const targets = [];
  for (const d of daemons) {
    await pull(d, ref);
    const id = await createContainer(d, { Image: ref, Cmd: ['sleep', '100000'] });
    await startContainer(d, id);
    targets.push({ d, id, cli: dockerCli(d), in: [], out: [], inCpu: [], outCpu: [] });
  }
  console.log(
    `100 MiB + 2,000 files, out into ${outRoot}; ${runs} runs per daemon${daemons.length > 1 ? ', alternating' : ''}; load average ${os.loadavg()[0].toFixed(2)} on ${os.availableParallelism()} CPUs`,
  );
  for (let i = 0; i < runs; i++) {
    const line = [];
    for (const t of i % 2 === 0 ? targets : [...targets].reverse()) {
      settle();
      const c0 = cpuMs(t.d.pid);
      const into = await t.cli(['cp', src, `${t.id}:/in-${i}`]);
      if (into.code !== 0) throw new Error(`${t.d.kind} cp in: ${into.stderr}`);
      const outDir = path.join(outRoot, `${t.d.kind}-out-${i}`);
      settle();
      const c1 = cpuMs(t.d.pid);
      const out = await t.cli(['cp', `${t.id}:/in-${i}`, outDir]);
      if (out.code !== 0) throw new Error(`${t.d.kind} cp out: ${out.stderr}`);
      const c2 = cpuMs(t.d.pid);
      t.in.push(into.ms);
      t.out.push(out.ms);
      t.inCpu.push(c1 - c0);
      t.outCpu.push(c2 - c1);
      line.push(
        `${t.d.kind} in ${into.ms.toFixed(0)} ms (cpu ${c1 - c0}), out ${out.ms.toFixed(0)} ms (cpu ${c2 - c1})`,
      );
    }
    console.log(`  run ${i + 1}: ${line.join('; ')}; load ${os.loadavg()[0].toFixed(2)}`);
  }
  for (const t of targets) {
    console.log(`${t.d.kind.padEnd(8)} cp in:  ${fmtMs(stats(t.in))}; cpu median ${stats(t.inCpu).median} ms`);
    console.log(`${t.d.kind.padEnd(8)} cp out: ${fmtMs(stats(t.out))}; cpu median ${stats(t.outCpu).median} ms`);
  }
  if (targets.length < 2) {
    console.log('dockerd: not installed; berthd figures only');
    return;
  }
  const [b, k] = targets;
  const both = (t) => t.in.map((x, j) => x + t.out[j]);
  // Each run's pair ran back to back, under much the same load: the median of the per-run ratios.
  const paired = (a, b) => stats(a.map((x, j) => x / b[j])).median;
  console.log(`paired ratio berthd/dockerd cp in (median of runs):  ${paired(b.in, k.in).toFixed(2)}×`);
  console.log(`paired ratio berthd/dockerd cp out (median of runs): ${paired(b.out, k.out).toFixed(2)}×`);
  console.log(`ratio berthd/dockerd cp in (median):  ${ratio(stats(b.in).median, stats(k.in).median, 0.7)}`);
  console.log(`ratio berthd/dockerd cp out (median): ${ratio(stats(b.out).median, stats(k.out).median, 0.7)}`);
  console.log(`ratio berthd/dockerd in + out (median): ${ratio(stats(both(b)).median, stats(both(k)).median, 0.7)}`);
});
