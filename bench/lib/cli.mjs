// The docker CLI bound to a daemon, and A/B runs interleaved.
import { spawn } from 'node:child_process';
import { fmtMs, now, stats, tempDir } from './core.mjs';

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
