// Daemon start to first /_ping answer, for berthd (and dockerd when installed).
// Usage: node bench/startup.mjs [runs=20]
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const runs = Number(process.argv[2] ?? 20);

const ping = (socketPath) =>
  new Promise((resolve) => {
    const req = http.get({ socketPath, path: '/_ping' }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
  });

async function timeStart(cmd, args, socket) {
  const t0 = process.hrtime.bigint();
  const p = spawn(cmd, args, { stdio: 'ignore' });
  for (;;) {
    if (p.exitCode !== null) throw new Error(`${cmd} exited with ${p.exitCode}`);
    if (existsSync(socket) && (await ping(socket))) break;
    await new Promise((r) => setTimeout(r, 1));
  }
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  const exited = new Promise((r) => p.once('exit', r));
  p.kill('SIGTERM');
  await exited;
  return ms;
}

const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const q = (f) => s[Math.min(s.length - 1, Math.floor(f * s.length))];
  return { median: q(0.5), p90: q(0.9), min: s[0] };
};
const fmt = (s) => `median ${s.median.toFixed(0)} ms, p90 ${s.p90.toFixed(0)} ms, min ${s.min.toFixed(0)} ms`;

async function bench(name, mkArgs) {
  const times = [];
  for (let i = 0; i < runs; i++) {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-bench-'));
    const { cmd, args, socket } = mkArgs(dir);
    times.push(await timeStart(cmd, args, socket));
    rmSync(dir, { recursive: true, force: true });
  }
  const s = stats(times);
  console.log(`${name.padEnd(8)} start → first /_ping: ${fmt(s)} (${runs} runs, fresh data root each)`);
  return s;
}

const berth = await bench('berthd', (dir) => ({
  cmd: process.execPath,
  args: [path.join(ROOT, 'bin/berthd.cjs'), '-H', `unix://${dir}/s.sock`, '--data-root', `${dir}/data`, '--exec-root', `${dir}/exec`, '--config-file', '/dev/null/none'].slice(0, -2),
  socket: `${dir}/s.sock`,
}));

const dockerd = spawnSync('sh', ['-c', 'command -v dockerd']).stdout.toString().trim();
if (dockerd) {
  const d = await bench('dockerd', (dir) => ({
    cmd: dockerd,
    args: ['-H', `unix://${dir}/d.sock`, '--data-root', `${dir}/data`, '--exec-root', `${dir}/exec`, '--pidfile', `${dir}/d.pid`, '--bridge', 'none', '--iptables=false'],
    socket: `${dir}/d.sock`,
  }));
  console.log(`ratio berthd/dockerd (median): ${(berth.median / d.median).toFixed(2)}`);
} else {
  console.log('dockerd not installed: run bench/run.sh --with-dockerd to compare');
}
