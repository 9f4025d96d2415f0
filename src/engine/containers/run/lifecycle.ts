// A container's process from start to end: start, stop, kill, restart, pause
// and unpause (and a commit's freeze and thaw). The process runs under conmon,
// which outlives berthd; its exit is recorded by exits.ts.
import { conflict, isEngineError, messageOf, noSuchContainer, notModified } from '../../../errors.js';
import type { Logger } from '../../../log.js';
import type { EventBus } from '../../events.js';
import type { Endpoints } from '../../network/endpoints.js';
import { parsePortBindings } from '../../network/ports.js';
import { dirInRoot } from '../../os/rootfs.js';
import { RuntimeCreateError } from '../../runtime/errors.js';
import type { ExitWatcher } from '../../runtime/exits.js';
import type { Runtime } from '../../runtime/runtime.js';
import { normalizeSignal, SIGNALS, signalNumber } from '../../signals.js';
import { Steps } from '../../steps.js';
import { type ContainerRepository, runningState } from '../../store/containers.js';
import type { VolumeService } from '../../volumes/service.js';
import { type Container, isActive, isRunning, publish } from '../container.js';
import { conmonLogSizeMax, logPolicy } from '../create/logconfig.js';
import type { Attachments } from '../io/attach.js';
import type { JsonLogs } from '../io/jsonlog.js';
import type { LogRotation } from '../io/logrotation.js';
import type { ContainerLookup } from '../lookup.js';
import type { WaitCondition, WaitResult, Waits } from '../waits.js';
import { type Bundles, markFrozen, releaseMounts, unmarkFrozen } from './bundle.js';
import type { ExitHandler } from './exits.js';
import { networkIdentity } from './netjoin.js';
import { killEndsPolicy } from './restart.js';

/** What the lifecycle is given: the daemon's parts a run uses, and what starts and stops with it. */
export interface LifecycleDeps {
  repo: ContainerRepository;
  runtime: Runtime;
  /** conmon's exit files (runtime/exits.ts): where a run's exit is written. */
  exits: Pick<ExitWatcher, 'exitDir' | 'readExit'>;
  endpoints: Pick<Endpoints, 'announce' | 'attach' | 'withdraw'>;
  volumes: Pick<VolumeService, 'activate' | 'deactivate'>;
  events: EventBus;
  /** Default cap on a container's log, bytes. */
  logSizeMax: number;
  lookup: Pick<ContainerLookup, 'find' | 'byId'>;
  waits: Pick<Waits, 'add' | 'notify'>;
  bundles: Pick<Bundles, 'ready' | 'linkTargetChanged'>;
  /** Clients attached to containers' stdio (io/attach.ts): joined to a run at its start. */
  attachments: Pick<Attachments, 'connect' | 'fail'>;
  jsonLogs: Pick<JsonLogs, 'started'>;
  logRotation: Pick<LogRotation, 'started'>;
  /** The health checks (health.ts, above this module): they follow a run's start, pause and unpause. */
  health: { started(id: string): void; stopped(id: string): void; resumed(id: string): void };
  log: Logger;
}

/** How often a wait for a signalled container's exit looks whether its monitor is still there. */
const LOST_EXIT_CHECK_MS = 2000;

export class Lifecycle {
  /** Starts in progress, so an exit that races a start is handled after it. */
  private readonly starting = new Map<string, Promise<unknown>>();

  constructor(
    private readonly deps: LifecycleDeps,
    private readonly exits: Pick<ExitHandler, 'settled' | 'onExit' | 'cancelRestart'>,
    /** Removes an AutoRemove container whose start failed. */
    private readonly autoRemove: (id: string) => Promise<void>,
  ) {}

  /** The start of the container under way, if any. */
  startOf(id: string): Promise<unknown> | undefined {
    return this.starting.get(id);
  }

  /**
   * Waits for the container's exit or removal. For 'not-running', a container
   * with no process and no start under way answers at once.
   */
  waitFor(c: Container, condition: WaitCondition, signal?: AbortSignal): Promise<WaitResult> {
    if (condition === 'not-running' && !isActive(c) && !this.starting.has(c.id)) {
      return Promise.resolve({ StatusCode: c.exitCode, Error: null });
    }
    return this.deps.waits.add(c.id, condition, signal);
  }

