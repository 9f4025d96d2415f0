// A process run in a running container (`docker exec`), supervised by its own
// conmon in exec mode so that its exit status is always collected:
//
//   1. spawn `conmon --exec --exec-attach` with three pipes: sync (fd 3),
//      start (fd 4), attach (fd 5);
//   2. write the first start message; conmon forks, sets up the attach socket
//      and ctl FIFO in the exec's directory and reports on the attach pipe;
//   3. the caller connects to the attach socket (nothing runs yet, so no
//      output can be missed);
//   4. write the second start message: conmon runs `runc exec --detach` and
//      reports the pid on the sync pipe, later the exit status (128+n for a
//      signal) once the process has exited and its output has been drained.
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { systemError } from '../../errors.js';
import type { Logger } from '../../log.js';
import { BUNDLE_FILES, conmonExecArgs, SyncReader, type ConmonEnvironment, type SyncMessage } from './conmon.js';
import { runtimeCreateError } from './errors.js';
import { collectText, CONMON_ENV_PATH, readPidFile, runcLogError } from './proc.js';
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
  /** A directory of its own (created here, removed once the process has exited). */
  dir: string;
  /** The OCI process to run (config.json's `process` shape). */
  process: object;
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

/** The exec's attach socket and ctl FIFO, by its directory. */
const execFiles = (dir: string) => ({
  attach: path.join(dir, BUNDLE_FILES.attach),
  ctl: path.join(dir, BUNDLE_FILES.ctl),
});

export async function runExec(env: ExecEnvironment, o: ExecProcessOptions): Promise<ExecProcess> {
  await mkdir(o.dir, { recursive: true, mode: 0o700 });
  const processSpec = path.join(o.dir, 'process.json');
  await writeFile(processSpec, JSON.stringify(o.process), { mode: 0o600 });
  let child: Spawned;
  try {
    child = spawnDetached(env.conmonPath, conmonExecArgs(env, { ...o, processSpec }), {
      cwd: o.dir,
      env: { PATH: CONMON_ENV_PATH, _OCI_SYNCPIPE: '3', _OCI_STARTPIPE: '4', _OCI_ATTACHPIPE: '5' },
      pipes: [
        { fd: 2, direction: 'from-child' },
        { fd: 3, direction: 'from-child' },
        { fd: 4, direction: 'to-child' },
        { fd: 5, direction: 'from-child' },
      ],
    });
  } catch (e) {
    await rm(o.dir, { recursive: true, force: true }).catch(() => undefined);
    throw systemError(`conmon failed to start the exec process in ${o.containerId}: ${(e as Error).message}`, e);
  }
  const stderr = collectText(child.pipes.get(2)!);
  const [sync, start, attach] = [child.pipes.get(3)!, child.pipes.get(4)!, child.pipes.get(5)!];
  // conmon may close its ends at any point; failures show as missing reports.
  for (const s of [sync, start, attach]) s.on('error', () => {});
  const syncReader = new SyncReader(sync);
  const cleanup = () => rm(o.dir, { recursive: true, force: true }).catch(() => undefined);
  const failed = async (report: SyncMessage | null) => {
    const reason = report?.message || (await runcLogError(path.join(o.dir, BUNDLE_FILES.runcLog))) || stderr();
    await abandon(o.dir, child);
    await cleanup();
    return reason
      ? runtimeCreateError(reason, 'exec')
      : systemError(`conmon exited without starting the exec process in ${o.containerId}`);
  };
  let report: SyncMessage | null;
  try {
    report = await withTimeout(
      (async () => {
        start.write('0');
        const ready = await new SyncReader(attach).next();
        if (ready === null || ready.data < 0) return ready;
        attach.destroy();
        await o.beforeRun?.(execFiles(o.dir).attach);
        start.end('0');
        return syncReader.next();
      })(),
      env.startTimeoutMs,
    );
  } catch (e) {
    await abandon(o.dir, child);
    await cleanup();
    throw systemError(`conmon failed to start the exec process in ${o.containerId}: ${(e as Error).message}`, e);
  }
  if (report === null || report.data <= 0) throw await failed(report);
  const pid = report.data;
  const exit = syncReader.next().then(
    (m) => (m === null || m.data < 0 || m.data > 255 ? UNKNOWN_EXIT : m.data),
    () => UNKNOWN_EXIT,
  );
  void exit.finally(() => {
    sync.destroy();
    void cleanup();
  });
  env.logger.debug({ id: o.containerId, exec: o.execId, pid }, 'exec started');
  return { pid, exit };
}

/** Kills the exec's conmon if it got as far as forking its monitor. */
async function abandon(dir: string, child: Spawned): Promise<void> {
  const monitor = await readPidFile(path.join(dir, BUNDLE_FILES.conmonPid));
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

function withTimeout<T>(job: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no report within ${ms} ms`)), ms);
  });
  return Promise.race([job, timeout]).finally(() => clearTimeout(timer));
}
