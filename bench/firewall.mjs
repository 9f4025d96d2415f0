// The firewall's cost, in a network namespace of its own (the host's iptables
// are never touched): one change (a container's port added, then removed) as
// the number of published ports already there grows, since every write
// rewrites all of berth's chains; and twenty containers publishing at once,
// against twenty separate writes. Figures only, no pass or fail.
// Usage: node bench/firewall.mjs [rounds=20]   (after npm run build)
import { execFileSync, spawnSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { Firewall } from '../dist/engine/network/firewall.js';

const rounds = Number(process.argv[2] ?? 20);
const ns = `berthbench-${process.pid}`;
execFileSync('ip', ['netns', 'add', ns]);
const cleanUp = () => spawnSync('ip', ['netns', 'del', ns]);
process.on('exit', cleanUp);
process.on('SIGINT', () => process.exit(130));

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ms = (x) => `${x.toFixed(1)} ms`;
const mapping = (key, i) => ({
  key,
  proto: 'tcp',
  hostIp: '',
  hostPort: 10000 + i,
  containerIp: `10.240.${Math.floor(i / 250)}.${(i % 250) + 2}`,
  containerPort: 80,
});

const writes = [];
const log = { debug: (o) => writes.push(o) };
const fw = new Firewall({ prefix: 'BENCH', netns: ns, log });
await fw.init();
await fw.setNetwork({ bridge: 'br-bench', subnet: '10.240.0.0/16', internal: false, masquerade: true });

// The floor: one iptables-restore of an empty transaction through nsenter, as every write pays it.
const floor = [];
for (let i = 0; i < rounds; i++) {
  const t = performance.now();
  execFileSync('nsenter', [`--net=/run/netns/${ns}`, '--', 'iptables-restore', '-w', '--noflush'], { input: '' });
  floor.push(performance.now() - t);
}
console.log(`nsenter + iptables-restore of nothing (child_process), median: ${ms(median(floor))}`);

let existing = 0;
for (const target of [0, 100, 1000]) {
  const batch = [];
  for (; existing < target; existing++) batch.push(mapping(`bg${existing}`, existing));
  if (batch.length) await fw.addPorts(batch);
  const times = [];
  for (let i = 0; i < rounds; i++) {
    const t = performance.now();
    await fw.addPorts([mapping('probe', 5000)]);
    await fw.removePorts('probe');
    times.push((performance.now() - t) / 2);
  }
  console.log(
    `one change with ${String(target).padStart(4)} published ports already there, median: ${ms(median(times))}`,
  );
}

await fw.replace({ networks: fw.state().networks, ports: [] });
const concurrent = [];
const writeCounts = [];
for (let r = 0; r < rounds; r++) {
  writes.length = 0;
  const t = performance.now();
  await Promise.all(Array.from({ length: 20 }, (_, i) => fw.addPorts([mapping(`c${i}`, i)])));
  concurrent.push(performance.now() - t);
  writeCounts.push(writes.length);
  await fw.replace({ networks: fw.state().networks, ports: [] });
}
console.log(
  `20 containers publishing at once: median ${ms(median(concurrent))} until all resolved, in ${median(writeCounts)} write(s)`,
);

const sequential = [];
for (let r = 0; r < Math.min(rounds, 5); r++) {
  const t = performance.now();
  for (let i = 0; i < 20; i++) await fw.addPorts([mapping(`s${i}`, i)]);
  sequential.push(performance.now() - t);
  await fw.replace({ networks: fw.state().networks, ports: [] });
}
console.log(`the same 20 one after another (20 writes): median ${ms(median(sequential))}`);

await fw.teardown();