  async start(ref: string): Promise<void> {
    const c = this.deps.lookup.find(ref);
    if (c.status === 'running' || c.status === 'restarting') throw notModified();
    if (c.status === 'paused') throw conflict('cannot start a paused container, try unpause instead');
    await this.guardStart(c.id, () =>
      this.run(c.id, {}).catch(async (e) => {
        // As dockerd: an AutoRemove container that cannot start is removed (`docker run --rm`
        // waits for condition=removed after a failed start).
        if (c.hostConfig.AutoRemove) await this.autoRemove(c.id);
        throw e;
      }),
    );
  }

  /** Starts an exited container again, as its restart policy says (exits.ts). */
  startAgain(id: string, restartCount: number): Promise<void> {
    return this.guardStart(id, () => this.run(id, { restartCount }));
  }

  private async guardStart<T>(id: string, fn: () => Promise<T>): Promise<T> {
    if (this.starting.has(id)) throw conflict(`container ${id} is already being started`);
    const job = fn();
    this.starting.set(
      id,
      job.catch(() => undefined),
    );
    try {
      return await job;
    } finally {
      this.starting.delete(id);
    }
  }

  /** A joiner's names and /etc files are its donor's from this start on (netjoin.ts), in inspect too, as dockerd records them. */
  private recordNetworkIdentity(c: Container): void {
    const named = networkIdentity(c, (ref) => this.deps.lookup.find(ref));
    if (named.etcDir === c.bundleDir) return;
    const config = { ...c.config, Hostname: named.hostname, Domainname: named.domainname };
    this.deps.repo.update(c.id, { config: JSON.stringify(config), etc_dir: named.etcDir });
  }

  /**
   * Creates and starts the container's process under conmon, and records the
   * run. `restartCount`: a start by the restart policy, not by the user.
   */
  private async run(id: string, o: { restartCount?: number }): Promise<void> {
    const { deps } = this;
    const { runtime, exits, repo, attachments } = deps;
    const steps = new Steps();
    await this.exits.settled(id); // runc's record of the last run is gone before this one is created
    steps.mark('settled');
    const c = this.deps.lookup.byId(id);
    if (!c) throw noSuchContainer(id);
    await this.deps.bundles.ready(c);
    steps.mark('bundle');
    this.recordNetworkIdentity(c);
    const member = { id, name: c.name, hostname: c.config.Hostname };
    // The names on user networks first: the DNS server reloads while runc creates the container.
    const named = deps.endpoints.announce(member);
    named.catch(() => undefined); // awaited below; a failure of runtime.create comes first
    try {
      // Volumes with DriverOpts mounted, new empty ones filled from the image (copy-up).
      await deps.volumes.activate(id, (destination) => dirInRoot(c.rootfs, destination));
      steps.mark('volumes');
      const logs = logPolicy(c.hostConfig.LogConfig);
      const created = await runtime.create({
        id,
        bundleDir: c.bundleDir,
        logPath: logs.driver === 'none' ? null : c.logPath,
        exitDir: exits.exitDir,
        tty: c.config.Tty,
        stdin: c.config.OpenStdin,
        stdinOnce: c.config.StdinOnce,
        logSizeMax: conmonLogSizeMax(logs, deps.logSizeMax),
      });
      steps.mark('create');
      // The loopback of the container's own network namespace is up already: runc
      // brings it up in every network namespace it creates (libcontainer's "loopback" network).
      // Its other interfaces are made now, before its process runs.
      await deps.endpoints.attach(
        {
          ...member,
          nsPath: `/proc/${created.pid}/ns/net`,
          ports: parsePortBindings(
            c.hostConfig.PortBindings,
            c.config.ExposedPorts,
            c.hostConfig.PublishAllPorts ?? false,
          ),
        },
        { named: true },
      );
      // Its names answer before its process runs (and the reload that added them is over).
      await named;
      steps.mark('network');
      // Clients attached before the start join now, before the process runs.
      attachments.connect(id, runtime.attachSocket(id));
      await runtime.start(id);
      steps.mark('release');
      repo.update(id, {
        ...runningState('running', created.pid, created.conmonPid),
        // Only the user's start forgets a kill (dockerd's): unless-stopped stays ended through the restarts.
        ...(o.restartCount !== undefined ? { restart_count: o.restartCount } : { manually_stopped: 0 }),
      });
      // One who attached while this start was under way (and saw "created").
      attachments.connect(id, runtime.attachSocket(id));
      publish(deps.events, c, 'start');
      this.deps.bundles.linkTargetChanged(c).catch((err) => this.deps.log.warn({ err, id }, 'links to it not updated'));
      this.deps.health.started(id);
      this.deps.logRotation.started(id);
      this.deps.jsonLogs.started(id);
      steps.mark('record');
      this.deps.log.debug({ id, startSteps: steps.ms }, 'container started');
    } catch (e) {
      attachments.fail(id);
      deps.volumes.deactivate(id);
      await named.catch(() => undefined);
      await deps.endpoints.withdraw(member).catch(() => undefined);
      await runtime.delete(id, true).catch(() => undefined);
      await releaseMounts(c.bundleDir).catch(() => undefined);
      const code = e instanceof RuntimeCreateError ? e.code : 128;
      repo.update(id, { status: c.finishedAt ? 'exited' : 'created', exit_code: code, error: messageOf(e), pid: 0 });
      throw e;
    }
  }

