// `docker exec`: processes run in a running container, each supervised by its
// own conmon (runtime/exec.ts) so that its exit code is always collected.
// Exec instances live in memory only, as in dockerd: they are forgotten a while
// after they exit, and with their container.
// Health checks run as execs (execProber, at the end): exec sits above health.ts,
// whose monitor sees it only as a Prober.
import { EventEmitter, once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { conflict, invalidParameter, messageOf, noSuchExec, systemError } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { EventBus } from '../events.js';
import { processEnded } from '../runtime/proc.js';
import type { ExecSeries } from '../runtime/exec.js';
import type { Runtime } from '../runtime/runtime.js';
import { Attachments, DEFAULT_DETACH_KEYS, parseDetachKeys, readOutput, type AttachSession } from './io/attach.js';
import type { ExecConfig, ExecCreateBody, Given } from './config.js';
import { resolveCapabilities } from './spec/capabilities.js';
import { mergeEnv } from './create/create.js';
import type { Container } from './container.js';
import type { ProbeRun, Prober } from './health.js';
import type { OciProcess } from './spec/oci.js';
import { linkVarsOf, withLinkEnv } from './links.js';
import { consoleSize, withDefaultEnv } from './spec/spec.js';
import { resolveUser } from './spec/user.js';

export interface ExecInstance {
  id: string;
  containerId: string;
  config: ExecConfig;
  running: boolean;
  /** null until the process has exited. */
  exitCode: number | null;
  pid: number;
  /** Started once; an exec cannot be started again. */
  started: boolean;
  /** Forgotten as soon as it exits (health checks: berth's own, run every few seconds). */
  transient?: boolean;
}

/** How long an exited exec stays inspectable. */
const KEEP_EXITED_MS = 10 * 60_000;

export interface ExecDeps {
  /** Finds an exec's container (the container service, which is built before this one). */
  containers: { get(ref: string): Container };
  runtime: Runtime;
  events: EventBus;
  logger: Logger;
}

/** The start of an exec: run() starts the process; an attached client reads `session`. */
export interface ExecStart {
  tty: boolean;
  session: AttachSession | null;
  /** Resolves once the process runs; rejects (after recording exit code 126) when it cannot start. */
  run(): Promise<void>;
  /**
   * The attached client went away before the stream ended: the process is
   * killed (now, or as soon as it runs), as dockerd does. No one is left to
   * read its output or end its input, and it would hold its conmon for ever.
   */
  abandon(): void;
  /** After run(): settles once the process has exited and its output (to an `output` callback) has all been read. */
  ended(): Promise<void>;
}

/** A command run again and again as transient execs of one run of a container (ExecService.repeat). */
export interface RepeatedExec {
  /** A new exec, started (run() runs it), its output (stdout and stderr) to `output`; throws when the container is not running. */
  start(output: (data: Buffer) => void): { exec: ExecInstance; start: ExecStart };
  /** No more starts: what the runs shared goes once the one under way has ended. */
  close(): void;
}

/** How long a resize waits for its exec to run, as dockerd's ContainerExecResize waits. */
const RESIZE_WAIT_MS = 10_000;

export class ExecService {
  private readonly execs = new Map<string, ExecInstance>();
  /** An exec's id once its process is spawned, or the exec has ended: what an early resize waits for. */
  private readonly spawned = new EventEmitter().setMaxListeners(0);
  private readonly attachments: Attachments;
  private readonly log: Logger;

  constructor(private readonly deps: ExecDeps) {
    this.log = deps.logger.child({ component: 'exec' });
    this.attachments = new Attachments(this.log);
  }

  /** `POST /containers/{id}/exec`. */
  create(ref: string, req: Given<ExecCreateBody>): { Id: string } {
    return { Id: this.add(this.runningContainer(ref), req).id };
  }

  /**
   * `req` run again and again in one run of a running container (its health
   * checks): each start() a transient exec (events and all, forgotten once it
   * exits) attached to its output. Its process spec is built at the first
   * start and its conmon directory kept until close(), rather than both at
   * every start: a check every second per container makes that count.
   */
  repeat(containerId: string, req: Given<ExecCreateBody>): RepeatedExec {
    let series: Promise<ExecSeries> | undefined;
    let closed = false;
    const seriesOf = (c: Container, e: ExecInstance) => {
      if (series) return series;
      const made = this.processSpec(c, e.config, false, undefined).then((p) => this.deps.runtime.execSeries(e.id, p));
      made.catch(() => {
        if (series === made) series = undefined; // built again at the next start
      });
      series = made;
      return made;
    };
    return {
      start: (output) => {
        if (closed) throw conflict(`Container ${containerId} is no longer checked`);
        const c = this.runningContainer(containerId);
        const exec = this.add(c, req, true);
        return { exec, start: this.begin(exec, c, { detach: false }, () => seriesOf(c, exec), output) };
      },
      close: () => {
        closed = true;
        void series?.then((s) => s.close()).catch(() => undefined);
      },
    };
  }

  /** A new exec instance of the running container `c`. */
  private add(c: Container, req: Given<ExecCreateBody>, transient = false): ExecInstance {
    if (!req.Cmd?.length) throw invalidParameter('No exec command specified');
    if (req.DetachKeys) parseDetachKeys(req.DetachKeys);
    const config: ExecConfig = {
      Cmd: req.Cmd,
      AttachStdin: req.AttachStdin ?? false,
      AttachStdout: req.AttachStdout ?? false,
      AttachStderr: req.AttachStderr ?? false,
      Tty: req.Tty ?? false,
      Env: req.Env ?? null,
      User: req.User ?? '',
      WorkingDir: req.WorkingDir ?? '',
      Privileged: req.Privileged ?? false,
      DetachKeys: req.DetachKeys ?? '',
      ConsoleSize: req.ConsoleSize ?? null,
    };
    const id = randomBytes(32).toString('hex');
    const e: ExecInstance = {
      id,
      containerId: c.id,
      config,
      running: false,
      exitCode: null,
      pid: 0,
      started: false,
      ...(transient ? { transient: true } : {}),
    };
    this.execs.set(id, e);
    this.event(c, `exec_create: ${config.Cmd.join(' ')}`, id);
    return e;
  }

  /** `GET /exec/{id}/json`. */
  inspect(id: string): ExecInstance {
    return this.find(id);
  }

  /**
   * `POST /exec/{id}/start`. Checks at once (so errors come before the stream);
   * the caller then runs it. Detached, nothing is attached.
   */
  start(id: string, o: { detach: boolean; consoleSize?: [number, number] | null }): ExecStart {
    const e = this.find(id);
    if (e.running) throw conflict(`Error: Exec command ${id} is already running`);
    if (e.started) throw conflict(`Error: Exec command ${id} has already run`);
    const c = this.runningContainer(e.containerId);
    const tty = e.config.Tty;
    const size = consoleSize(o.consoleSize ?? e.config.ConsoleSize);
    return this.begin(e, c, o, () => this.processSpec(c, e.config, tty, size));
  }

  /**
   * Starts exec `e` of the running container `c`, its process spec (or
   * series) from `spec`; its output to `output` when given (no client attaches).
   */
  private begin(
    e: ExecInstance,
    c: Container,
    o: { detach: boolean },
    spec: () => Promise<OciProcess | ExecSeries>,
    output?: (data: Buffer) => void,
  ): ExecStart {
    const { id } = e;
    e.started = true;
    // Running from the start, before its process is, as dockerd's ContainerExecStart marks it: a
    // client that polls inspect as soon as its attach is answered (Nomad's exec does, and ends the
    // session at the first Running false) must not read the time the process takes to spawn as an exit.
    e.running = true;
    let runCalled = false;
    const tty = e.config.Tty;
    const attached = !output && !o.detach && (e.config.AttachStdin || e.config.AttachStdout || e.config.AttachStderr);
    let exit: Promise<number> | undefined;
    let outputRead: Promise<void> = Promise.resolve();
    let abandoned = false;
    const kill = () => {
      if (!e.running || e.pid <= 0) return;
      this.log.debug({ id, pid: e.pid }, 'exec client gone; killing the process');
      try {
        process.kill(e.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    const session = attached
      ? this.attachments.open(
          id,
          { tty, openStdin: e.config.AttachStdin, stdinOnce: true, ended: () => processEnded(e.pid) },
          {
            stdin: e.config.AttachStdin,
            stdout: e.config.AttachStdout,
            stderr: e.config.AttachStderr,
            detachKeys: parseDetachKeys(e.config.DetachKeys || DEFAULT_DETACH_KEYS),
            // The stream ends once the exit code is known, so an inspect right after reads it.
            after: () => exit ?? Promise.resolve(),
          },
        )
      : null;
    const run = async () => {
      runCalled = true;
      try {
        const proc = await this.deps.runtime.exec({
          containerId: c.id,
          execId: id,
          process: await spec(),
          tty,
          stdin: !!session && e.config.AttachStdin,
          beforeRun: (socket) => {
            if (output) outputRead = readOutput(socket, output, this.log);
            else this.attachments.connect(id, socket);
          },
        });
        e.pid = proc.pid;
        this.spawned.emit(id);
        this.event(c, `exec_start: ${e.config.Cmd.join(' ')}`, id);
        exit = proc.exit.then((code) => this.exited(c, e, code));
        if (abandoned) kill();
      } catch (err) {
        this.attachments.fail(id);
        // Docker 27 (API 1.47, berth's) records 126 for any exec that could not start, a
        // missing command included (moby's exec.go); a container's own start gives 127 for that.
        this.exited(c, e, 126);
        throw err;
      }
    };
    const abandon = () => {
      abandoned = true;
      // Given up before its process was asked for: it never runs.
      if (!runCalled && e.exitCode === null) this.exited(c, e, 126);
      kill();
    };
    const ended = async () => {
      await Promise.all([exit, outputRead]);
    };
    return { tty, session, run, abandon, ended };
  }

  /**
   * `POST /exec/{id}/resize`. A client resizes as soon as its start's stream
   * is hijacked (cri-dockerd's first resize of `kubectl exec -it`), which may be
   * before the process runs: the resize waits for it, as dockerd's does. Once
   * the exec has ended it is dockerd's 404 (its runtime no longer knows it).
   */
  async resize(id: string, height: number, width: number): Promise<void> {
    const e = this.find(id);
    // Not started yet, or started and its process (its terminal) not there yet.
    if (e.pid <= 0 && e.exitCode === null) await this.untilSpawned(e);
    if (!e.running) throw noSuchExec(id);
    if (!e.config.Tty) return;
    await this.deps.runtime.resize(this.deps.runtime.execDir(id), height, width);
  }

  /** Until `e`'s process is spawned, or it has ended; a 500 after dockerd's wait. */
  private async untilSpawned(e: ExecInstance): Promise<void> {
    try {
      await once(this.spawned, e.id, { signal: AbortSignal.timeout(RESIZE_WAIT_MS) });
    } catch {
      throw systemError('timeout waiting for exec session ready');
    }
  }

  /**
   * The exec ids of a container (inspect's ExecIDs): those not yet exited. dockerd drops an exec
   * from its container's list when it exits, and keeps it inspectable by id.
   */
  idsOf(containerId: string): string[] {
    return [...this.execs.values()]
      .filter((e) => e.containerId === containerId && e.exitCode === null)
      .map((e) => e.id);
  }

  // ------------------------------------------------------------ internals

  private find(id: string): ExecInstance {
    const e = this.execs.get(id);
    if (!e) throw noSuchExec(id);
    try {
      this.deps.containers.get(e.containerId);
    } catch {
      this.execs.delete(id); // its container is gone
      throw noSuchExec(id);
    }
    return e;
  }

  private runningContainer(ref: string): Container {
    const c = this.deps.containers.get(ref);
    const id = c.id;
    if (c.status === 'paused') throw conflict(`Container ${id} is paused, unpause the container before exec`);
    if (c.status === 'restarting') throw conflict(`Container ${id} is restarting, wait until the container is running`);
    if (c.status !== 'running') throw conflict(`Container ${id} is not running`);
    return c;
  }

  private exited(c: Container, e: ExecInstance, code: number): number {
    e.running = false;
    e.exitCode = code;
    this.spawned.emit(e.id);
    this.event(c, 'exec_die', e.id, { exitCode: String(code) });
    if (e.transient) this.execs.delete(e.id);
    else setTimeout(() => this.execs.delete(e.id), KEEP_EXITED_MS).unref();
    this.log.debug({ id: e.id, container: c.id, code }, 'exec exited');
    return code;
  }

  /** The container's own process (its config.json) with the exec's command, environment, user and terminal. */
  private async processSpec(
    c: Container,
    x: ExecConfig,
    tty: boolean,
    size: ReturnType<typeof consoleSize>,
  ): Promise<OciProcess> {
    let base: OciProcess;
    try {
      base = (JSON.parse(await readFile(path.join(c.bundleDir, 'config.json'), 'utf8')) as { process: OciProcess })
        .process;
    } catch (err) {
      throw conflict(`Container ${c.id} is not running: ${messageOf(err)}`);
    }
    // The container's process carries its GroupAdd already; an exec's own user gets them too (dockerd's getUser).
    const user = x.User ? await resolveUser(c.rootfs, x.User, c.hostConfig.GroupAdd ?? []) : null;
    const caps = x.Privileged ? resolveCapabilities([], [], true) : null;
    const proc: OciProcess = {
      ...base,
      terminal: tty,
      args: [...x.Cmd],
      // dockerd: its defaults (TERM only with the exec's own terminal), its links' variables, the container's Env, the exec's Env.
      env: withDefaultEnv(withLinkEnv(linkVarsOf(base.env ?? [], c), mergeEnv(c.config.Env, x.Env)), {
        hostname: c.config.Hostname,
        tty,
      }),
      cwd: x.WorkingDir || base.cwd,
      ...(user ? { user: { uid: user.uid, gid: user.gid, additionalGids: user.additionalGids } } : {}),
      ...(caps ? { capabilities: { bounding: caps, effective: caps, permitted: caps } } : {}),
    };
    delete proc.consoleSize;
    if (tty && size) proc.consoleSize = size;
    return proc;
  }

  private event(c: Container, action: string, execId: string, extra: Record<string, string> = {}): void {
    this.deps.events.publish('container', action, c.id, {
      execID: execId,
      image: c.imageRef,
      name: c.name,
      ...extra,
    });
  }
}

/**
 * Checks run as dockerd's do: execs of the container (events and all), with
 * the container's user, directory and environment, no terminal and no stdin;
 * forgotten once they exit (they are not the user's). What every check of a
 * run shares (its process spec, its conmon directory) is made once.
 */
export function execProber(execs: ExecService): Prober {
  return (containerId, argv) => {
    const repeated = execs.repeat(containerId, { Cmd: argv, AttachStdout: true, AttachStderr: true });
    return { run: async (output) => startCheck(repeated.start(output)), close: () => repeated.close() };
  };
}

/** One check's exec, started. */
async function startCheck({ exec: record, start }: ReturnType<RepeatedExec['start']>): Promise<ProbeRun> {
  await start.run();
  // Its exit code, once its output has all been read.
  const exit = start.ended().then(() => record.exitCode ?? -1);
  const kill = () => {
    start.abandon();
    // Its whole process group (runc makes it a session leader): a shell's children would
    // otherwise live on, one more at every timeout (dockerd kills the shell alone).
    if (record.running && record.pid > 0) {
      try {
        process.kill(-record.pid, 'SIGKILL');
      } catch {
        // gone already
      }
    }
  };
  return { exit, kill };
}
