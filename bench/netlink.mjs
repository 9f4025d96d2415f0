// A container's network plumbing over rtnetlink, in-process (engine/network/links.ts):
// attachContainer (veth pair with its peer made inside the container's namespace,
// host end on the bridge and up, eth0's address, MAC, up, default route) and
// detachContainer (the pair deleted), timed one by one; then the same steps
// through `ip` commands, for comparison; the event loop's longest delay
// meanwhile; and the parts: opening a socket in berthd's namespace and in
// another one (a thread that joins it), one request.
// The bridge lives in a namespace of the bench's own, the "container" is a
// process in a namespace of its own (/proc/<pid>/ns/net, as runc leaves it);
// both are removed at the end.
// Usage: node bench/netlink.mjs [runs=50] [ipRuns=10]   (after npm run build; as root)
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { statSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { attachContainer, detachContainer, ensureBridge } from '../dist/engine/network/links.js';
import { Netlink } from '../dist/engine/os/netlink.js';
import { clamp, fmtMs, now, onCleanup, runBench, sleep, stats } from './lib.mjs';

const runs = clamp(process.argv[2], 1, 10_000, 50);
const ipRuns = clamp(process.argv[3], 0, 1_000, 10);
const tag = randomBytes(3).toString('hex');

/** A named namespace for the bridge, deleted at the end. */
function hostNamespace() {
  const name = `berth-bench-${tag}`;
  execFileSync('ip', ['netns', 'add', name]);
  onCleanup(() => execFileSync('ip', ['netns', 'del', name]));
  return { name, path: `/run/netns/${name}` };
}

/** A process in a network namespace of its own, as a container's first process; killed at the end. */
async function containerNamespace() {
  const child = spawn('unshare', ['--net', 'sleep', '3600'], { stdio: 'ignore' });
  onCleanup(() => child.kill('SIGKILL'));
  const ns = `/proc/${child.pid}/ns/net`;
  const own = statSync('/proc/self/ns/net').ino;
  for (let i = 0; i < 500; i++) {
    try {
      if (statSync(ns).ino !== own) return { pid: child.pid, path: ns };
    } catch {}
    await sleep(10);
  }
  throw new Error('unshare --net did not start');
}

/** Milliseconds of each of `n` calls of fn (awaited). */
async function timeEach(n, fn) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const t0 = now();
    await fn(i);
    out.push(now() - t0);
  }
  return out;
}

const us = (s) => `median ${(s.median * 1000).toFixed(0)} µs, p90 ${(s.p90 * 1000).toFixed(0)} µs (n=${s.n})`;

await runBench(async () => {
  const host = hostNamespace();
  const box = await containerNamespace();
  const bridge = `bb${tag}`;
  const veth = `vb${tag}`;
  await ensureBridge({ name: bridge, gatewayCidr: '10.232.0.1/24', hostNs: host.path });
  const spec = {
    nsPath: box.path,
    bridge,
    hostIfName: veth,
    cidr: '10.232.0.2/24',
    gateway: '10.232.0.1',
    hostNs: host.path,
  };
  for (let i = 0; i < 3; i++) {
    await attachContainer(spec);
    await detachContainer(veth, host.path);
  }

  const attach = [];
  const detach = [];
  const both = [];
  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  for (let i = 0; i < runs; i++) {
    const t0 = now();
    await attachContainer(spec);
    const t1 = now();
    await detachContainer(veth, host.path);
    const t2 = now();
    attach.push(t1 - t0);
    detach.push(t2 - t1);
    both.push(t2 - t0);
  }
  loop.disable();
  console.log(`attachContainer + detachContainer: ${fmtMs(stats(both))}`);
  console.log(`  attachContainer:                 ${fmtMs(stats(attach))}`);
  console.log(`  detachContainer:                 ${fmtMs(stats(detach))}`);
  // The same length of time idle: what the machine's load alone does to the loop.
  const idle = monitorEventLoopDelay({ resolution: 1 });
  idle.enable();
  await sleep(both.reduce((x, y) => x + y, 0));
  idle.disable();
  const delay = (h) => `p99 ${(h.percentile(99) / 1e6).toFixed(2)} ms, max ${(h.max / 1e6).toFixed(2)} ms`;
  console.log(`  event loop delay meanwhile:      ${delay(loop)} (idle as long: ${delay(idle)})`);

  const parts = Math.max(200, runs * 4);
  const opens = await timeEach(parts, () => Netlink.open().close());
  const opensIn = await timeEach(parts, () => Netlink.open(box.path).close());
  const nl = Netlink.open(host.path);
  const lookups = await timeEach(parts, () => nl.linkIndex(bridge));
  nl.close();
  console.log(`netlink socket in berthd's namespace (open + close): ${us(stats(opens))}`);
  console.log(`netlink socket in another namespace (thread + setns):  ${us(stats(opensIn))}`);
  console.log(`one request (look up a link by name, own thread):     ${us(stats(lookups))}`);

  if (ipRuns > 0) {
    // The same steps through iproute2, one process each, as a shell-out would do them.
    const ip = (...args) => execFileSync('ip', args);
    const inBox = (...args) => execFileSync('nsenter', [`--net=${box.path}`, 'ip', ...args]);
    const viaIp = await timeEach(ipRuns, () => {
      ip('-n', host.name, 'link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', String(box.pid));
      ip('-n', host.name, 'link', 'set', veth, 'master', bridge, 'up');
      inBox('addr', 'add', '10.232.0.2/24', 'dev', 'eth0');
      inBox('link', 'set', 'eth0', 'address', '02:42:0a:e8:00:02', 'up');
      inBox('route', 'add', 'default', 'via', '10.232.0.1', 'dev', 'eth0');
      ip('-n', host.name, 'link', 'del', veth);
    });
    console.log(`the same through 6 ip commands:   ${fmtMs(stats(viaIp))}`);
  }
});
