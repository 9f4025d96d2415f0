// Starts the real berthd (bin/berthd.cjs, the built bundle) as a process on a temp socket and data
// root, and talks to it over the unix socket. Every daemon started here is
// stopped when the test process exits, even after a failure.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BERTHD = path.join(ROOT, 'bin/berthd.cjs');

export interface ApiResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  text: string;
  json: any;
}

export interface RequestOptions {
  headers?: Record<string, string>;
  body?: unknown;
  /** Raw body bytes/string sent as given (no JSON encoding). */
  raw?: string | Buffer;
  host?: string;
}

/** One HTTP request over a unix socket; resolves with the whole response. */
export function request(
  socketPath: string,
  method: string,
  urlPath: string,
  opts: RequestOptions = {},
): Promise<ApiResponse> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { Host: opts.host ?? 'localhost', ...opts.headers };
    let payload: Buffer | undefined;
    if (opts.raw !== undefined) payload = Buffer.from(opts.raw);
    else if (opts.body !== undefined) {
      payload = Buffer.from(JSON.stringify(opts.body));
      headers['Content-Type'] ??= 'application/json';
    }
    if (payload) headers['Content-Length'] = String(payload.length);
    // No keep-alive (agent: false): an idle connection of the test itself would read as a descriptor berthd holds.
    const req = http.request({ socketPath, method, path: urlPath, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const body = Buffer.concat(chunks);
        const text = body.toString('utf8');
        let json: unknown;
        try {
          json = text ? JSON.parse(text) : undefined;
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body, text, json });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(payload);
  });
}

export interface Daemon {
  socket: string;
  host: string; // unix://…
  dataRoot: string;
  execRoot: string;
  dir: string;
  proc: ChildProcess;
  stderr(): string;
  request(method: string, urlPath: string, opts?: RequestOptions): Promise<ApiResponse>;
  /** SIGTERM and wait for exit; returns the exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL and wait. */
  kill(): Promise<void>;
  /** Stops berthd if it runs, then starts it again on the same data root and socket. */
  restart(): Promise<void>;
  /** Removes the temp dirs (after stop). */
  cleanup(): Promise<void>;
}

export interface DaemonOptions {
  args?: string[];
  env?: Record<string, string>;
  /** Reuse a directory (data root under it) instead of a fresh temp dir. */
  dir?: string;
  /** The exec root, instead of <dir>/exec. */
  execRoot?: string;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

export async function waitFor<T>(
  fn: () => Promise<T | undefined | false> | T | undefined | false,
  what: string,
  timeoutMs = 20_000,
  stepMs = 20,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v as T;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

/**
 * The command line of a hermetic berthd of a test's own making under `dir` (its
 * socket `dir/s.sock`, data and exec roots, a config file of `{}`, no bridge):
 * for a test that starts berthd its own way.
 */
export function hermeticArgs(dir: string): { socket: string; args: string[] } {
  const socket = path.join(dir, 's.sock');
  const config = path.join(dir, 'daemon.json');
  writeFileSync(config, '{}\n');
  const args = ['-H', `unix://${socket}`, '--data-root', path.join(dir, 'data'), '--exec-root', path.join(dir, 'exec')];
  return { socket, args: [...args, '--config-file', config, '--bridge', 'none', '--iptables=false'] };
}

export async function startDaemon(opts: DaemonOptions = {}): Promise<Daemon> {
  // Short paths: unix socket paths are limited to 108 bytes.
  const dir = opts.dir ?? mkdtempSync(path.join(os.tmpdir(), 'berth-'));
  const socket = path.join(dir, 'berth.sock');
  const dataRoot = path.join(dir, 'data');
  const execRoot = opts.execRoot ?? path.join(dir, 'exec');
  let stderr = '';
  const d: Daemon = {
    socket,
    host: `unix://${socket}`,
    dataRoot,
    execRoot,
    dir,
    proc: undefined as unknown as ChildProcess,
    stderr: () => stderr,
    request: (m, p, o) => request(socket, m, p, o),
    async stop() {
      const p = d.proc;
      if (p.exitCode !== null || p.signalCode !== null) return p.exitCode;
      const done = new Promise<number | null>((r) => p.once('exit', (code) => r(code)));
      p.kill('SIGTERM');
      return done;
    },
    async kill() {
      const p = d.proc;
      if (p.exitCode !== null || p.signalCode !== null) return;
      const done = new Promise<void>((r) => p.once('exit', () => r()));
      p.kill('SIGKILL');
      await done;
    },
    async restart() {
      // A restart of a berthd still running stops it first: launching beside it would find the
      // socket answered by the old one (the new one exits on the data root's lock) and leave it behind.
      await d.stop();
      await launch();
    },
    async cleanup() {
      await d.stop();
      if (!opts.dir) rmSync(dir, { recursive: true, force: true });
    },
  };
  const launch = async () => {
    const args = [
      '-H',
      `unix://${socket}`,
      '--data-root',
      dataRoot,
      '--exec-root',
      execRoot,
      '--log-level',
      'debug',
      ...(opts.args ?? []),
    ];
    // No default bridge unless a test asks for networking (network.ts): daemons side by side
    // would otherwise each make one on the host, all named alike.
    if (!args.some((a) => a === '--bridge' || a === '-b' || a.startsWith('--bridge='))) {
      args.push('--bridge', 'none', '--iptables=false');
    }
    if (!args.includes('--config-file')) {
      // Hermetic: never read the machine's /etc/berth/daemon.json.
      const file = path.join(dir, 'daemon.json');
      if (!existsSync(file)) writeFileSync(file, '{}\n');
      args.push('--config-file', file);
    }
    const proc = spawn(process.execPath, [BERTHD, ...args], {
      env: { ...process.env, ...opts.env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    live.add(proc);
    proc.once('exit', () => live.delete(proc));
    proc.stderr!.on('data', (c: Buffer) => {
      stderr += c.toString();
      if (process.env.BERTH_TEST_LOGS) process.stderr.write(c);
    });
    d.proc = proc;
    await waitFor(async () => {
      if (proc.exitCode !== null) throw new Error(`berthd exited with ${proc.exitCode}: ${stderr}`);
      return existsSync(socket) && (await request(socket, 'GET', '/_ping')).status === 200;
    }, 'berthd to answer /_ping');
  };
  await launch();
  return d;
}
