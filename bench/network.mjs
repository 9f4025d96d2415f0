// Networking side by side with dockerd (Debian docker.io) running WITH its
// default bridge and its iptables rules (issue 14's "Done when"):
//   (a) `docker run --rm busybox true` on each daemon's default bridge;
//   (b) the same with `--network none`, and on a berthd without networking
//       (`--bridge none --iptables=false`: how berth ran before it had
//       networks, and how bench/containers.mjs's figure was taken), so that a
//       regression of the none path shows;
//   (c) twenty `docker run -d` at once on one user network: containers per
//       second from the first CLI started to the last one answered.
// All through the docker CLI, the targets interleaved run by run.
//
// Neither daemon disturbs the host's own networking:
// - dockerd runs inside a network namespace of the bench's own (`ip netns
//   exec`), with its default bridge on a private /24 (`--bip`) and a private
//   pool for user networks: its docker0, br-*, DOCKER* chains, its
//   ip_forward and FORWARD policy are that namespace's, and go with it.
// - berthd runs on the host as the tests' daemons do (test/harness/network.ts):
//   its own default bridge name, bip, pool and iptables chain prefix; its
//   bridges and chains are removed at the end.
//
// Usage: node bench/network.mjs [runs=15] [rounds=5] [parallel=20]   (as root, after npm run build)
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { busyboxImage } from '../fixtures/images.mjs';
import {
  berthdWithNetworks,
  busyboxRegistry,
  clamp,
  cliRunner,
  dockerdWithNetworks,
  dockerCli,
  loadImage,
  mapLimit,
  now,
  onCleanup,
  pull,
  ratio,
  removeAllContainers,
  runBench,
  runInterleaved,
  startBerthd,
  tag,
  which,
  burstRates,
} from './lib.mjs';

const RUNS = clamp(process.argv[2], 1, 200, 15);
const ROUNDS = clamp(process.argv[3], 1, 50, 5);
const PARALLEL = clamp(process.argv[4], 1, 100, 20);
const WARMUP = 2;
const id = randomBytes(3).toString('hex');

// ─────────────────────────────── the daemons ───────────────────────────────

/** A user network on the daemon, removed at the end (berthd's bridge is noted for removal too). */
async function userNetwork(d) {
  const r = await d.request('POST', '/networks/create', { body: { Name: `bench-${id}`, Driver: 'bridge' } });
  if (r.status !== 201) throw new Error(`network create on ${d.kind}: ${r.status} ${r.text}`);
  const netId = r.json.Id;
  d.bridges?.add(`br-${netId.slice(0, 12)}`);
  // Before the daemon's own clean-up (LIFO): its containers first, then the network.
  onCleanup(async () => {
    await removeAllContainers(d);
    await d.request('DELETE', `/networks/${netId}`);
  });
  return `bench-${id}`;
}

// ─────────────────────────────── (c) parallel run -d ───────────────────────────────

/** PARALLEL `docker run -d` at once on the network; resolves with the wall time in ms. */
async function parallelRun(d, network) {
  const docker = dockerCli(d);
  const t0 = now();
  const results = await mapLimit(
    Array.from({ length: PARALLEL }, (_, i) => i),
    PARALLEL,
    () => docker(['run', '-d', '--network', network, 'busybox', 'sleep', '600']),
  );
  const ms = now() - t0;
  const failed = results.find((r) => r.code !== 0);
  if (failed) throw new Error(`docker run -d on ${d.kind} exited ${failed.code}: ${failed.stderr}`);
  const ids = results.map((r) => r.stdout.trim());
  await checkDistinctAddresses(d, ids, network);
  await removeAllContainers(d);
  return ms;
}

/** The containers all run, each with an address of its own on the network. */
async function checkDistinctAddresses(d, ids, network) {
  const addrs = new Set();
  for (const cid of ids) {
    const r = await d.request('GET', `/containers/${cid}/json`);
    const ip = r.json?.NetworkSettings?.Networks?.[network]?.IPAddress;
    if (!r.json?.State?.Running || !ip) throw new Error(`${d.kind}: container ${cid} not running with an address`);
    addrs.add(ip);
  }
  if (addrs.size !== ids.length) throw new Error(`${d.kind}: ${ids.length} containers, ${addrs.size} addresses`);
}

async function parallelRuns(daemons) {
  console.log(
    `\n== (c) ${PARALLEL} × docker run -d --network <user network> busybox sleep 600 at once: ${ROUNDS} rounds each (after 1 warm-up), interleaved`,
  );
  const networks = [];
  for (const d of daemons) networks.push(await userNetwork(d));
  return burstRates(daemons, ROUNDS, PARALLEL, (d, k) => parallelRun(d, networks[k]));
}

// ─────────────────────────────────── main ───────────────────────────────────

await runBench(async () => {
  if (!which('dockerd') || !which('docker'))
    throw new Error('needs dockerd and the docker CLI: bench/run.sh --with-dockerd');
  const load = () => execFileSync('cat', ['/proc/loadavg'], { encoding: 'utf8' }).split(' ').slice(0, 3).join(' ');
  console.log(`load average at start: ${load()} (${execFileSync('nproc', { encoding: 'utf8' }).trim()} cores)`);
  const { ref } = await busyboxRegistry();
  const berthd = await berthdWithNetworks(id);
  const dockerd = await dockerdWithNetworks(id);
  const bare = await startBerthd({ args: ['--bridge', 'none', '--iptables=false'] });
  for (const d of [berthd, bare]) {
    await pull(d, ref);
    await tag(d, ref, 'busybox', 'latest');
  }
  // The registry listens on the host's loopback, which dockerd's namespace does not reach.
  await loadImage(dockerd, await busyboxImage(), 'busybox:latest');
  const none = ['run', '--rm', '--network', 'none', 'busybox', 'true'];
  const run = await runInterleaved(
    '(a, b) docker run --rm busybox true',
    [
      { name: 'berthd, default bridge', run: cliRunner(berthd) },
      { name: 'dockerd, default bridge', run: cliRunner(dockerd) },
      { name: 'berthd, --network none', run: cliRunner(berthd, none) },
      { name: 'dockerd, --network none', run: cliRunner(dockerd, none) },
      { name: 'berthd without networking', run: cliRunner(bare) },
    ],
    RUNS,
    WARMUP,
  );
  await bare.stop();
  const par = await parallelRuns([berthd, dockerd]);

  console.log(`\n== summary (load average now ${load()}: figures taken under whatever else runs)`);
  const m = (k) => run[k].median;
  console.log(
    `(a) run --rm on the default bridge, berthd/dockerd (median): ${ratio(m('berthd, default bridge'), m('dockerd, default bridge'), 0.5)}`,
  );
  console.log(
    `(b) run --rm --network none, berthd/dockerd (median): ${ratio(m('berthd, --network none'), m('dockerd, --network none'))}; ` +
      `berthd none / berthd without networking: ${ratio(m('berthd, --network none'), m('berthd without networking'))}`,
  );
  console.log(
    `(c) ${PARALLEL} parallel run -d, rate berthd/dockerd: ${ratio(par.berthd.rate, par.dockerd.rate, 2, 'higher')}`,
  );
});
