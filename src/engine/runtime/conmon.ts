// conmon 2.1.x: its command line, and the sync-pipe report it sends back.
//
// conmon forks twice (the process we spawn exits at once after writing
// --conmon-pidfile), becomes a subreaper, runs `runc create`, and reports on
// the fd named by $_OCI_SYNCPIPE one JSON line: {"data": <container pid>} on
// success, {"data": -1, "message": "<runc's stderr>"} on failure. It then
// copies the container's output into the log file and, when the container
// exits, writes the exit status (already 128+n for a signal) to
// <exit-dir>/<id>, atomically (temp file + rename).
import path from 'node:path';
import type { Readable } from 'node:stream';

/** Files conmon and runc keep in the bundle directory. */
export const BUNDLE_FILES = {
  containerPid: 'pidfile',
  conmonPid: 'conmon.pid',
  /** runc's own log (JSON lines) for the create; its last error is the create failure. */
  runcLog: 'runc.log',
  /** Created by conmon (in its cwd, the bundle) when the cgroup reports an OOM kill. */
  oom: 'oom',
  /** The attach socket (SOCK_SEQPACKET), reached through <socket-dir>/<id> → bundle. */
  attach: 'attach',
  /** conmon's control FIFO: "1 <height> <width>\n" resizes the terminal (ctrl.c, WIN_RESIZE_EVENT). */
  ctl: 'ctl',
} as const;

// The attach socket's protocol (conn_sock.c, ctr_stdio.c): each packet conmon
// sends is one read of the container's output, its first byte naming the pipe
// (utils.h: STDOUT_PIPE 2, STDERR_PIPE 3; a terminal is all stdout); packets we
// send are written to the container's stdin (conmon reads at most 32 KiB of a
// packet). When we shut our write side down (or close), conmon closes the
// container's stdin unless it runs with --leave-stdin-open.
export const ATTACH_STDERR = 3;

// Messages on the ctl FIFO (config.h): "<type> <height> <width>\n".
/** Resizes the terminal. */
export const CTL_RESIZE = 1;
/**
 * Reopens the log (ctr_logging.c reopen_k8s_file): conmon closes its file,
 * opens "<log>.tmp" truncated and renames it over the log path. A log renamed
 * away before is thereby complete, nothing lost: conmon wrote into it until then.
 */
export const CTL_REOPEN_LOG = 2;
export const ATTACH_MAX_PACKET = 32 * 1024;

export interface ConmonOptions {
  id: string;
  bundleDir: string;
  /** The k8s-file log; null: none (output goes to attached clients only). */
  logPath: string | null;
  exitDir: string;
  /** Also write <persistDir>/exit (and /oom) for this container. */
  persistDir?: string;
  /** The container has a pseudo-terminal (the spec's process.terminal must agree). */
  tty?: boolean;
  /** Keep a pipe to the container's stdin, fed through the attach socket. */
  stdin?: boolean;
  /** Close the container's stdin when the first attached client detaches (docker's StdinOnce). */
  stdinOnce?: boolean;
  /**
   * Bytes; conmon starts an empty log file when the next record would pass it
   * (the old one is lost). 0 or less = no cap. Its count of bytes goes on
   * across reopenings asked through the ctl FIFO (conmon 2.1.6 resets it only
   * when the cap is hit), so the cap cannot back up a rotation done outside.
   */
  logSizeMax?: number;
}

export interface ConmonEnvironment {
  runcPath: string;
  /** The runtime's own global flags (daemon.json runtimeArgs), before berth's. */
  runtimeArgs?: readonly string[];
  runcRoot: string;
  /** Short directory for the <id> → bundle symlinks that keep attach socket paths under 108 bytes. */
  socketDir: string;
}

/** What a container's conmon and an exec's conmon share: runc, the bundle's files, the terminal and stdin. */
function sharedArgs(
  env: ConmonEnvironment,
  o: { id: string; uuid: string; bundleDir: string; tty?: boolean; stdin?: boolean; stdinOnce?: boolean },
): string[] {
  const inBundle = (f: string) => path.join(o.bundleDir, f);
  const args = [
    // A flag in conmon 2.1 (G_OPTION_ARG_NONE): selects the {"data": …} sync messages.
    '--api-version',
    ...['-c', o.id, '-u', o.uuid],
    ...['-r', env.runcPath, '-b', o.bundleDir],
    ...['-p', inBundle(BUNDLE_FILES.containerPid), '-P', inBundle(BUNDLE_FILES.conmonPid)],
    ...['--socket-dir-path', env.socketDir],
    ...(env.runtimeArgs ?? []).flatMap((a) => ['--runtime-arg', a]),
    ...['--runtime-arg', `--root=${env.runcRoot}`],
    ...['--runtime-arg', `--log=${inBundle(BUNDLE_FILES.runcLog)}`, '--runtime-arg', '--log-format=json'],
  ];
  if (o.tty) args.push('-t');
  if (o.stdin) args.push('-i');
  // dockerd closes stdin when the attached client's input ends only for StdinOnce
  // without a terminal; a terminal's stdin stays open for the next attach.
  if (o.stdin && (!o.stdinOnce || o.tty)) args.push('--leave-stdin-open');
  return args;
}

