// What a DNS change costs on a user network (engine/network/dns.ts driving
// aardvark-dns): from addEntry/removeEntry's call until aardvark-dns answers
// with the change, for networks of several sizes; 20 containers added at once;
// starting and adopting the daemon; and how many questions other containers
// see fail while reloads go on (aardvark-dns 1.4 drops its sockets to reload).
// Everything runs in network namespaces of its own, removed at the end.
// Usage: node bench/dns.mjs [ops per size]   (after npm run build)
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { Dns } from '../dist/engine/network/dns.js';
import { createLogger } from '../dist/log.js';
import { clamp, fmtMs, ms, now, onCleanup, removeTree, runBench, stats } from './lib.mjs';

const OPS = clamp(process.argv[2], 5, 1000, 30);
const AARDVARK = '/usr/lib/podman/aardvark-dns';
const HOST = `berthbench-${process.pid}-dns-host`;
const CTR = `berthbench-${process.pid}-dns-c1`;
const GW = '10.89.7.1';

const ip = (...args) => {
  const r = spawnSync('ip', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr}`);
};

function topology() {
  for (const ns of [HOST, CTR]) {
    ip('netns', 'add', ns);
    onCleanup(() => ip('netns', 'del', ns));
    ip('-n', ns, 'link', 'set', 'lo', 'up');
  }
  ip('-n', HOST, 'link', 'add', 'br0', 'type', 'bridge');
  ip('-n', HOST, 'addr', 'add', `${GW}/16`, 'dev', 'br0');
  ip('-n', HOST, 'link', 'set', 'br0', 'up');
  ip('-n', HOST, 'link', 'add', 'veth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', CTR);
  ip('-n', HOST, 'link', 'set', 'veth0', 'master', 'br0', 'up');
  ip('-n', CTR, 'addr', 'add', '10.89.0.2/16', 'dev', 'eth0');
  ip('-n', CTR, 'link', 'set', 'eth0', 'up');
}

/** test/harness/dns-tool.mjs's client in the container namespace: one question at a time. */
async function asker() {
  const script = path.resolve(import.meta.dirname, '../test/harness/dns-tool.mjs');
  const child = spawn('ip', ['netns', 'exec', CTR, process.execPath, script, 'ask'], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  onCleanup(() => child.kill('SIGKILL'));
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  if ((await lines.next()).value !== 'ready') throw new Error('dns-tool did not start');
  return async (name, timeoutMs) => {
    child.stdin.write(`${name} ${GW} ${timeoutMs}\n`);
    return JSON.parse((await lines.next()).value);
  };
}

const hex = (n) => n.toString(16).padStart(64, '0');
const entry = (n) => ({
  containerId: hex(n),
  ipv4: `10.89.${Math.floor(n / 250) + 1}.${(n % 250) + 2}`,
  names: [`c${n}`, hex(n).slice(0, 12)],
});

async function timed(fn) {
  const t0 = now();
  await fn();
  return now() - t0;
}

await runBench(async () => {
  topology();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-bench-dns-'));
  onCleanup(() => removeTree(dir));
  const configDir = path.join(dir, 'dns');
  const logger = createLogger(process.env.BENCH_LOG ?? 'warn');
  const make = () => new Dns({ configDir, binary: AARDVARK, logger, netns: HOST });
  let dns = make();
  onCleanup(() => dns.reconcile([]));
  const ask = await asker();

  const web = { containerId: hex(999_999), ipv4: '10.89.0.2', names: ['web'] };
  console.log(`start (first network, daemon started): ${ms(await timed(() => dns.setNetwork('bench', GW, [web])))} ms`);
  dns = make();
  const adopt = await timed(() => dns.reconcile([{ name: 'bench', gatewayIp: GW, entries: [web] }]));
  console.log(`adopt after a restart (new Dns, reconcile, files rewritten, reload): ${ms(adopt)} ms`);

  for (const size of [1, 100, 1000]) {
    const entries = [web, ...Array.from({ length: size - 1 }, (_, i) => entry(1000 + i))];
    await dns.setNetwork('bench', GW, entries);
    const adds = [];
    const removes = [];
    for (let i = 0; i < OPS; i++) {
      adds.push(await timed(() => dns.addEntry('bench', GW, entry(i))));
      removes.push(await timed(() => dns.removeEntry('bench', hex(i))));
    }
    console.log(`network of ${size}: addEntry ${fmtMs(stats(adds))}`);
    console.log(`network of ${size}: removeEntry ${fmtMs(stats(removes))}`);
  }

  await dns.setNetwork('bench', GW, [web]);
  const burst = Array.from({ length: 20 }, (_, i) => entry(100 + i));
  const all = await timed(() => Promise.all(burst.map((e) => dns.addEntry('bench', GW, e))));
  const gone = await timed(() => Promise.all(burst.map((e) => dns.removeEntry('bench', e.containerId))));
  console.log(`20 addEntry at once: all answered after ${ms(all)} ms; 20 removeEntry at once: ${ms(gone)} ms`);

  // Questions for a name that never changes, one after another, while other entries come and go.
  const outcomes = new Map();
  let churning = true;
  const questions = (async () => {
    while (churning) {
      const a = await ask('web', 250);
      const key = a.error ?? (a.answers?.[0] === web.ipv4 ? 'answered' : `rcode ${a.rcode}`);
      outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
    }
  })();
  for (let i = 0; i < OPS; i++) {
    await dns.addEntry('bench', GW, entry(i));
    await dns.removeEntry('bench', hex(i));
  }
  churning = false;
  await questions;
  const total = [...outcomes.values()].reduce((a, b) => a + b, 0);
  const shown = [...outcomes].map(([k, v]) => `${k} ${v}`).join(', ');
  console.log(`questions during ${OPS * 2} reloads: ${total} asked: ${shown}`);
});