  async stop(ref: string, opts: { timeoutSec?: number; signal?: string } = {}): Promise<void> {
    const c = await this.findPastRestart(ref);
    if (!isRunning(c) && c.status !== 'restarting') throw notModified();
    const { repo } = this.deps;
    repo.update(c.id, { stopped_by_user: 1, manually_stopped: 1 });
    if (c.status === 'restarting') return this.cancelRestart(c);
    const signal = normalizeSignal(opts.signal || c.config.StopSignal || 'SIGTERM');
    await this.terminate(c, signal, opts.timeoutSec ?? c.config.StopTimeout ?? 10);
    publish(this.deps.events, c, 'stop');
  }

  async kill(ref: string, signal = 'SIGKILL'): Promise<void> {
    const sig = normalizeSignal(signal);
    const c = await this.findPastRestart(ref);
    if (!isActive(c)) throw conflict(`Cannot kill container: ${ref}: Container ${c.id} is not running`);
    // As dockerd's: any kill marks the container manually stopped (unless-stopped ends), while
    // only its stop signal or SIGKILL ends the other policies (restart.ts).
    const ends = killEndsPolicy(sig, c.config.StopSignal);
    this.deps.repo.update(c.id, { manually_stopped: 1, ...(ends ? { stopped_by_user: 1 } : {}) });
    // A container waiting to be restarted has no process to signal: the kill only tells
    // whether the restart still happens.
    if (c.status === 'restarting') {
      if (ends) this.cancelRestart(c);
      return;
    }
    // A SIGKILL is answered once the exit is recorded, as dockerd's: an inspect
    // right after `docker kill` sees the container exited, with 137.
    const exited = sig === 'SIGKILL' ? this.deps.waits.add(c.id, 'not-running') : undefined;
    await this.signal(c.id, sig);
    publish(this.deps.events, c, 'kill', { signal: String(SIGNALS[sig] ?? sig) });
    // dockerd's: a paused container that the kill ends is thawed, to act on the signal (kill's
    // event, then unpause's). One whose exit is recorded meanwhile is not paused: nothing to thaw.
    if (ends && c.status === 'paused') await this.unpause(c.id).catch(() => undefined);
    if (exited) await this.exitOf(c.id, exited);
  }

  /**
   * The container, after the policy's restart under way, if any: a stop or
   * kill then finds the new run (dockerd's container lock), not a restart
   * still to cancel that has already happened.
   */
  private async findPastRestart(ref: string): Promise<Container> {
    const c = this.deps.lookup.find(ref);
    if (c.status !== 'restarting' || !this.starting.has(c.id)) return c;
    await this.starting.get(c.id);
    return this.deps.lookup.find(c.id);
  }

  /** A container waiting for its policy's restart stays exited. */
  private cancelRestart(c: Container): void {
    this.exits.cancelRestart(c.id);
    this.deps.repo.update(c.id, { status: 'exited' });
    this.deps.waits.notify(c.id, ['not-running'], c.exitCode);
  }

