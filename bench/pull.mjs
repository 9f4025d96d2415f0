// Cold pull throughput of a 100 MiB image from a loopback registry: berthd,
// dockerd (Debian docker.io, when installed) and the floor, interleaved round
// by round so that they share the machine's load. Each berthd and dockerd run
// gets a freshly started daemon on a fresh data root; the clock runs from the
// POST /images/create request to the end of its progress stream. MB/s =
// compressed bytes of the image's layers / that wall time (MB = 10^6 bytes).
//
// The floor: every layer at once (the daemons download 3 at a time, their
// default max-concurrent-downloads), `curl` of its blob from the same registry
// piped into `tar -xz` into a fresh directory on the same disk (no digest, no
// stored blob, no fsync). "floor+" does what a pull must do besides: the blob
// is also written to a file and fsync'd, and both the blob and the tar are
// hashed (sha256sum), still with external tools.
//
// CPU seconds per pull are steadier than wall time on a loaded machine: for a
// daemon, /proc/<pid>/stat utime+stime+cutime+cstime across the pull (its
// threads, and the children it reaped: dockerd's docker-untar); for the
// floors, the processes their shell ran. The registry's CPU per pull is shown
// too: it shares the cores.
//
// Usage: node bench/pull.mjs [runs=3] [totalMiB=100] [layers=4]
//   BERTH_BENCH_PROFILE=DIR  also writes a berthd CPU profile (node --cpu-prof) per run into DIR
//   BERTH_BENCH_BASE=FILE    also runs this berthd launcher (another build: bin/berthd.cjs), as "base"
//   BERTH_BENCH_NO_DOCKERD=1 leaves dockerd out
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import {
  largeImageRegistry,
  MiB,
  now,
  pull,
  ratio,
  removeTree,
  runBench,
  startBerthd,
  startDockerd,
  stats,
  tempDir,
  which,
} from './lib.mjs';

const runs = Math.max(1, Math.min(20, Number(process.argv[2] ?? 3)));
const totalMiB = Number(process.argv[3] ?? 100);
const layerCount = Number(process.argv[4] ?? 4);
const profileDir = process.env.BERTH_BENCH_PROFILE ? path.resolve(process.env.BERTH_BENCH_PROFILE) : undefined;
const CLK_TCK = 100;

/** CPU seconds (user + system) of a process so far, its threads and the children it reaped included. */
function cpuSeconds(pid) {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / CLK_TCK;
  } catch {
    return NaN;
  }
}

/** Children of a process (of its main thread, which spawns them), as pids. */
function childrenOf(pid) {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
  } catch {
    return [];
  }
}

/** The registry's process (docker-registry under the watchdog shell). */
function registryPid() {
  for (const shell of childrenOf(process.pid)) {
    for (const k of childrenOf(shell)) {
      try {
        if (readFileSync(`/proc/${k}/comm`, 'utf8').trim().startsWith('docker-regist')) return Number(k);
      } catch {}
    }
  }
  return undefined;
}

/** Runs a bash script; resolves with the CPU seconds (user + system) of the processes it ran. */
function sh(script, env) {
  return new Promise((resolve, reject) => {
    const p = spawn('bash', ['-c', `${script}\nwait\ntimes`], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    p.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`floor: exit ${code}: ${err}`));
      // `times`: the shell's user and system time, then its children's.
      const children = out.trim().split('\n').at(-1).split(' ');
      const secs = (t) => {
        const m = /^(\d+)m([\d.]+)s$/.exec(t);
        return m ? Number(m[1]) * 60 + Number(m[2]) : NaN;
      };
      resolve(secs(children[0]) + secs(children[1]));
    });
  });
}

function daemonTarget(name, start) {
  return {
    name,
    async run(ref, reg) {
      const d = await start();
      try {
        const c0 = cpuSeconds(d.pid);
        const r0 = cpuSeconds(reg);
        const t0 = now();
        await pull(d, ref);
        const seconds = (now() - t0) / 1000;
        return { seconds, cpu: cpuSeconds(d.pid) - c0, reg: cpuSeconds(reg) - r0 };
      } finally {
        await d.stop();
      }
    },
  };
}

