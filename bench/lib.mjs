// Shared helpers for the bench scripts (plain .mjs: run with bare `node`).
// Starts berthd, Debian's dockerd and a loopback docker-registry on temp
// directories, talks HTTP over unix sockets, and undoes everything it started
// (daemons, containers, mounts, directories) when the script ends, fails or is
// interrupted: every start registers its own clean-up, run last-in first-out.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { pipeline } from 'node:stream/promises';
import zlib from 'node:zlib';
import tarStream from 'tar-stream';
import { busyboxImage, largeImage, pushImage } from '../fixtures/images.mjs';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
/** The shipped launcher (the bundle in dist/ with its V8 code cache), as the tests and users run it. */
export const BERTHD = path.join(ROOT, 'bin/berthd.cjs');
export const MiB = 1024 * 1024;

// ─────────────────────────────────── clean-up ───────────────────────────────────

const cleanups = [];
let cleaning;

/** Registers `fn` to run at the end (LIFO); returns a function that runs it now, once. */
export function onCleanup(fn) {
  let done;
  const entry = () =>
    (done ??= Promise.resolve()
      .then(fn)
      .catch((e) => console.error(`bench clean-up: ${e?.message ?? e}`)));
  cleanups.push(entry);
  return () => {
    const i = cleanups.indexOf(entry);
    if (i !== -1) cleanups.splice(i, 1);
    return entry();
  };
}

/** Runs every registered clean-up, newest first. */
export function cleanupAll() {
  cleaning ??= (async () => {
    while (cleanups.length) await cleanups.pop()();
  })();
  return cleaning;
}

/** Runs `main`, then the clean-ups, whatever happens (errors, SIGINT, SIGTERM). */
export async function runBench(main) {
  const onSignal = (sig) => {
    console.error(`\n${sig}: cleaning up`);
    cleanupAll().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let code = 0;
  try {
    await main();
  } catch (e) {
    console.error(`bench failed: ${e?.stack ?? e}`);
    code = 1;
  }
  await cleanupAll();
  process.exit(code);
}

// ─────────────────────────────────── figures ───────────────────────────────────

export function stats(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const q = (f) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(f * s.length) - 1))];
  return {
    n: s.length,
    median: q(0.5),
    p90: q(0.9),
    min: s[0],
    max: s[s.length - 1],
    mean: s.reduce((a, b) => a + b, 0) / s.length,
  };
}

export const ms = (x) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
export const fmtMs = (s) => `median ${ms(s.median)} ms, p90 ${ms(s.p90)} ms, min ${ms(s.min)} ms (n=${s.n})`;
export const now = () => Number(process.hrtime.bigint()) / 1e6;
export const sleep = (t) => new Promise((r) => setTimeout(r, t));

/** A numeric argument `v` within [lo, hi]; `dflt` when it is not a number. */
export const clamp = (v, lo, hi, dflt) => Math.max(lo, Math.min(hi, Number.isFinite(Number(v)) ? Number(v) : dflt));

/** "0.42× (target ≤ 0.5×: met)"; just "0.42×" without a target. */
export function ratio(a, b, target, better = 'lower') {
  const r = a / b;
  if (target === undefined) return `${r.toFixed(2)}×`;
  const met = better === 'lower' ? r <= target : r >= target;
  return `${r.toFixed(2)}× (target ${better === 'lower' ? '≤' : '≥'} ${target}×: ${met ? 'met' : 'MISSED'})`;
}

