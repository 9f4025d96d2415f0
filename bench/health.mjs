// The cost of health checks to berthd itself: N containers (`sleep`), each
// checked every second with `true` (as `docker run --health-cmd true
// --health-interval 1s`), and berthd's CPU time over a window, from
// /proc/<pid>/stat (utime + stime, berthd's own process: the checks' conmon
// and runc are other processes, counted apart as the machine's busy time).
// Also: how many checks ran a second (counted in a second window through
// /events, so that the subscriber's own cost stays out of the first), and
// berthd's CPU per check.
//
// Usage: node bench/health.mjs [containers=100] [seconds=20]
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import {
  busyboxRegistry,
  createContainer,
  mapLimit,
  pull,
  runBench,
  sleep,
  startBerthd,
  startContainer,
  clamp,
} from './lib.mjs';

const CONTAINERS = clamp(process.argv[2], 1, 500, 100);
const SECONDS = clamp(process.argv[3], 5, 600, 20);
const COUNT_SECONDS = 5;
const TARGET_PERCENT = 5;
const INTERVAL_NS = 1e9;

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** A process's CPU time so far (user + system), in seconds. */
function cpuSeconds(pid) {
  // The command name (field 2) may hold spaces: fields are counted after its closing parenthesis.
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / CLK_TCK; // utime, stime: fields 14 and 15
}

/** The machine's busy and total jiffies (/proc/stat's cpu line). */
function machineTicks() {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  const idle = f[3] + (f[4] ?? 0);
  return { busy: total - idle, total };
}

/** How many events matching `filters` berthd streams during `ms`. */
function countEvents(d, filters, ms) {
  return new Promise((resolve, reject) => {
    let n = 0;
    let rest = '';
    const req = http.get(
      { socketPath: d.socket, path: `/events?filters=${encodeURIComponent(JSON.stringify(filters))}` },
      (res) => {
        res.setEncoding('utf8');
        res.on('data', (chunk) => {
          const lines = (rest + chunk).split('\n');
          rest = lines.pop();
          n += lines.filter(Boolean).length;
        });
      },
    );
    req.on('error', (e) => (e.code === 'ECONNRESET' ? resolve(n) : reject(e)));
    setTimeout(() => {
      req.destroy();
      resolve(n);
    }, ms);
  });
}

async function healthyCount(d) {
  const r = await d.request('GET', `/containers/json?filters=${encodeURIComponent('{"health":["healthy"]}')}`);
  if (r.status !== 200) throw new Error(`list: ${r.status} ${r.text}`);
  return r.json.length;
}

await runBench(async () => {
  const { ref } = await busyboxRegistry();
  const d = await startBerthd();
  await pull(d, ref);

  console.log(`${CONTAINERS} containers checked every 1 s with \`true\`; berthd's CPU over ${SECONDS} s`);
  await mapLimit(Array.from({ length: CONTAINERS }), 4, async () => {
    const id = await createContainer(d, {
      Image: ref,
      Cmd: ['sleep', '3600'],
      Healthcheck: { Test: ['CMD', 'true'], Interval: INTERVAL_NS },
    });
    await startContainer(d, id);
  });
  const deadline = Date.now() + 180_000;
  for (let n = await healthyCount(d); n < CONTAINERS; n = await healthyCount(d)) {
    if (Date.now() > deadline) throw new Error(`only ${n} of ${CONTAINERS} containers became healthy`);
    await sleep(500);
  }
  await sleep(2000); // past the first checks' burst

  const cpu0 = cpuSeconds(d.pid);
  const m0 = machineTicks();
  const t0 = process.hrtime.bigint();
  await sleep(SECONDS * 1000);
  const elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = cpuSeconds(d.pid) - cpu0;
  const m1 = machineTicks();
  const machineBusy = (m1.busy - m0.busy) / (m1.total - m0.total);

  const checks = (await countEvents(d, { event: ['exec_die'] }, COUNT_SECONDS * 1000)) / COUNT_SECONDS;

  const percent = (cpu / elapsed) * 100;
  const met = percent < TARGET_PERCENT ? 'met' : 'MISSED';
  console.log(`  berthd CPU: ${percent.toFixed(2)}% of one core (target < ${TARGET_PERCENT}%: ${met})`);
  console.log(
    `  checks run: ${checks.toFixed(1)}/s (${((100 * checks) / CONTAINERS).toFixed(0)}% of one a second each)`,
  );
  if (checks > 0) console.log(`  berthd CPU per check: ${((cpu / elapsed / checks) * 1000).toFixed(2)} ms`);
  const cores = (m1.total - m0.total) / (elapsed * CLK_TCK);
  console.log(
    `  machine busy: ${(machineBusy * 100).toFixed(0)}% of ${cores.toFixed(0)} cores (conmon, runc and the checks included)`,
  );
});
