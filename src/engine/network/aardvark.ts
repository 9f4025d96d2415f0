// The aardvark-dns daemon (Podman's DNS server, driven here as netavark drives
// it): one process for every user network, reading a directory that holds one
// file per network, re-reading it on SIGHUP. This file knows the process: how
// it starts, how berthd finds the one it started before a restart, how a
// reload is known to be done, how it stops. What goes in the files is dns.ts's.
//
// Facts of aardvark-dns 1.4.0 this relies on (found by experiment; what berth
// makes of them is tested in test/engine/dns.test.ts):
// - `run` forks; the parent exits once the child wrote <dir>/aardvark.pid, which
//   is before the child listens. So start and reload are done only when its
//   sockets are bound: read from /proc (its fds and its netns's UDP table).
// - On SIGHUP it drops every socket, re-reads the directory and binds anew,
//   each network's gateway:port (UDP only). A gateway it cannot bind is logged
//   to syslog and skipped; the process lives on.
// - A file it cannot parse (or a directory in the directory) ends the process,
//   leaving the pid file behind. A second instance on the same directory cannot
//   bind and idles forever, so berthd adopts a running one instead.
// - It reads the upstream servers from /etc/resolv.conf of its mount namespace
//   at each reload and forwards from its own network namespace (so the host's
//   127.0.0.53 works).
import { readFileSync } from 'node:fs';
import { readdir, readFile, readlink, rm } from 'node:fs/promises';
import { endianness } from 'node:os';
import path from 'node:path';
import { finished } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { systemError } from '../../errors.js';
import type { Logger } from '../../log.js';
import { type ExitStatus, spawnDetached } from '../os/spawn.js';
import { CONMON_ENV_PATH, collectText, processEnded, readPidFile } from '../runtime/proc.js';

export const PID_FILE = 'aardvark.pid';

export interface AardvarkOptions {
  /** The directory of network files (absolute). */
  configDir: string;
  /** The aardvark-dns executable. */
  binary: string;
  logger: Logger;
  /** UDP port it listens on at each gateway. */
  port: number;
  /** Run it in this named network namespace (`ip netns exec`; tests). */
  netns?: string;
  /** How long a start or a reload may take to bind its sockets. */
  readyTimeoutMs: number;
}

/** Socket inodes by the IPv4 address they are bound to, at the port. */
type Listening = Map<string, number>;

const IP = '/usr/bin/ip';

export class Aardvark {
  private pid: number | null = null;
  private keepsSockets: boolean | undefined;

  constructor(private readonly o: AardvarkOptions) {}

  /** The daemon's pid when it is running (as far as berthd knows). */
  get running(): number | null {
    return this.pid !== null && this.identify(this.pid) === 'ours' ? this.pid : null;
  }

  /**
   * Makes the daemon serve what the directory holds now: started if none runs
   * (or adopted, when its pid file names one of ours), else told to reload.
   * Resolves once it listens again on `changed` gateways and on every gateway it
   * listened on before that is still in `all`.
   */
  async refresh(all: string[], changed: string[]): Promise<void> {
    const pid = this.running ?? (await this.adopt());
    if (pid === null) {
      await this.start(all);
      return;
    }
    const before = await listening(pid, this.o.port);
    const expected = [...new Set([...changed, ...all.filter((ip) => before.has(ip))])];
    const stale = (await this.reloadKeepsSockets()) ? new Set<number>() : new Set(before.values());
    try {
      process.kill(pid, 'SIGHUP');
    } catch {
      // It ended since (ESRCH): a new one reads the directory anyway.
      this.pid = null;
      await this.start(all);
      return;
    }
    await this.ready(pid, stale, expected);
  }

  /** Ends the daemon (the pid file's too, when it is ours); nothing when none runs. */
  async stop(): Promise<void> {
    const pid = this.running ?? (await this.adopt());
    this.pid = null;
    if (pid !== null) {
      this.o.logger.debug({ pid }, 'stopping aardvark-dns');
      await terminate(pid);
    }
    await rm(path.join(this.o.configDir, PID_FILE), { force: true });
  }

  /**
   * The daemon a former berthd started on this directory, when its pid file
   * names one. One run with other arguments (another port) is stopped: a new
   * one could not bind beside it.
   */
  private async adopt(): Promise<number | null> {
    const pid = await readPidFile(path.join(this.o.configDir, PID_FILE));
    const found = pid === null ? 'foreign' : this.identify(pid);
    if (found === 'foreign') return null;
    if (found === 'other-args') {
      this.o.logger.info({ pid }, 'aardvark-dns runs with other arguments: restarting it');
      await terminate(pid!);
      return null;
    }
    this.o.logger.info({ pid }, 'adopted the running aardvark-dns');
    this.pid = pid;
    return pid;
  }

