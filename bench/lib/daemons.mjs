// berthd and Debian's dockerd on temp directories and sockets (each undone at the end), and the
// requests the benches make of them (pull, tag, load, create, start, remove).
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tarStream from 'tar-stream';
import { BERTHD, ROOT, mapLimit, onCleanup, sleep, tempDir, which } from './core.mjs';
import { expectOk, request, tail, waitForPing } from './http.mjs';
import { removeTree } from './mounts.mjs';
import { readdirSafe } from './processes.mjs';

/**
 * A daemon handle: socket, DOCKER_HOST, pid, request(), stop() (removes its
 * containers first, then SIGTERM, then its directories).
 */
function daemonHandle(kind, dir, socket, proc, logs) {
  const exited = new Promise((r) => (proc.exitCode !== null ? r() : proc.once('exit', () => r())));
  const d = {
    kind,
    dir,
    socket,
    host: `unix://${socket}`,
    pid: proc.pid,
    proc,
    logs,
    request: (method, urlPath, opts) => request(socket, method, urlPath, opts),
  };
  // d.proc, not proc: a bench that restarts the daemon on the same directories puts the new process there.
  d.stop = onCleanup(async () => {
    const p = d.proc;
    if (p.exitCode === null && p.signalCode === null) {
      await removeAllContainers(d).catch((e) => console.error(`bench: removing ${kind}'s containers: ${e.message}`));
      const gone = p === proc ? exited : new Promise((r) => p.once('exit', r));
      p.kill('SIGTERM');
      const killer = setTimeout(() => p.kill('SIGKILL'), 30_000);
      await gone;
      clearTimeout(killer);
    }
    await sleep(50);
    removeTree(dir);
  });
  return d;
}

let snapshot;

/**
 * A private copy of the build (bin/, dist/, the native addon, the migrations
 * and whatever else berthd reads beside its code), made once per bench
 * process: a rebuild of the work tree while the bench runs then cannot pull
 * files out from under the daemons it starts. Returns the copy's launcher.
 */
export function buildSnapshot() {
  if (snapshot) return snapshot;
  if (!existsSync(BERTHD)) throw new Error(`${BERTHD} is missing: build first (npm run -s build)`);
  const dir = tempDir('berth-bench-build-');
  // With their times: the launcher takes the code cache only for the bundle it was made from
  // (its size and modification time), and a bench's daemons seldom live the 2 s it takes to write another.
  cpSync(path.join(ROOT, 'bin'), path.join(dir, 'bin'), { recursive: true, preserveTimestamps: true });
  cpSync(path.join(ROOT, 'dist'), path.join(dir, 'dist'), { recursive: true, preserveTimestamps: true });
  // src/ minus sources and the addon's intermediate build files: data files read at run time.
  cpSync(path.join(ROOT, 'src'), path.join(dir, 'src'), {
    recursive: true,
    filter: (from) => !/\.(ts|cc|c|h|o|d|mk|gyp|gypi)$/.test(from) && !/\/(obj\.target|\.deps)(\/|$)/.test(from),
  });
  cpSync(path.join(ROOT, 'package.json'), path.join(dir, 'package.json'));
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
  snapshot = path.join(dir, path.relative(ROOT, BERTHD));
  return snapshot;
}

/**
 * A daemon leaves its parent cgroup (`/docker`, `/berth` in each v1 hierarchy)
 * behind when it stops: the ones not there before are removed at the end, after
 * the daemons (clean-ups run last-in first-out; only an empty cgroup goes).
 */
function removeCgroupParentAfter(name) {
  const cgroups = readdirSafe('/sys/fs/cgroup')
    .map((c) => `/sys/fs/cgroup/${c}/${name}`)
    .filter((c) => !existsSync(c));
  onCleanup(() => {
    for (const c of cgroups) if (existsSync(c)) spawnSync('rmdir', [c], { stdio: 'ignore' });
  });
}

/**
 * A bench daemon's temp directory: its socket, data root and exec root under
 * it, a config file of `{}` (hermetic: never the machine's /etc/berth or
 * /etc/docker daemon.json), logs at warn; and those as the daemon's arguments.
 */
function daemonDir(prefix, socketName) {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  const socket = path.join(dir, socketName);
  const configFile = path.join(dir, 'daemon.json');
  writeFileSync(configFile, '{}\n');
  const daemonArgs = [
    ...['-H', `unix://${socket}`, '--data-root', path.join(dir, 'data'), '--exec-root', path.join(dir, 'exec')],
    ...['--config-file', configFile, '--log-level', 'warn'],
  ];
  return { dir, socket, daemonArgs };
}

/**
 * berthd on a fresh temp socket, data root and exec root. `bin` defaults to
 * $BERTH_BENCH_BERTHD, else a snapshot of this work tree's build (buildSnapshot).
 * Without a `--bridge` of its own in `args` it runs with no default bridge and
 * no firewall, as dockerd does here (startDockerd), and leaves the host's network
 * as it found it; bench/network.mjs gives one a bridge, prefix and clean-up.
 */
