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
} as const;

export interface ConmonOptions {
  id: string;
  bundleDir: string;
  logPath: string;
  exitDir: string;
  /** Also write <persistDir>/exit (and /oom) for this container. */
  persistDir?: string;
  /** The container has a pseudo-terminal (the spec's process.terminal must agree). */
  tty?: boolean;
  /** Keep a pipe to the container's stdin, fed through the attach socket. */
  stdin?: boolean;
  /** Close the container's stdin when the first attached client detaches (docker's StdinOnce). */
  stdinOnce?: boolean;
  /** Bytes; conmon starts an empty log file when the next record would pass it. 0 or less = no cap. */
  logSizeMax?: number;
}

export interface ConmonEnvironment {
  runcPath: string;
  runcRoot: string;
  /** Short directory for the <id> → bundle symlinks that keep attach socket paths under 108 bytes. */
  socketDir: string;
}

export function conmonArgs(env: ConmonEnvironment, o: ConmonOptions): string[] {
  const inBundle = (f: string) => path.join(o.bundleDir, f);
  const args = [
    // A flag in conmon 2.1 (G_OPTION_ARG_NONE): selects the {"data": …} sync messages.
    '--api-version',
    ...['-c', o.id, '-u', o.id],
    ...['-r', env.runcPath, '-b', o.bundleDir],
    ...['-p', inBundle(BUNDLE_FILES.containerPid), '-P', inBundle(BUNDLE_FILES.conmonPid)],
    ...['-l', `k8s-file:${o.logPath}`, '--exit-dir', o.exitDir, '--socket-dir-path', env.socketDir],
    ...['--runtime-arg', `--root=${env.runcRoot}`],
    ...['--runtime-arg', `--log=${inBundle(BUNDLE_FILES.runcLog)}`, '--runtime-arg', '--log-format=json'],
    // The log is not fsync'd at exit (dockerd's json-file never syncs either): it
    // would delay the exit file, and with it every `docker run`.
    '--no-sync-log',
  ];
  if (o.persistDir) args.push('--persist-dir', o.persistDir);
  if (o.logSizeMax && o.logSizeMax > 0) args.push('--log-size-max', String(o.logSizeMax));
  if (o.tty) args.push('-t');
  if (o.stdin) args.push('-i');
  if (o.stdin && !o.stdinOnce) args.push('--leave-stdin-open');
  return args;
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

function parseSyncMessage(line: string): SyncMessage {
  const parsed = JSON.parse(line) as { data?: unknown; message?: unknown };
  if (typeof parsed.data !== 'number') throw new Error(`unexpected conmon report: ${line}`);
  return typeof parsed.message === 'string' ? { data: parsed.data, message: parsed.message } : { data: parsed.data };
}