function floorTarget(name, registry, layers, full) {
  return {
    name,
    async run(_ref, reg) {
      const dir = tempDir('berth-bench-floor-');
      const r0 = cpuSeconds(reg);
      const t0 = now();
      const cpus = await Promise.all(
        layers.map(async (l, i) => {
          const into = path.join(dir, `l${i}`);
          mkdirSync(into);
          const url = `${registry.url}/v2/large/blobs/${l.digest}`;
          const script = full
            ? 'curl -sf "$URL" | tee >(sha256sum >/dev/null) "$BLOB" | gunzip | tee >(sha256sum >/dev/null) | tar -x -C "$INTO" && sync "$BLOB"'
            : 'curl -sf "$URL" | tar -xz -C "$INTO"';
          return sh(script, { URL: url, INTO: into, BLOB: path.join(dir, `b${i}`) });
        }),
      );
      const seconds = (now() - t0) / 1000;
      removeTree(dir); // the image's size again, each run: not kept until the end
      return { seconds, cpu: cpus.reduce((a, b) => a + b, 0), reg: cpuSeconds(reg) - r0 };
    },
  };
}

await runBench(async () => {
  const { registry, image, ref, bytes } = await largeImageRegistry(totalMiB, layerCount);
  const reg = registryPid();

  if (profileDir) mkdirSync(profileDir, { recursive: true });
  const berthArgs = profileDir ? { nodeArgs: ['--cpu-prof', '--cpu-prof-dir', profileDir] } : {};
  const targets = [daemonTarget('berthd', () => startBerthd(berthArgs))];
  if (process.env.BERTH_BENCH_BASE) {
    const bin = path.resolve(process.env.BERTH_BENCH_BASE);
    targets.push(daemonTarget('base', () => startBerthd({ ...berthArgs, bin })));
  }
  const withDockerd = !process.env.BERTH_BENCH_NO_DOCKERD && which('dockerd');
  if (withDockerd) targets.push(daemonTarget('dockerd', () => startDockerd()));
  const withFloor = ['curl', 'tar', 'gunzip', 'sha256sum'].every((c) => which(c));
  if (withFloor) {
    targets.push(floorTarget('floor', registry, image.layers, false));
    targets.push(floorTarget('floor+', registry, image.layers, true));
  } else console.log('curl, tar, gunzip or sha256sum missing: no floor');

  const results = new Map(targets.map((t) => [t.name, []]));
  for (let i = 0; i < runs; i++) {
    for (const t of targets) {
      const r = await t.run(ref, reg);
      results.get(t.name).push(r);
      const mbs = bytes / 1e6 / r.seconds;
      const cpu = Number.isNaN(r.cpu) ? '' : `, ${r.cpu.toFixed(2)} CPU s`;
      console.log(
        `  round ${i + 1} ${t.name.padEnd(7)} ${r.seconds.toFixed(2)} s, ${mbs.toFixed(1)} MB/s (${(bytes / MiB / r.seconds).toFixed(1)} MiB/s)${cpu}, registry ${r.reg.toFixed(2)} CPU s`,
      );
    }
  }
  if (profileDir) console.log(`  berthd CPU profiles in ${profileDir}`);
  const rate = new Map();
  for (const [name, rs] of results) {
    const s = stats(rs.map((r) => bytes / 1e6 / r.seconds));
    rate.set(name, s);
    const cpu = rs.some((r) => !Number.isNaN(r.cpu)) ? stats(rs.map((r) => r.cpu)) : undefined;
    console.log(
      `${name.padEnd(8)} cold pull: median ${s.median.toFixed(1)} MB/s, min ${s.min.toFixed(1)}, max ${s.max.toFixed(1)}` +
        (cpu ? `; CPU median ${cpu.median.toFixed(2)} s (${cpu.min.toFixed(2)}–${cpu.max.toFixed(2)})` : '') +
        ` (${runs} runs)`,
    );
  }
  const b = rate.get('berthd').median;
  if (withFloor) {
    console.log(`ratio berthd/floor throughput (median): ${ratio(b, rate.get('floor').median)}`);
    console.log(`ratio berthd/floor+ throughput (median): ${ratio(b, rate.get('floor+').median)}`);
  }
  if (rate.has('base')) console.log(`ratio berthd/base throughput (median): ${ratio(b, rate.get('base').median)}`);
  if (withDockerd)
    console.log(`ratio berthd/dockerd throughput (median): ${ratio(b, rate.get('dockerd').median, 1.5, 'higher')}`);
  else if (!which('dockerd')) console.log('dockerd not installed: run bench/run.sh --with-dockerd to compare');
  console.log(`load average: ${readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')}`);
});