/** Runs `fn(item)` for every item with at most `limit` at once; results in order. */
export async function mapLimit(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

export function which(cmd) {
  return (
    spawnSync('sh', ['-c', `command -v ${cmd}`])
      .stdout.toString()
      .trim() || undefined
  );
}

/** A temp dir (short path: unix socket paths stop at 108 bytes), removed at the end. */
export function tempDir(prefix, parent = os.tmpdir()) {
  const dir = mkdtempSync(path.join(parent, prefix));
  onCleanup(() => removeTree(dir));
  return dir;
}

// ──────────────────────────────────── HTTP ────────────────────────────────────

/**
 * One request over a unix socket; resolves with the whole answer. A connection of its own
 * unless `agent` is given (an http.Agent with keepAlive: requests on a kept connection).
 */
export function request(socketPath, method, urlPath, { body, headers = {}, timeoutMs = 600_000, agent = false } = {}) {
  return new Promise((resolve, reject) => {
    const payload =
      body === undefined || Buffer.isBuffer(body)
        ? body
        : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    const h = { Host: 'localhost', ...headers };
    if (payload) {
      h['Content-Type'] ??= 'application/json';
      h['Content-Length'] = String(payload.length);
    }
    const req = http.request({ socketPath, method, path: urlPath, headers: h, agent }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const buf = Buffer.concat(chunks);
        const text = buf.toString('utf8');
        let json;
        try {
          json = text ? JSON.parse(text) : undefined;
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: buf, text, json });
      });
      res.on('error', reject);
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`${method} ${urlPath}: no answer in ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(payload);
  });
}

function expectOk(what, r, ...ok) {
  if (!ok.includes(r.status)) throw new Error(`${what}: HTTP ${r.status} ${r.text.slice(0, 500)}`);
  return r;
}

async function waitForPing(socket, proc, what, logs, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null)
      throw new Error(`${what} exited (${proc.exitCode ?? proc.signalCode}): ${logs().slice(-2000)}`);
    if (existsSync(socket)) {
      const r = await request(socket, 'GET', '/_ping', { timeoutMs: 2000 }).catch(() => undefined);
      if (r?.status === 200) return;
    }
    if (Date.now() > deadline)
      throw new Error(`${what} did not answer /_ping in ${timeoutMs} ms: ${logs().slice(-2000)}`);
    await sleep(10);
  }
}

function tail(stream, limit = 64 * 1024) {
  let text = '';
  stream?.on('data', (c) => {
    text = (text + c.toString('utf8')).slice(-limit);
    if (process.env.BERTH_BENCH_LOGS) process.stderr.write(c);
  });
  return () => text;
}

// ─────────────────────────────────── mounts ───────────────────────────────────

/** Mount points at or below `dir`, deepest first (from /proc/self/mountinfo). */
export function mountsUnder(dir) {
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  const unoctal = (s) => s.replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => unoctal(line.split(' ')[4]))
    .filter((m) => m === dir || m.startsWith(prefix))
    .sort((a, b) => b.length - a.length);
}

/** Unmounts whatever is left below `dir` (lazily), then removes it; never crosses a mount. */
export function removeTree(dir) {
  if (!existsSync(dir)) return;
  for (const m of mountsUnder(dir)) spawnSync('umount', ['-l', m], { stdio: 'ignore' });
  const left = mountsUnder(dir);
  if (left.length) throw new Error(`not removing ${dir}: still mounted: ${left.join(', ')}`);
  rmSync(dir, { recursive: true, force: true });
}

// ────────────────────────────────── registry ──────────────────────────────────

// The registry under a tiny shell watchdog that kills it when our stdin pipe
// closes (we died without cleaning up), as test/harness/registry.ts does.
const WATCHDOG = 'docker-registry serve "$0" & read -r _; kill -9 $! 2>/dev/null; wait';

/** Debian's docker-registry (CNCF distribution) on a free 127.0.0.1 port, temp storage, anonymous. */
export async function startRegistry() {
  const dir = tempDir('berth-bench-reg-');
  const config = {
    version: '0.1',
    log: { level: 'info', formatter: 'text', accesslog: { disabled: true } },
    storage: {
      filesystem: { rootdirectory: path.join(dir, 'storage') },
      delete: { enabled: true },
      maintenance: { uploadpurging: { enabled: false } },
    },
    http: { addr: '127.0.0.1:0', secret: crypto.randomBytes(16).toString('hex') },
  };
  const configFile = path.join(dir, 'config.yml');
  writeFileSync(configFile, JSON.stringify(config, null, 2)); // JSON is YAML
  const proc = spawn('sh', ['-c', WATCHDOG, configFile], { detached: true, stdio: ['pipe', 'ignore', 'pipe'] });
  const closed = new Promise((r) => proc.once('close', r));
  const stop = onCleanup(async () => {
    try {
      process.kill(-proc.pid, 'SIGKILL');
    } catch {}
    await closed;
  });
  const logs = tail(proc.stderr);
  const deadline = Date.now() + 15_000;
  const listening = () => /listening on 127\.0\.0\.1:(\d+)/.exec(logs())?.[1];
  let port = listening();
  for (; !port; port = listening()) {
    if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`docker-registry did not start: ${logs()}`);
    await sleep(10);
  }
  const host = `127.0.0.1:${port}`;
  for (;;) {
    const ok = await new Promise((resolve) => {
      http
        .get(`http://${host}/v2/`, (res) => {
          res.resume();
          resolve(res.statusCode === 200);
        })
        .on('error', () => resolve(false));
    });
    if (ok) break;
    if (Date.now() > deadline) throw new Error(`registry at ${host} does not answer /v2/`);
    await sleep(10);
  }
  return { host, url: `http://${host}`, dir, stop };
}

