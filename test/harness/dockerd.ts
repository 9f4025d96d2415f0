// Debian's dockerd (docker.io 20.10) as an interop partner: image archives
// written by one engine and read by the other. Its own socket, data root and
// exec root under a temp dir; no bridge, no firewall, no containers.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type ApiResponse, request, type RequestOptions, waitFor } from './daemon.js';

export interface Dockerd {
  socket: string;
  host: string;
  request(method: string, urlPath: string, opts?: RequestOptions): Promise<ApiResponse>;
  stop(): Promise<void>;
}

export async function startDockerd(): Promise<Dockerd> {
  // dockerd makes /docker in each cgroup v1 hierarchy and leaves it: removed after, when it was not there before.
  const cgroups = readdirSync('/sys/fs/cgroup')
    .map((c) => `/sys/fs/cgroup/${c}/docker`)
    .filter((c) => !existsSync(c));
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dockerd-'));
  const socket = path.join(dir, 'docker.sock');
  writeFileSync(path.join(dir, 'daemon.json'), '{}\n'); // never the machine's /etc/docker/daemon.json
  let stderr = '';
  const proc: ChildProcess = spawn(
    'dockerd',
    [
      ...['-H', `unix://${socket}`, '--data-root', path.join(dir, 'data'), '--exec-root', path.join(dir, 'exec')],
      ...['--pidfile', path.join(dir, 'docker.pid'), '--config-file', path.join(dir, 'daemon.json')],
      ...['--bridge', 'none', '--iptables=false', '--ip-masq=false', '--log-level', 'warn'],
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  proc.stderr?.on('data', (c: Buffer) => {
    stderr = (stderr + c.toString()).slice(-8192);
  });
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
    for (const c of cgroups) if (existsSync(c)) rmdirSync(c);
  };
  try {
    await waitFor(
      async () =>
        proc.exitCode === null && existsSync(socket) && (await request(socket, 'GET', '/_ping')).status === 200,
      `dockerd to answer (${stderr})`,
      60_000,
      50,
    );
  } catch (e) {
    await stop();
    throw e;
  }
  return { socket, host: `unix://${socket}`, request: (m, p, o) => request(socket, m, p, o), stop };
}
