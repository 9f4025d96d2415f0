// Containers through conmon and runc. conmon is spawned per container and
// outlives berthd; everything else is a short `runc --root <exec-root>/runc …`.
// No HTTP, no database: callers keep the state, this only acts and reports.
// Beside it: runc.ts (a runc command and its errors), init.ts (what runc
// would do to a container's init, done without spawning it) and ctl.ts
// (conmon's ctl FIFO: resizes, the log's reopening).
import { lstat, mkdir, readdir, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { invalidParameter, isEngineError, systemError } from '../../errors.js';
import type { Logger } from '../../log.js';
import { BUNDLE_FILES, conmonArgs, readSyncMessage, type ConmonOptions, type SyncMessage } from './conmon.js';
import { ConmonCtl } from './ctl.js';
import { runtimeCreateError } from './errors.js';
import { ExecSeries, runExec, type ExecProcess, type ExecProcessOptions } from './exec.js';
import { finishRelease, processAlive, reap, releaseInit, signalInit } from './init.js';
import { collectText, CONMON_ENV_PATH, readPidFile, runcLogError } from './proc.js';
import {
  checkId,
  isMissing,
  NotRunning,
  RuncError,
  type RuntimeBinary,
  type RuntimeState,
  runRunc,
  toState,
  translate,
  VALID_ID,
} from './runc.js';
import { SealedExecutable } from './sealed.js';
import { Steps } from '../steps.js';
import { removeFile } from '../os/files.js';
import { spawnDetached, type Spawned } from '../os/spawn.js';

export type { RuntimeBinary, RuntimeState, RuntimeStatus } from './runc.js';

export interface RuntimeOptions {
  /** The default runtime's binary. */
  runcPath: string;
  /** The default runtime's global flags. */
  runtimeArgs?: readonly string[];
  /**
   * The daemon's other runtimes by name (HostConfig.Runtime), run from their
   * paths; they share runc's root, so each keeps its state under the container's id.
   */
  runtimes?: Readonly<Record<string, RuntimeBinary>>;
  conmonPath: string;
  /** berthd's exec root (e.g. /run/berth): runc state goes to <execRoot>/runc. */
  execRoot: string;
  logger: Logger;
  /** How long runc create may take before the container is killed (podman: 4 min). */
  createTimeoutMs?: number;
  /** The log size cap used when create() is given none; 0 = unlimited. */
  defaultLogSizeMax?: number;
}

export type CreateOptions = ConmonOptions;

export interface CreateResult {
  /** The container's init process, as seen from the host. */
  pid: number;
  /** The conmon that monitors it (the double-forked one, not the process we spawned). */
  conmonPid: number;
}

/** Default cap on a container's log file: conmon then starts it afresh, so a flood cannot fill the disk. */
export const DEFAULT_LOG_SIZE_MAX = 100 * 1024 * 1024;
const DEFAULT_CREATE_TIMEOUT_MS = 240_000;
/** How long a failed create waits for the conmon it killed to be gone. */
const ABANDON_WAIT_MS = 2000;

const VALID_SIGNAL = /^(?:\d{1,2}|(?:SIG)?[A-Z]+[0-9]*(?:[+-]\d+)?)$/i;

export class Runtime {
  readonly runcRoot: string;
  readonly socketDir: string;
  private readonly log: Logger;
  private readonly ctl = new ConmonCtl();
  private prepared: Promise<void> | undefined;
  /** Exit directories made (clearLeftovers). */
  private readonly exitDirs = new Set<string>();
  /** What conmon runs as runc (see sealed.ts); berthd's own runc commands run runcPath. */
  private readonly conmonRunc: SealedExecutable;
  /** The runtime each container was created with, by container id (see useRuntimeNames). */
  private runtimeNameOf: (containerId: string) => string | undefined = () => undefined;

  constructor(private readonly opts: RuntimeOptions) {
    this.runcRoot = path.join(opts.execRoot, 'runc');
    this.socketDir = path.join(opts.execRoot, 'conmon');
    this.log = opts.logger.child({ component: 'runtime' });
    this.conmonRunc = new SealedExecutable(opts.runcPath, this.log);
  }

  /** How to find a container's runtime name (its HostConfig.Runtime); absent or unknown is the default. */
  useRuntimeNames(nameOf: (containerId: string) => string | undefined): void {
    this.runtimeNameOf = nameOf;
  }

  /** The runtime a container runs under, when not the default one. */
  private otherRuntime(containerId: string): RuntimeBinary | undefined {
    // No other runtime configured (the usual case): nothing to look up.
    if (!this.opts.runtimes || Object.keys(this.opts.runtimes).length === 0) return undefined;
    const name = this.runtimeNameOf(containerId);
    return name === undefined ? undefined : this.opts.runtimes?.[name];
  }

  /** What conmon runs for the container: another runtime from its path, the default from its sealed copy. */
  private async conmonRuntime(containerId: string): Promise<{ runcPath: string; runtimeArgs: readonly string[] }> {
    const other = this.otherRuntime(containerId);
    if (other) return { runcPath: other.path, runtimeArgs: other.runtimeArgs };
    return { runcPath: await this.conmonRunc.path(), runtimeArgs: this.opts.runtimeArgs ?? [] };
  }

  /**
   * Spawns conmon, which runs `runc create`; resolves once the container
   * exists (created, not started) with its pid. A runc failure rejects with a
   * RuntimeCreateError carrying dockerd's message and exit code.
   */
  async create(o: CreateOptions): Promise<CreateResult> {
    checkId(o.id);
    const steps = new Steps();
    await this.prepare();
    await this.clearLeftovers(o);
    const runc = await this.conmonRuntime(o.id);
    steps.mark('leftovers');
    const t0 = performance.now();
    let forked = 0; // when the spawned conmon has forked its monitor and exited
    let stderr = () => '';
    let report: SyncMessage | null;
    try {
      const child = this.spawnConmon(o, runc);
      void child.exited.then(() => (forked = performance.now()));
      stderr = collectText(child.pipes.get(2)!);
      report = await readSyncMessage(child.pipes.get(3)!, this.createTimeout);
    } catch (e) {
      await this.abandon(o.id, o.bundleDir);
      throw systemError(`conmon failed to create container ${o.id}: ${(e as Error).message}`, e);
    }
    const t1 = performance.now();
    steps.mark('conmon');
    if (report === null || report.data < 0) {
      const reason = report?.message || (await runcLogError(path.join(o.bundleDir, BUNDLE_FILES.runcLog))) || stderr();
      await this.abandon(o.id, o.bundleDir);
      throw reason ? runtimeCreateError(reason) : systemError(`conmon exited without creating container ${o.id}`);
    }
    const conmonPid = await readPidFile(path.join(o.bundleDir, BUNDLE_FILES.conmonPid));
    steps.mark('pidfile');
    const createSteps = { ...steps.ms, conmonFork: round((forked || t1) - t0) };
    this.log.debug({ id: o.id, pid: report.data, conmonPid, createSteps }, 'container created');
    return { pid: report.data, conmonPid: conmonPid ?? 0 };
  }

  /** The container's attach socket (conmon's, SOCK_SEQPACKET); it exists from create until the container exits. */
  attachSocket(id: string): string {
    checkId(id);
    return path.join(this.socketDir, id, BUNDLE_FILES.attach);
  }

  /**
   * Sets the terminal size of a container (its bundle directory) or an exec
   * (its directory) through conmon's ctl FIFO. Refused when no conmon reads it.
   */
  resize(dir: string, height: number, width: number): Promise<void> {
    return this.ctl.resize(dir, height, width);
  }

  /**
   * Asks the container's conmon to reopen its log (conmon.ts CTL_REOPEN_LOG).
   * False when no conmon reads its ctl FIFO (the container has exited).
   */
  reopenLog(bundleDir: string): Promise<boolean> {
    return this.ctl.reopenLog(bundleDir);
  }

  /** Runs a process in a running container under its own conmon (see exec.ts). */
  async exec(o: Omit<ExecProcessOptions, 'dir'>): Promise<ExecProcess> {
    checkId(o.containerId);
    checkId(o.execId);
    await this.prepare();
    const env = {
      ...(await this.conmonRuntime(o.containerId)),
      runcRoot: this.runcRoot,
      socketDir: this.socketDir,
      conmonPath: this.opts.conmonPath,
      logger: this.log,
      startTimeoutMs: this.createTimeout,
    };
    return runExec(env, { ...o, dir: this.execDir(o.execId) });
  }

  /**
   * A process spec to be run again and again, one run at a time (a
   * container's health checks): exec() it as `process`; close() it when done.
   * Its directory is named by `id`, an exec id not otherwise used.
   */
  execSeries(id: string, process: object): ExecSeries {
    return new ExecSeries(this.execDir(id), process);
  }

  /** An exec's directory (its process spec, attach socket and ctl FIFO), while it runs. */
  execDir(execId: string): string {
    checkId(execId);
    return path.join(this.opts.execRoot, 'execs', execId);
  }

  /** Lets the created container's process exec its command. */
  async start(id: string): Promise<void> {
    checkId(id);
    if (await releaseInit(this.runcRoot, id)) return;
    await this.runcFor(id, ['start', id]);
  }

  /**
   * Signals the container's init (or every process, with `all`): a name with
   * or without SIG, or a number. Resolves
   * false when there is no process left to signal: it has exited (its exit is
   * on its way through conmon) or the container is gone.
   */
  async kill(id: string, signal: string | number = 'SIGTERM', opts: { all?: boolean } = {}): Promise<boolean> {
    const sig = String(signal);
    if (!VALID_SIGNAL.test(sig)) throw invalidParameter(`Invalid signal: ${sig}`);
    if (typeof signal === 'number' && signal > 0 && !opts.all && !this.otherRuntime(id)) {
      const sent = await signalInit(this.runcRoot, id, signal);
      if (sent !== undefined) return sent;
    }
    try {
      await this.runcFor(id, ['kill', ...(opts.all ? ['--all'] : []), id, sig]);
      return true;
    } catch (e) {
      if (isEngineError(e, 'not-found') || e instanceof NotRunning) return false;
      throw e;
    }
  }

  /** Removes the runtime's record (and cgroups) of a container; one that does not exist is fine. */
  async delete(id: string, force = false): Promise<void> {
    checkId(id);
    try {
      // runc finds a container by its <root>/<id>/state.json; without one it would only answer
      // "does not exist", after a spawn that each removal would pay for (an exit already deleted it).
      // Another runtime keeps its state its own way: it is asked to delete, every time.
      const other = this.otherRuntime(id) !== undefined;
      const state = other
        ? ''
        : await readFile(path.join(this.runcRoot, id, 'state.json'), 'utf8').then(
            (t) => t,
            () => null,
          );
      if (state !== null && (other || !(await reap(this.runcRoot, id, state))))
        await this.runc(['delete', ...(force ? ['--force'] : []), id], undefined, id);
    } catch (e) {
      if (!(e instanceof RuncError && isMissing(e))) throw translate(id, e);
    }
    await removeFile(path.join(this.socketDir, id));
  }

  /** The runtime's view of a container, or null when it has none. */
  async state(id: string): Promise<RuntimeState | null> {
    checkId(id);
    try {
      return toState(JSON.parse(await this.runc(['state', id], undefined, id)));
    } catch (e) {
      if (e instanceof RuncError && isMissing(e)) return null;
      throw translate(id, e);
    }
  }

  /** Every container runc knows under this exec root (for reconciling after a restart). */
  async list(): Promise<RuntimeState[]> {
    await this.prepare();
    const out = await this.runc(['list', '--format', 'json']);
    const rows = (JSON.parse(out || 'null') ?? []) as unknown[];
    return rows.map(toState);
  }

  async pause(id: string): Promise<void> {
    await this.runcFor(id, ['pause', id]);
  }

  async resume(id: string): Promise<void> {
    await this.runcFor(id, ['resume', id]);
  }

  /** Changes a running container's cgroup limits (`runc update`: OCI LinuxResources, what is left out stays). */
  async update(id: string, resources: object): Promise<void> {
    await this.runcFor(id, ['update', '--resources', '-', id], JSON.stringify(resources));
  }

  /** The container's conmon pid from its pidfile, if that process still runs conmon (a zombie does not). */
  async conmonPid(bundleDir: string): Promise<number | null> {
    const pid = await readPidFile(path.join(bundleDir, BUNDLE_FILES.conmonPid));
    if (pid === null) return null;
    // /proc/<pid>/stat: "pid (comm) state ..."; comm may hold spaces, so split at the last ')'.
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return comm === 'conmon' && state !== 'Z' && state !== 'X' ? pid : null;
  }

  /** Whether conmon saw the container's cgroup OOM-kill a process. */
  async oomKilled(bundleDir: string): Promise<boolean> {
    return readFile(path.join(bundleDir, BUNDLE_FILES.oom)).then(
      () => true,
      () => false,
    );
  }

  /** Ids of the containers runc has a record of, read from its root (no runc spawned). */
  async recorded(): Promise<string[]> {
    return (await readdir(this.runcRoot).catch(() => [] as string[])).filter((n) => VALID_ID.test(n));
  }

  /**
   * For a container runc reports as created: true when its init has in fact
   * been released already, and runs the command (a start cut short between
   * reading exec.fifo and removing it, which is what runc's "created" looks
   * at). The fifo is then removed, as releaseInit() would have, and runc
   * reports it running from here on.
   */
  async finishRelease(id: string): Promise<boolean> {
    return finishRelease(this.runcRoot, id);
  }

  /**
   * Waits for a `runc create` that may still be under way for the container
   * (conmon runs it, and goes on when berthd dies): its state directory is
   * there, its state file (written at the end, by rename) not yet. Resolves
   * once the state file is there or the directory gone; after `timeoutMs`, a
   * directory with no state file is removed (a create that will never end).
   */
  async createSettled(id: string, timeoutMs = 10_000): Promise<void> {
    checkId(id);
    // runc's state files: another runtime's directory is not read, nor removed.
    if (this.otherRuntime(id)) return;
    const dir = path.join(this.runcRoot, id);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const [hasDir, hasState] = await Promise.all(
        [dir, path.join(dir, 'state.json')].map((p) =>
          lstat(p).then(
            () => true,
            () => false,
          ),
        ),
      );
      if (!hasDir || hasState) return;
      if (Date.now() > deadline) {
        this.log.warn({ id }, 'removing the state directory of a runc create that never ended');
        await rm(dir, { recursive: true, force: true });
        return;
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /**
   * Ends a container that was created and never started: after a failed or
   * timed-out create, or a start that a crash of berthd cut short. No conmon,
   * no runc record, no socket link remains.
   */
  async abandon(id: string, bundleDir: string): Promise<void> {
    const pid = await this.conmonPid(bundleDir);
    if (pid !== null) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
      // kill() only queues the signal: the caller goes on once conmon is gone.
      for (let i = 0; i < ABANDON_WAIT_MS / 5 && (await processAlive(pid)); i++)
        await new Promise((r) => setTimeout(r, 5));
    }
    await this.delete(id, true).catch((e) => this.log.warn({ id, err: e }, 'removing an abandoned container'));
  }

  /**
   * Makes the sealed copy of runc, which every create and exec otherwise makes
   * at its first use. berthd calls it once it is serving, so that what it holds
   * is the same before and after its first container, and the ~8 ms copy is
   * not on the path to its first answer.
   */
  async seal(): Promise<void> {
    await this.conmonRunc.path();
  }

  /** What every create and exec needs, done once: runc's and conmon's directories. */
  prepare(): Promise<void> {
    this.prepared ??= Promise.all([
      mkdir(this.runcRoot, { recursive: true, mode: 0o700 }),
      mkdir(this.socketDir, { recursive: true, mode: 0o700 }),
      // Execs of an earlier berthd: nothing can reach them any more (dockerd forgets execs too).
      rm(path.join(this.opts.execRoot, 'execs'), { recursive: true, force: true }),
    ]).then(() => undefined);
    return this.prepared;
  }

  // ------------------------------------------------------------- internals

  private get createTimeout(): number {
    return this.opts.createTimeoutMs ?? DEFAULT_CREATE_TIMEOUT_MS;
  }

  /** Files a previous run of the same container left (a stale exit file would read as this run's exit). */
  private async clearLeftovers(o: CreateOptions): Promise<void> {
    const files = [
      path.join(o.exitDir, o.id),
      path.join(this.socketDir, o.id),
      ...[BUNDLE_FILES.containerPid, BUNDLE_FILES.conmonPid, BUNDLE_FILES.runcLog, BUNDLE_FILES.oom].map((f) =>
        path.join(o.bundleDir, f),
      ),
    ];
    if (o.persistDir) files.push(path.join(o.persistDir, 'exit'), path.join(o.persistDir, 'oom'));
    // conmon can only report the exit into a directory that exists (made once: it is the daemon's).
    if (!this.exitDirs.has(o.exitDir)) {
      await mkdir(o.exitDir, { recursive: true, mode: 0o700 });
      this.exitDirs.add(o.exitDir);
    }
    await Promise.all(files.map(removeFile));
  }

  private spawnConmon(o: CreateOptions, runtime: { runcPath: string; runtimeArgs: readonly string[] }): Spawned {
    const args = conmonArgs(
      { ...runtime, runcRoot: this.runcRoot, socketDir: this.socketDir },
      { ...o, logSizeMax: o.logSizeMax ?? this.opts.defaultLogSizeMax ?? DEFAULT_LOG_SIZE_MAX },
    );
    return spawnDetached(this.opts.conmonPath, args, {
      // conmon writes its "oom" marker into its working directory.
      cwd: o.bundleDir,
      env: { PATH: CONMON_ENV_PATH, _OCI_SYNCPIPE: '3' },
      pipes: [
        { fd: 2, direction: 'from-child' },
        { fd: 3, direction: 'from-child' },
      ],
    });
  }

  /** The runtime's command on the container `id` names (the default runtime's without one). */
  private runc(args: string[], input?: string, id?: string): Promise<string> {
    const runtime = (id === undefined ? undefined : this.otherRuntime(id)) ?? {
      path: this.opts.runcPath,
      runtimeArgs: this.opts.runtimeArgs ?? [],
    };
    return runRunc(runtime, this.runcRoot, args, input);
  }

  /** runc on one container, its errors turned into engine errors. */
  private async runcFor(id: string, args: string[], input?: string): Promise<void> {
    checkId(id);
    try {
      await this.runc(args, input, id);
    } catch (e) {
      throw translate(id, e);
    }
  }
}

const round = (ms: number) => Math.round(ms * 10) / 10;