  /**
   * Ends a running container's process: `signal`, then SIGKILL once
   * `timeoutSec` has passed (a negative timeout waits for as long as it takes,
   * as dockerd's). Resolves once the exit is recorded.
   */
  async terminate(c: Container, signal: string, timeoutSec: number): Promise<void> {
    const exited = this.deps.waits.add(c.id, 'not-running');
    if (c.status === 'paused') await this.deps.runtime.resume(c.id).catch(() => undefined);
    await this.signal(c.id, signal);
    if (timeoutSec >= 0) {
      const timer = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), timeoutSec * 1000).unref());
      if ((await Promise.race([exited, timer])) === 'timeout') await this.signal(c.id, 'SIGKILL');
    }
    await this.exitOf(c.id, exited);
  }

  /**
   * Signals a container's process. One that has exited since the caller
   * looked (its exit not yet recorded) needs no signal: its exit is on the way,
   * and whoever waits for it is told then. So the outcome of stop, kill and a
   * forced remove never depends on which of the two came first.
   */
  private async signal(id: string, sig: string): Promise<void> {
    // By number: runc knows the real-time signals only so.
    await this.deps.runtime.kill(id, signalNumber(sig), { all: false });
  }

  /**
   * Waits for a signalled container's exit. conmon reports every exit, unless
   * it died itself (killed by hand, or by the OOM killer): then no report would
   * ever come, so now and then the monitor is looked for, and an exit it can
   * no longer report is recorded here.
   */
  private async exitOf(id: string, exited: Promise<unknown>): Promise<void> {
    const { runtime, exits } = this.deps;
    let done = false;
    void exited.then(() => (done = true));
    for (;;) {
      await Promise.race([exited, new Promise((r) => setTimeout(r, LOST_EXIT_CHECK_MS).unref())]);
      if (done) return;
      const c = this.deps.lookup.byId(id);
      if (!c || !isActive(c)) return;
      if ((await runtime.conmonPid(c.bundleDir)) !== null) continue;
      const code = await exits.readExit(id);
      await this.exits.onExit(
        id,
        code ?? 255,
        code === null ? 'container monitor (conmon) exited without reporting an exit' : '',
      );
    }
  }

  async restart(ref: string, opts: { timeoutSec?: number; signal?: string } = {}): Promise<void> {
    const c = this.deps.lookup.find(ref);
    if (isRunning(c)) {
      // An exit that lands first leaves nothing to stop: go on to the start.
      await this.stop(c.id, opts).catch((e: unknown) => {
        if (!isEngineError(e, 'not-modified')) throw e;
      });
    }
    await this.guardStart(c.id, () => this.run(c.id, {}));
    publish(this.deps.events, c, 'restart');
  }

  async pause(ref: string): Promise<void> {
    const c = this.deps.lookup.find(ref);
    if (c.status === 'paused') throw conflict(`Container ${c.id} is already paused`);
    await this.setPaused(c, true);
  }

  async unpause(ref: string): Promise<void> {
    await this.setPaused(this.deps.lookup.find(ref), false);
  }

  /** Freezes or thaws the container's processes (their cgroup), and records it. */
  private async setPaused(c: Container, paused: boolean): Promise<void> {
    const { runtime, repo, events } = this.deps;
    const from = paused ? 'running' : 'paused';
    const refused = () => conflict(`Container ${c.id} is not ${from}`);
    if (c.status !== from) throw refused();
    await (paused ? runtime.pause(c.id) : runtime.resume(c.id));
    // An exit recorded meanwhile stands: a frozen cgroup with no process is not a paused container.
    if (!repo.updateIf(c.id, from, { status: paused ? 'paused' : 'running' })) throw refused();
    // dockerd's: a paused container's checks stop (no process would answer them) and start again after.
    if (paused) this.deps.health.stopped(c.id);
    else this.deps.health.resumed(c.id);
    publish(events, c, paused ? 'pause' : 'unpause');
  }

  /**
   * Pauses a running container for a commit, as pause() does, marked so in its
   * bundle until thaw(): a berthd killed in between unpauses it when it starts
   * again (exits.ts), since nobody asked for that pause.
   */
  async freeze(ref: string): Promise<void> {
    const c = this.deps.lookup.find(ref);
    await markFrozen(c);
    try {
      await this.pause(c.id);
    } catch (e) {
      await unmarkFrozen(c);
      throw e;
    }
  }

  /** Ends a freeze(). */
  async thaw(ref: string): Promise<void> {
    const c = this.deps.lookup.find(ref);
    try {
      await this.unpause(c.id);
    } finally {
      await unmarkFrozen(c);
    }
  }
}