export async function startBerthd({
  bin = process.env.BERTH_BENCH_BERTHD || buildSnapshot(),
  nodeArgs = [],
  args = [],
  env = {},
} = {}) {
  removeCgroupParentAfter('berth');
  const { dir, socket, daemonArgs } = daemonDir('bb-', 'berth.sock');
  const argv = [
    ...nodeArgs,
    bin,
    ...daemonArgs,
    ...(args.includes('--bridge') ? [] : ['--bridge', 'none', '--iptables=false']),
    ...args,
  ];
  const proc = spawn(process.execPath, argv, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  const d = daemonHandle('berthd', dir, socket, proc, tail(proc.stderr));
  /** The command line it was started with (node's arguments): to start it again on the same directories. */
  d.argv = argv;
  await waitForPing(socket, proc, 'berthd', d.logs);
  return d;
}

/**
 * Debian docker.io's dockerd with its own data root, exec root and socket, no
 * bridge and no iptables. With no containerd configured it starts its own
 * (state under the exec root) and stops it when it stops.
 * `netns`: run it inside that named network namespace (under /run/netns), with
 * its default bridge and its iptables rules (dockerd's defaults): whatever it
 * makes there (docker0, br-*, DOCKER* chains, ip_forward and the FORWARD
 * policy) stays in that namespace and goes with it.
 */
export async function startDockerd({ args = [], netns } = {}) {
  const bin = which('dockerd');
  if (!bin) throw new Error('dockerd is not installed (bench/run.sh --with-dockerd installs it)');
  removeCgroupParentAfter('docker');
  const { dir, socket, daemonArgs } = daemonDir('bd-', 'docker.sock');
  const isolation = netns ? [] : ['--bridge', 'none', '--iptables=false'];
  // nsenter, not `ip netns exec`: that one remounts /sys, without the cgroup hierarchies dockerd needs.
  const [file, prefix] = netns ? [which('nsenter'), [`--net=/run/netns/${netns}`, '--', bin]] : [bin, []];
  const proc = spawn(
    file,
    [...prefix, ...daemonArgs, '--pidfile', path.join(dir, 'docker.pid'), ...isolation, ...args],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const d = daemonHandle('dockerd', dir, socket, proc, tail(proc.stderr));
  /** How it was started: to start it again on the same directories. */
  d.file = file;
  d.argv = proc.spawnargs.slice(1);
  await waitForPing(socket, proc, 'dockerd', d.logs);
  return d;
}

/** Force-removes every container of a daemon (bounded concurrency). */
export async function removeAllContainers(d, concurrency = 8) {
  const r = await d.request('GET', '/containers/json?all=1', { timeoutMs: 60_000 });
  if (r.status !== 200) throw new Error(`list: ${r.status} ${r.text}`);
  await mapLimit(r.json ?? [], concurrency, (c) =>
    d.request('DELETE', `/containers/${c.Id}?force=1&v=1`, { timeoutMs: 60_000 }),
  );
}

/** `POST /images/create` for `ref` ('host:port/repo:tag'); resolves with the stream's text; throws on an error record. */
export async function pull(d, ref) {
  const i = ref.lastIndexOf(':');
  const name = ref.slice(0, i);
  const tag = ref.slice(i + 1);
  const r = expectOk(
    `pull ${ref} on ${d.kind}`,
    await d.request('POST', `/images/create?fromImage=${encodeURIComponent(name)}&tag=${encodeURIComponent(tag)}`),
    200,
  );
  const last = r.text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
    .at(-1);
  if (last?.error) throw new Error(`pull ${ref} on ${d.kind}: ${last.error}`);
  return r.text;
}

/** `POST /images/{ref}/tag?repo=&tag=`. */
export async function tag(d, ref, repo, tagName) {
  expectOk(
    `tag ${ref} on ${d.kind}`,
    await d.request(
      'POST',
      `/images/${encodeURIComponent(ref)}/tag?repo=${encodeURIComponent(repo)}&tag=${encodeURIComponent(tagName)}`,
    ),
    201,
    200,
  );
}

/**
 * `POST /images/load` of an image built by fixtures/images.mjs, as `docker
 * save` would write it, tagged `repoTag`: for a daemon that cannot reach the
 * bench's registry (one in a network namespace of its own).
 */
export async function loadImage(d, image, repoTag) {
  const pack = tarStream.pack();
  const chunks = [];
  // Read as it is written: the pack holds back an entry's callback while its output is not read.
  const packed = (async () => {
    for await (const c of pack) chunks.push(c);
  })();
  const configName = `${image.configDigest.slice('sha256:'.length)}.json`;
  const layerNames = image.layers.map((l) => `${l.digest.slice('sha256:'.length)}/layer.tar`);
  const entry = (name, bytes) =>
    new Promise((resolve, reject) => pack.entry({ name }, bytes, (e) => (e ? reject(e) : resolve())));
  await entry(configName, image.configBytes);
  for (const [i, l] of image.layers.entries()) {
    const blob = [];
    for await (const c of l.open()) blob.push(c);
    await entry(layerNames[i], Buffer.concat(blob)); // compressed: dockerd decompresses what it loads
  }
  await entry('manifest.json', JSON.stringify([{ Config: configName, RepoTags: [repoTag], Layers: layerNames }]));
  pack.finalize();
  await packed;
  const r = await d.request('POST', '/images/load?quiet=1', {
    body: Buffer.concat(chunks),
    headers: { 'Content-Type': 'application/x-tar' },
  });
  expectOk(`load ${repoTag} on ${d.kind}`, r, 200);
  if (/"error/.test(r.text)) throw new Error(`load ${repoTag} on ${d.kind}: ${r.text}`);
}

/** POST /containers/create; resolves with the id. */
export async function createContainer(d, body, name) {
  const q = name ? `?name=${encodeURIComponent(name)}` : '';
  return expectOk(`create on ${d.kind}`, await d.request('POST', `/containers/create${q}`, { body }), 201).json.Id;
}

export async function startContainer(d, id) {
  expectOk(`start ${id} on ${d.kind}`, await d.request('POST', `/containers/${id}/start`), 204, 304);
}