  /**
   * Whether live process `pid` is an aardvark-dns on our directory, run with
   * our arguments: the pid file outlives a crash, and its number may be reused.
   */
  private identify(pid: number): 'ours' | 'other-args' | 'foreign' {
    if (processEnded(pid)) return 'foreign';
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').slice(0, -1);
    } catch {
      return 'foreign';
    }
    const ours = this.args();
    const onOurDir = path.basename(argv[0] ?? '') === path.basename(this.o.binary) && argv[2] === this.o.configDir;
    if (!onOurDir) return 'foreign';
    return argv.slice(1).join('\0') === ours.join('\0') ? 'ours' : 'other-args';
  }

  private async start(gateways: string[]): Promise<void> {
    // One that died (a crash, a kill) may still be closing its sockets.
    const previous = this.pid ?? (await readPidFile(path.join(this.o.configDir, PID_FILE)));
    if (previous !== null) await threadsEnded(previous);
    const [file, args] = this.o.netns
      ? [IP, ['netns', 'exec', this.o.netns, this.o.binary, ...this.args()]]
      : [this.o.binary, this.args()];
    const { status, output } = await run(file, args);
    const pid = await readPidFile(path.join(this.o.configDir, PID_FILE));
    if (status.code !== 0 || pid === null || processEnded(pid)) {
      throw systemError(`aardvark-dns did not start (exit ${status.code ?? `signal ${status.signal}`}): ${output}`);
    }
    this.o.logger.debug({ pid, output }, 'started aardvark-dns');
    this.pid = pid;
    await this.ready(pid, new Set(), gateways);
  }

  /**
   * From aardvark-dns 1.11 (its commit 1f96f76) a reload keeps the sockets of
   * the gateways it still serves: new sockets cannot tell that it is done, and
   * waiting for them would never end. It re-reads in a few milliseconds.
   */
  private async reloadKeepsSockets(): Promise<boolean> {
    if (this.keepsSockets === undefined) {
      const { output } = await run(this.o.binary, ['--version']);
      const [major = 0, minor = 0] = /aardvark-dns (\d+)\.(\d+)/.exec(output)?.slice(1).map(Number) ?? [];
      this.keepsSockets = major > 1 || (major === 1 && minor >= 11);
      this.o.logger.debug({ version: output.split('\n')[0] }, 'aardvark-dns version');
    }
    return this.keepsSockets;
  }

  private args(): string[] {
    return ['--config', this.o.configDir, '-p', String(this.o.port), 'run'];
  }

  /**
   * Waits until `pid` has dropped every socket of `stale` and listens on each
   * of `expected` with a new one: the reload (or start) is done. Its signal
   * handler is set up again before it binds, so a following SIGHUP is not lost.
   */
  private async ready(pid: number, stale: Set<number>, expected: string[]): Promise<void> {
    const deadline = Date.now() + this.o.readyTimeoutMs;
    for (let delay = 1; ; delay = Math.min(delay * 2, 4)) {
      if (processEnded(pid)) {
        this.pid = null;
        throw systemError(`aardvark-dns (pid ${pid}) exited; its log is in syslog`);
      }
      const now = await listening(pid, this.o.port);
      const missing = expected.filter((ip) => !now.has(ip) || stale.has(now.get(ip)!));
      if (missing.length === 0 && ![...now.values()].some((i) => stale.has(i))) return;
      if (Date.now() > deadline) {
        const where = missing.map((ip) => `${ip}:${this.o.port}`).join(', ');
        throw systemError(
          `aardvark-dns does not listen on ${where || 'its new sockets'} (is the address up, the port free?)`,
        );
      }
      await sleep(delay);
    }
  }
}

/** Runs `file` to its end (and its daemon's stdio closed): its status and its output, stdout then stderr. */
async function run(file: string, args: string[]): Promise<{ status: ExitStatus; output: string }> {
  const child = spawnDetached(file, args, {
    cwd: '/',
    env: { PATH: CONMON_ENV_PATH },
    pipes: [
      { fd: 1, direction: 'from-child' },
      { fd: 2, direction: 'from-child' },
    ],
  });
  const streams = [child.pipes.get(1)!, child.pipes.get(2)!];
  const texts = streams.map((s) => collectText(s));
  const [status] = await Promise.all([child.exited, ...streams.map((s) => finished(s).catch(() => undefined))]);
  return { status, output: texts.map((t) => t()).join('\n') };
}

/** SIGTERM, then SIGKILL if it lingers; resolves once every thread of `pid` has ended. */
async function terminate(pid: number): Promise<void> {
  const signalled = (signal: NodeJS.Signals) => {
    try {
      process.kill(pid, signal);
    } catch {
      // Gone already (ESRCH).
    }
  };
  signalled('SIGTERM');
  for (let waited = 0; !processEnded(pid); waited += 5) {
    if (waited === 2000) signalled('SIGKILL');
    if (waited === 5000) throw systemError(`aardvark-dns (pid ${pid}) does not end`);
    await sleep(5);
  }
  await threadsEnded(pid);
}

/**
 * Waits until a process whose main thread has ended has no thread left. Its
 * sockets are closed only then (the threads share them), and a new daemon
 * could not bind the gateways before. Bounded: the pid may be reused.
 */
async function threadsEnded(pid: number): Promise<void> {
  for (let waited = 0; waited < 2000 && processEnded(pid); waited += 5) {
    const threads = await readdir(`/proc/${pid}/task`).catch(() => []);
    if (threads.length <= 1) return;
    await sleep(5);
  }
}

/** The UDP sockets `pid` holds bound at `port`: its fds' inodes found in its network namespace's table. */
async function listening(pid: number, port: number): Promise<Listening> {
  const fds = await readdir(`/proc/${pid}/fd`).catch(() => []);
  const links = await Promise.all(fds.map((fd) => readlink(`/proc/${pid}/fd/${fd}`).catch(() => '')));
  const inodes = new Set(links.flatMap((l) => /^socket:\[(\d+)\]$/.exec(l)?.[1] ?? []).map(Number));
  const table = await readFile(`/proc/${pid}/net/udp`, 'latin1').catch(() => '');
  const found: Listening = new Map();
  for (const line of table.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    const [addr, hexPort] = (f[1] ?? '').split(':');
    const inode = Number(f[9]);
    if (addr && Number.parseInt(hexPort ?? '', 16) === port && inodes.has(inode)) found.set(ipv4Of(addr), inode);
  }
  return found;
}

/** /proc/net/udp's address: the in-memory u32 in hex, so byte order is the host's. */
function ipv4Of(hex: string): string {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(Number.parseInt(hex, 16));
  if (endianness() === 'LE') bytes.reverse();
  return [...bytes].join('.');
}