/** A registry (startRegistry) holding the busybox fixture; `ref` names it: host:port/busybox:latest. */
export async function busyboxRegistry() {
  const registry = await startRegistry();
  await pushImage(registry.url, 'busybox', 'latest', await busyboxImage());
  return { registry, ref: `${registry.host}/busybox:latest` };
}

/**
 * A registry holding a large image: busybox plus `layerCount` layers of random
 * data, `totalMiB` in all; `ref` names it (host:port/large:latest), `bytes` is
 * the size of its compressed layers. Prints a line saying so.
 */
export async function largeImageRegistry(totalMiB, layerCount) {
  const registry = await startRegistry();
  const image = await largeImage(totalMiB, layerCount);
  const ref = `${registry.host}/large:latest`;
  await pushImage(registry.url, 'large', 'latest', image);
  const bytes = image.layers.reduce((a, l) => a + l.size, 0);
  console.log(
    `image: ${image.layers.length} layers (busybox base + ${layerCount} of random data), ${(bytes / MiB).toFixed(1)} MiB compressed (${(bytes / 1e6).toFixed(0)} MB), from docker-registry at ${registry.host}`,
  );
  return { registry, image, ref, bytes };
}

// ─────────────────────────────────── daemons ───────────────────────────────────

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
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bb-'));
  const socket = path.join(dir, 'berth.sock');
  const configFile = path.join(dir, 'daemon.json');
  writeFileSync(configFile, '{}\n'); // hermetic: never the machine's /etc/berth/daemon.json
  const argv = [
    ...nodeArgs,
    bin,
    '-H',
    `unix://${socket}`,
    '--data-root',
    path.join(dir, 'data'),
    '--exec-root',
    path.join(dir, 'exec'),
    '--config-file',
    configFile,
    '--log-level',
    'warn',
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
  // dockerd leaves its parent cgroup (/docker in each v1 hierarchy) behind: removed after it stops if it was not there before.
  const cgroups = readdirSafe('/sys/fs/cgroup')
    .map((c) => `/sys/fs/cgroup/${c}/docker`)
    .filter((c) => !existsSync(c));
  onCleanup(() => {
    for (const c of cgroups) if (existsSync(c)) spawnSync('rmdir', [c], { stdio: 'ignore' }); // only ever succeeds when empty
  });
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bd-'));
  const socket = path.join(dir, 'docker.sock');
  const configFile = path.join(dir, 'daemon.json');
  writeFileSync(configFile, '{}\n'); // hermetic: never the machine's /etc/docker/daemon.json
  const isolation = netns ? [] : ['--bridge', 'none', '--iptables=false'];
  // nsenter, not `ip netns exec`: that one remounts /sys, without the cgroup hierarchies dockerd needs.
  const [file, prefix] = netns ? [which('nsenter'), [`--net=/run/netns/${netns}`, '--', bin]] : [bin, []];
  const proc = spawn(
    file,
    [
      ...prefix,
      '-H',
      `unix://${socket}`,
      '--data-root',
      path.join(dir, 'data'),
      '--exec-root',
      path.join(dir, 'exec'),
      '--pidfile',
      path.join(dir, 'docker.pid'),
      '--config-file',
      configFile,
      ...isolation,
      '--log-level',
      'warn',
      ...args,
    ],
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

// ───────────────────────────── daemons with networking ─────────────────────────────

/**
 * berthd with networking on a default bridge, a pool and iptables chains of its
 * own (names from `id`); all removed at the end, aardvark-dns included.
 */
export async function berthdWithNetworks(id) {
  const { Firewall } = await import('../dist/engine/network/firewall.js');
  const bridge = `bn${id}`;
  const prefix = `N${id}`.toUpperCase();
  const poolOctet = crypto.randomInt(150, 199);
  const made = new Set([bridge]);
  // Registered before the daemon starts, so it runs after the daemon has stopped.
  onCleanup(async () => {
    for (const b of made) spawnSync('ip', ['link', 'del', b], { stdio: 'ignore' });
    await new Firewall({ prefix }).teardown();
    await new Firewall({ prefix, family: 6 }).teardown();
  });
  const d = await startBerthd({
    args: [
      '--bridge',
      bridge,
      '--bip',
      `10.${crypto.randomInt(200, 250)}.${crypto.randomInt(0, 250)}.1/24`,
      '--default-address-pool',
      `base=10.${poolOctet}.0.0/16,size=24`,
      '--iptables-chain-prefix',
      prefix,
    ],
  });
  // aardvark-dns outlives berthd by design (a restarted berthd adopts it): ours goes at the end.
  onCleanup(() => {
    for (const pid of pidsByComm('aardvark-dns')) {
      if (!cmdline(pid).some((a) => a.includes(d.dir))) continue;
      try {
        process.kill(pid, 'SIGTERM');
      } catch {}
    }
  });
  d.bridges = made;
  return d;
}

/** dockerd with its default bridge and iptables, in a network namespace of its own (deleted at the end). */
export async function dockerdWithNetworks(id) {
  const ns = `berth-bench-dockerd-${id}`;
  execFileSync('ip', ['netns', 'add', ns]);
  onCleanup(() => execFileSync('ip', ['netns', 'del', ns]));
  execFileSync('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
  return startDockerd({
    netns: ns,
    args: [
      '--bip',
      `10.${crypto.randomInt(200, 250)}.${crypto.randomInt(0, 250)}.1/24`,
      '--default-address-pool',
      `base=10.${crypto.randomInt(150, 199)}.0.0/16,size=24`,
    ],
  });
}

// ──────────────────────────────── the docker CLI ────────────────────────────────

/** A `docker` bound to a daemon, with a private DOCKER_CONFIG; resolves with { code, stdout, stderr, ms }. */
export function dockerCli(d) {
  const configDir = tempDir('berth-bench-cli-');
  const env = { ...process.env, DOCKER_HOST: d.host, DOCKER_CONFIG: configDir };
  return (args) =>
    new Promise((resolve) => {
      const t0 = now();
      const child = spawn('docker', args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
      const out = [];
      const err = [];
      child.stdout.on('data', (c) => out.push(c));
      child.stderr.on('data', (c) => err.push(c));
      const killer = setTimeout(() => child.kill('SIGKILL'), 120_000);
      child.once('close', (code) => {
        clearTimeout(killer);
        resolve({ code, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString(), ms: now() - t0 });
      });
    });
}

/** A runner of `docker ARGS` on a daemon that checks the exit code and the output; resolves with its milliseconds. */
export function cliRunner(d, args = ['run', '--rm', 'busybox', 'true'], expected = '') {
  const docker = dockerCli(d);
  return async () => {
    const r = await docker(args);
    if (r.code !== 0) throw new Error(`docker ${args.join(' ')} on ${d.kind} exited ${r.code}: ${r.stderr}`);
    if (expected != null && r.stdout !== expected)
      throw new Error(`docker ${args.join(' ')} on ${d.kind} printed ${JSON.stringify(r.stdout)}`);
    return r.ms;
  };
}

/**
 * Times each target's run() `runs` times after `warmup` untimed rounds, the
 * targets interleaved run by run (a busy machine weighs on each alike); prints
 * and returns each one's stats by name.
 */
export async function runInterleaved(title, targets, runs, warmup) {
  console.log(`\n== ${title}: ${runs} runs each (after ${warmup} warm-up), interleaved`);
  const times = targets.map(() => []);
  for (let i = 0; i < warmup + runs; i++) {
    for (const [k, t] of targets.entries()) {
      const ms = await t.run();
      if (i >= warmup) times[k].push(ms);
    }
  }
  const out = {};
  for (const [k, t] of targets.entries()) {
    out[t.name] = stats(times[k]);
    console.log(`${t.name.padEnd(34)} ${fmtMs(out[t.name])}`);
  }
  return out;
}

// ───────────────────────────────── the runc floor ─────────────────────────────────

/** A bundle with the busybox rootfs and runc's default spec running `true`; returns a timed runner. */
export async function runcFloor(layer) {
  const dir = tempDir('berth-bench-runc-');
  const rootfs = path.join(dir, 'bundle', 'rootfs');
  const state = path.join(dir, 'state');
  mkdirSync(rootfs, { recursive: true });
  mkdirSync(state);
  const untar = spawn('tar', ['-x', '-C', rootfs], { stdio: ['pipe', 'ignore', 'inherit'] });
  const untarred = new Promise((resolve, reject) =>
    untar.once('close', (code) => (code === 0 ? resolve() : reject(new Error(`tar exited ${code}`)))),
  );
  await pipeline(layer.open(), zlib.createGunzip(), untar.stdin);
  await untarred;
  const gen = spawnSync('runc', ['spec', '--bundle', path.join(dir, 'bundle')], { encoding: 'utf8' });
  if (gen.status !== 0) throw new Error(`runc spec: ${gen.stderr}`);
  const specFile = path.join(dir, 'bundle', 'config.json');
  const spec = JSON.parse(spawnSync('cat', [specFile], { encoding: 'utf8' }).stdout);
  spec.process.terminal = false;
  spec.process.args = ['true'];
  writeFileSync(specFile, JSON.stringify(spec, null, 2));
  let n = 0;
  onCleanup(() => {
    // A run interrupted half-way leaves its container: delete whatever runc still knows.
    const list = spawnSync('runc', ['--root', state, 'list', '-q'], { encoding: 'utf8' }).stdout ?? '';
    for (const id of list.split('\n').filter(Boolean)) spawnSync('runc', ['--root', state, 'delete', '--force', id]);
  });
  return () =>
    new Promise((resolve, reject) => {
      const t0 = now();
      const p = spawn(
        'runc',
        ['--root', state, 'run', '--bundle', path.join(dir, 'bundle'), `bench-${process.pid}-${n++}`],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      let err = '';
      p.stderr.on('data', (c) => (err += c));
      p.once('close', (code) =>
        code === 0 ? resolve(now() - t0) : reject(new Error(`runc run exited ${code}: ${err}`)),
      );
    });
}

// ─────────────────────────────────── processes ───────────────────────────────────

/** Pids whose /proc/<pid>/comm is `comm`. */
export function pidsByComm(comm) {
  const out = [];
  for (const name of readdirSafe('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/comm`, 'utf8').trim() === comm) out.push(Number(name));
    } catch {}
  }
  return out;
}

export function cmdline(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  } catch {
    return [];
  }
}

function readdirSafe(dir) {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** bench/memory-hook.cjs: preloaded into berthd (node --require), it writes the isolate's figures on SIGUSR2. */
export const MEMORY_HOOK = path.join(ROOT, 'bench/memory-hook.cjs');

/** The memory hook's figures from berthd `d` writing to `file`: signals it and waits for a fresh file. */
export async function hookFigures(d, file) {
  const before = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')).n : 0;
  process.kill(d.pid, 'SIGUSR2');
  for (let i = 0; i < 200; i++) {
    await sleep(5);
    try {
      const x = JSON.parse(readFileSync(file, 'utf8'));
      if (x.n > before) return x;
    } catch {}
  }
  return undefined;
}

/** Monitor processes of a daemon's containers (conmon for berthd, containerd-shim-runc-v2 for dockerd), by their command line naming the daemon's directory. */
export function monitorsOf(d) {
  // containerd-shim-runc-v2's comm is cut to 15 characters.
  const comm = d.kind === 'berthd' ? 'conmon' : 'containerd-shim';
  return { comm, pids: pidsByComm(comm).filter((pid) => cmdline(pid).some((a) => a.includes(d.dir))) };
}

/** The daemon and its helpers that are not per container (dockerd's own containerd). */
export function daemonPids(d) {
  if (d.kind !== 'dockerd') return [d.pid];
  return [d.pid, ...pidsByComm('containerd').filter((pid) => cmdline(pid).some((a) => a.includes(d.dir)))];
}

/** VmRSS, Pss and its anonymous part Pss_Anon (from smaps_rollup), in KiB. */
export function memoryOf(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rss = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? NaN);
  let pss = NaN;
  let pssAnon = NaN;
  try {
    const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    pss = Number(/^Pss:\s+(\d+) kB/m.exec(rollup)?.[1] ?? NaN);
    pssAnon = Number(/^Pss_Anon:\s+(\d+) kB/m.exec(rollup)?.[1] ?? NaN);
  } catch {}
  return { rss, pss, pssAnon };
}

/** RSS of a process and all its descendants (KiB), via /proc/<pid>/task/*\/children. */
export function treeRss(pid) {
  let total = 0;
  const seen = new Set();
  const walk = (p) => {
    if (seen.has(p)) return;
    seen.add(p);
    try {
      total += memoryOf(p).rss;
    } catch {
      return;
    }
    for (const t of readdirSafe(`/proc/${p}/task`)) {
      try {
        for (const c of readFileSync(`/proc/${p}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean))
          walk(Number(c));
      } catch {}
    }
  };
  walk(pid);
  return total;
}

/**
 * Bursts of `perBurst` containers started at once on each daemon in turn, `rounds`
 * rounds after one warm-up; burst(d, k) resolves with the burst's ms. Prints and
 * returns each daemon's median and its rate in containers a second.
 */
export async function burstRates(daemons, rounds, perBurst, burst) {
  const times = daemons.map(() => []);
  for (let i = 0; i < rounds + 1; i++) {
    for (const [k, d] of daemons.entries()) {
      const ms = await burst(d, k);
      if (i > 0) times[k].push(ms);
    }
  }
  const out = {};
  for (const [k, d] of daemons.entries()) {
    const s = stats(times[k]);
    out[d.kind] = { ...s, rate: (perBurst * 1000) / s.median };
    console.log(
      `${d.kind.padEnd(8)} wall median ${s.median.toFixed(0)} ms (min ${s.min.toFixed(0)}, max ${s.max.toFixed(0)}, n=${s.n}): ${out[d.kind].rate.toFixed(1)} containers/s`,
    );
  }
  return out;
}
