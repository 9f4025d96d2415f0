// A process run in a running container (`docker exec`), supervised by its own
// conmon in exec mode so that its exit status is always collected:
//
//   1. spawn `conmon --exec --exec-attach` with a report socket (fds 3 and 5:
//      sync and attach), a start pipe (fd 4) and its stderr (fd 2);
//   2. write the first start message; conmon forks, sets up the attach socket
//      and ctl FIFO in the exec's directory and reports on the attach fd;
//   3. the caller connects to the attach socket (nothing runs yet, so no
//      output can be missed);
//   4. write the second start message: conmon runs `runc exec --detach` and
//      reports the pid on the sync fd, later the exit status (128+n for a
//      signal) once the process has exited and its output has been drained.
//
// Each exec has a directory of its own, made and removed around it, except
// the runs of an ExecSeries (a container's health checks), which share one.
// What this costs berthd counts (a health check every second per container):
// the pipes that are only written once or read only on a failure are bare
// descriptors, not streams on the loop, and one socket pair (each report one
// packet) carries both reports, read natively rather than by a net.Socket.
import { closeSync, readSync, writeSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { systemError } from '../../errors.js';
import type { Logger } from '../../log.js';
import { BUNDLE_FILES, conmonExecArgs, SyncReader, type ConmonEnvironment, type SyncMessage } from './conmon.js';
import { runtimeCreateError } from './errors.js';
import { CONMON_ENV_PATH, readPidFile, runcLogError } from './proc.js';
import { type PacketReader, readPacketsFrom } from '../os/seqpacket.js';
import { spawnDetached, type Spawned } from '../os/spawn.js';

export interface ExecEnvironment extends ConmonEnvironment {
  conmonPath: string;
  logger: Logger;
  /** How long conmon and runc may take to start the process. */
  startTimeoutMs: number;
}

export interface ExecProcessOptions {
  containerId: string;
  execId: string;
  /** A directory of its own (created here, removed once the process has exited); unused with a series. */
  dir: string;
  /** The OCI process to run (config.json's `process` shape), or the series whose process and directory it is. */
  process: object | ExecSeries;
  tty: boolean;
  /** Keep a pipe to the process's stdin, fed through the attach socket. */
  stdin: boolean;
  /** Called once the attach socket listens and before the process runs. */
  beforeRun?: (attachSocket: string) => Promise<void> | void;
}

export interface ExecProcess {
  pid: number;
  /** The exit code (255 when conmon died without reporting one); the directory is gone by then. */
  exit: Promise<number>;
}

/** conmon reports -1 when it could not learn the status. */
const UNKNOWN_EXIT = 255;
/** What of conmon's stderr is kept for an error message. */
const STDERR_MAX = 8192;

const specFile = (dir: string) => path.join(dir, 'process.json');

/** Where an exec's conmon keeps its files (pid files, attach socket, FIFOs, runc's log) and its process spec. */
interface ExecPlace {
  readonly dir: string;
  /** Before the exec: the directory made, the process spec written. */
  ready(): Promise<void>;
  /** The exec failed to start, and what it left has been read. */
  failed(): Promise<void>;
  /** The exec has exited. */
  ended(): void;
}

/** One exec's own directory: made for it, removed once it has exited or failed. */
class OwnDir implements ExecPlace {
  constructor(
    readonly dir: string,
    private readonly process: object,
  ) {}

  ready(): Promise<void> {
    return makeExecDir(this.dir, this.process);
  }

  failed(): Promise<void> {
    return rm(this.dir, { recursive: true, force: true }).catch(() => undefined);
  }

  ended(): void {
    void this.failed();
  }
}

async function makeExecDir(dir: string, process: object): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await writeFile(specFile(dir), JSON.stringify(process), { mode: 0o600 });
}

/**
 * One process spec run again and again, one run at a time (a container's
 * health checks), in one directory: made, and the spec written, at the first
 * run rather than at each, and removed by close() once the last run is over.
 * conmon and runc replace what a run leaves there (pid files, attach socket,
 * FIFOs); runc's log, which runc appends to, goes once a failure has been
 * read from it, so that the next failure's reason is its own.
 */
export class ExecSeries implements ExecPlace {
  private made: Promise<void> | undefined;
  /** Settles when the run under way is over. */
  private running: Promise<void> = Promise.resolve();
  private over: (() => void) | undefined;
  private closed = false;

  constructor(
    readonly dir: string,
    private readonly process: object,
  ) {}

  async ready(): Promise<void> {
    if (this.closed) throw systemError('the exec series is closed');
    if (this.over) throw systemError('an exec of the series is still running');
    this.running = new Promise((resolve) => (this.over = resolve));
    this.made ??= makeExecDir(this.dir, this.process);
    try {
      await this.made;
    } catch (e) {
      this.made = undefined; // tried again at the next run
      this.ended();
      throw e;
    }
  }

  async failed(): Promise<void> {
    await rm(path.join(this.dir, BUNDLE_FILES.runcLog), { force: true }).catch(() => undefined);
    this.ended();
  }

  ended(): void {
    const over = this.over;
    this.over = undefined;
    over?.();
  }

  /** No more runs: the directory goes once the run under way (if any) is over. */
  async close(): Promise<void> {
    this.closed = true;
    await this.running;
    await rm(this.dir, { recursive: true, force: true }).catch(() => undefined);
  }
}