export function conmonArgs(env: ConmonEnvironment, o: ConmonOptions): string[] {
  const args = [
    ...sharedArgs(env, { ...o, uuid: o.id }),
    ...['-l', o.logPath === null ? 'none' : `k8s-file:${o.logPath}`, '--exit-dir', o.exitDir],
    // The log is not fsync'd at exit (dockerd's json-file never syncs either): it
    // would delay the exit file, and with it every `docker run`.
    '--no-sync-log',
  ];
  if (o.persistDir) args.push('--persist-dir', o.persistDir);
  if (o.logSizeMax && o.logSizeMax > 0) args.push('--log-size-max', String(o.logSizeMax));
  return args;
}

export interface ConmonExecOptions {
  /** The container the process joins. */
  containerId: string;
  /** The exec's id: names its attach socket link under the socket dir. */
  execId: string;
  /** The exec's own directory: process spec, pid files, attach socket, ctl FIFO. */
  dir: string;
  processSpec: string;
  tty: boolean;
  stdin: boolean;
}

/**
 * `conmon --exec`: runs `runc exec --detach --process <spec>` and supervises the
 * process, reporting its pid and then its exit status on the sync pipe. With
 * --exec-attach it waits on the start pipe twice (once before forking, once
 * before running runc) and reports on the attach pipe when the attach socket
 * is listening in between. Exec output is not logged (dockerd logs none).
 */
export function conmonExecArgs(env: ConmonEnvironment, o: ConmonExecOptions): string[] {
  return [
    ...sharedArgs(env, {
      id: o.containerId,
      uuid: o.execId,
      bundleDir: o.dir,
      tty: o.tty,
      stdin: o.stdin,
      stdinOnce: true,
    }),
    ...['-l', 'none', '-e', '--exec-attach', '--exec-process-spec', o.processSpec],
  ];
}

export interface SyncMessage {
  data: number;
  message?: string;
}

/**
 * The first line conmon writes on the sync pipe, or null when the pipe closes
 * without one (conmon died before reporting). Rejects after timeoutMs.
 */
export function readSyncMessage(pipe: Readable, timeoutMs: number): Promise<SyncMessage | null> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const finish = (err: Error | null, value: SyncMessage | null = null) => {
      clearTimeout(timer);
      pipe.removeAllListeners('data').removeAllListeners('end').removeAllListeners('error');
      pipe.on('error', () => {}); // the far end may still reset after we stop listening
      pipe.destroy();
      if (err) reject(err);
      else resolve(value);
    };
    const timer = setTimeout(() => finish(new Error(`conmon sent no report within ${timeoutMs} ms`)), timeoutMs);
    const settle = (text: string | null) => {
      try {
        finish(null, text === null ? null : parseSyncMessage(text));
      } catch (e) {
        finish(e as Error);
      }
    };
    pipe.setEncoding('utf8');
    pipe.on('data', (chunk: string) => {
      buf += chunk;
      const nl = buf.indexOf('\n');
      if (nl >= 0) settle(buf.slice(0, nl));
    });
    pipe.on('end', () => settle(buf.trim() ? buf : null));
    pipe.on('error', (e) => finish(e));
  });
}

/**
 * Successive messages from conmon (an exec's conmon reports its attach
 * socket's readiness, its pid, then its exit status, on one socket), fed by
 * the caller (push, end). next() resolves with null once the socket has
 * closed with no further message.
 */
export class SyncReader {
  private buf = '';
  private readonly lines: string[] = [];
  private ended = false;
  private failure: Error | undefined;
  private wake: (() => void) | undefined;

  push(chunk: string): void {
    this.buf += chunk;
    for (let nl = this.buf.indexOf('\n'); nl >= 0; nl = this.buf.indexOf('\n')) {
      this.lines.push(this.buf.slice(0, nl));
      this.buf = this.buf.slice(nl + 1);
    }
    this.poke();
  }

  /** The pipe has closed (or failed). */
  end(failure?: Error): void {
    if (this.ended) return;
    if (this.buf.trim()) this.lines.push(this.buf);
    this.failure = failure;
    this.ended = true;
    this.poke();
  }

  async next(): Promise<SyncMessage | null> {
    while (!this.lines.length && !this.ended) await new Promise<void>((r) => (this.wake = r));
    const line = this.lines.shift();
    if (line !== undefined) return parseSyncMessage(line);
    if (this.failure) throw this.failure;
    return null;
  }

  private poke(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }
}

function parseSyncMessage(line: string): SyncMessage {
  const parsed = JSON.parse(line) as { data?: unknown; message?: unknown };
  if (typeof parsed.data !== 'number') throw new Error(`unexpected conmon report: ${line}`);
  return typeof parsed.message === 'string' ? { data: parsed.data, message: parsed.message } : { data: parsed.data };
}