export async function runExec(env: ExecEnvironment, o: ExecProcessOptions): Promise<ExecProcess> {
  const place = o.process instanceof ExecSeries ? o.process : new OwnDir(o.dir, o.process);
  const { dir } = place;
  await place.ready();
  let child: Spawned;
  try {
    child = spawnDetached(env.conmonPath, conmonExecArgs(env, { ...o, dir, processSpec: specFile(dir) }), {
      cwd: dir,
      env: { PATH: CONMON_ENV_PATH, _OCI_SYNCPIPE: '3', _OCI_STARTPIPE: '4', _OCI_ATTACHPIPE: '5' },
      pipes: [
        { fd: 2, direction: 'from-child', bare: true },
        // conmon writes the attach socket's readiness, then the pid, then the exit status, in that order.
        { fd: 3, also: [5], direction: 'from-child', packets: true },
        { fd: 4, direction: 'to-child', bare: true },
      ],
    });
  } catch (e) {
    await place.failed();
    throw systemError(`conmon failed to start the exec process in ${o.containerId}: ${(e as Error).message}`, e);
  }
  const reports = new SyncReader();
  const reportPipe = readReports(child.fds.get(3)!, reports);
  const start = startPipe(child.fds.get(4)!);
  const stderr = child.fds.get(2)!;
  const failed = async (report: SyncMessage | null) => {
    const reason =
      report?.message || (await runcLogError(path.join(dir, BUNDLE_FILES.runcLog))) || readAvailable(stderr);
    closeSync(stderr);
    start.close();
    reportPipe.close();
    await abandon(dir, o.execId, child);
    await place.failed();
    return reason
      ? runtimeCreateError(reason, 'exec')
      : systemError(`conmon exited without starting the exec process in ${o.containerId}`);
  };
  let report: SyncMessage | null;
  try {
    report = await withTimeout(
      (async () => {
        if (!start.send()) return null;
        const ready = await reports.next();
        if (ready === null || ready.data < 0) return ready;
        await o.beforeRun?.(path.join(dir, BUNDLE_FILES.attach));
        if (!start.send()) return null;
        start.close();
        return reports.next();
      })(),
      env.startTimeoutMs,
    );
  } catch (e) {
    const err = systemError(`conmon failed to start the exec process in ${o.containerId}: ${(e as Error).message}`, e);
    await failed(null);
    throw err;
  }
  if (report === null || report.data <= 0) throw await failed(report);
  closeSync(stderr);
  const pid = report.data;
  const exit = reports.next().then(
    (m) => (m === null || m.data < 0 || m.data > 255 ? UNKNOWN_EXIT : m.data),
    () => UNKNOWN_EXIT,
  );
  void exit.finally(() => {
    reportPipe.close();
    place.ended();
  });
  env.logger.debug({ id: o.containerId, exec: o.execId, pid }, 'exec started');
  return { pid, exit };
}

/** conmon's reports, from the socket `fd` into `reports`; one that cannot be watched reads as no report. */
function readReports(fd: number, reports: SyncReader): PacketReader {
  try {
    const reader = readPacketsFrom(fd, (packet) => reports.push(packet.toString('utf8')));
    void reader.ended.then(() => reports.end());
    return reader;
  } catch (e) {
    reports.end(e as Error);
    return { ended: Promise.resolve(), close: () => undefined };
  }
}

/** conmon's start pipe: one byte per start message (it reads them apart), written straight to the descriptor. */
function startPipe(fd: number) {
  let open = true;
  const close = () => {
    if (open) closeSync(fd);
    open = false;
  };
  return {
    /** False when conmon is gone (EPIPE: its reports then say why, or nothing) or the start failed. */
    send(): boolean {
      if (!open) return false; // closed by a failure meanwhile: the number may be another file's now
      try {
        writeSync(fd, '0');
        return true;
      } catch {
        close();
        return false;
      }
    },
    close,
  };
}

/** What a non-blocking pipe holds now (conmon's stderr, read only when it failed). */
function readAvailable(fd: number): string {
  const buf = Buffer.alloc(STDERR_MAX);
  let n = 0;
  try {
    for (let got = 1; got > 0 && n < buf.length; n += got) got = readSync(fd, buf, n, buf.length - n, null);
  } catch {
    // EAGAIN: nothing more for now
  }
  return buf.toString('utf8', 0, n).trim();
}

/** Kills the exec's conmon if it got as far as forking its monitor. */
async function abandon(dir: string, execId: string, child: Spawned): Promise<void> {
  const monitor = await monitorPid(dir, execId);
  const spawned = child.exit === null ? child.pid : undefined;
  for (const p of [monitor, spawned]) {
    if (!p) continue;
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

/**
 * The pid in conmon's pid file, if that process is this exec's conmon (its
 * command line names the exec): a series' directory may hold a past run's file.
 */
async function monitorPid(dir: string, execId: string): Promise<number | null> {
  const pid = await readPidFile(path.join(dir, BUNDLE_FILES.conmonPid));
  if (!pid) return null;
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'latin1').catch(() => '');
  return cmdline.split('\0').includes(execId) ? pid : null;
}

function withTimeout<T>(job: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no report within ${ms} ms`)), ms);
  });
  return Promise.race([job, timeout]).finally(() => clearTimeout(timer));
}
