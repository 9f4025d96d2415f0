// A container's exit and what follows it: the record, the waits answered, the
// runtime's leftovers cleared, the restart policy applied (restart.ts decides).
// Exits arrive from conmon's exit files by inotify (runtime/exits.ts). At
// berthd's start, recover() reconciles what happened while it was down.
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../../../log.js';
import type { EventBus } from '../../events.js';
import type { Endpoints } from '../../network/endpoints.js';
import { TRASH_PREFIX } from '../../os/dirs.js';
import type { ExitWatcher } from '../../runtime/exits.js';
import type { Runtime } from '../../runtime/runtime.js';
import { type ContainerRepository, runningState } from '../../store/containers.js';
import type { VolumeService } from '../../volumes/service.js';
import { ACTIVE, type Container, isActive, memberOf, publish } from '../container.js';
import type { JsonLogs } from '../io/jsonlog.js';
import type { LogRotation } from '../io/logrotation.js';
import type { ContainerLookup } from '../lookup.js';
import type { Waits } from '../waits.js';
import { isMarkedFrozen, releaseMounts, unmarkFrozen } from './bundle.js';
import { restartDecision } from './restart.js';

/** What exits are given: the daemon's parts they use, and what ends with a run. */
export interface ExitDeps {
  repo: ContainerRepository;
  runtime: Runtime;
  /** conmon's exit files, watched (runtime/exits.ts). */
  exits: ExitWatcher;
  endpoints: Pick<Endpoints, 'restore' | 'detach'>;
  volumes: Pick<VolumeService, 'deactivate'>;
  events: EventBus;
  /** <data-root>/containers, where a crash may have left directories. */
  root: string;
  lookup: Pick<ContainerLookup, 'byId' | 'withStatus'>;
  waits: Pick<Waits, 'notify'>;
  log: Logger;
  /** json-file's file (io/jsonlog.ts): whole before the exit is recorded. */
  jsonLogs: Pick<JsonLogs, 'stopped'>;
  /** The running containers' log rotation (io/logrotation.ts): it stops at the exit. */
  logRotation: Pick<LogRotation, 'stopped'>;
  /** The health checks (health.ts, above this module): they stop at the exit. */
  health: { stopped(id: string): void };
}

/** What exits need of the lifecycle (lifecycle.ts) and of removal (service.ts). */
export interface ExitHooks {
  /** The start of the container under way, if any: an exit racing it is handled after it. */
  startOf(id: string): Promise<unknown> | undefined;
  startAgain(id: string, restartCount: number): Promise<void>;
  autoRemove(id: string): Promise<void>;
}

export class ExitHandler {
  private readonly restartTimers = new Map<string, NodeJS.Timeout>();
  /**
   * Tear-downs after an exit (runc's state), done after the waiters are
   * told: `docker run --rm` need not wait for them. A start or removal of the
   * container waits for them (settled()).
   */
  private readonly settling = new Map<string, Promise<void>>();

  constructor(
    private readonly deps: ExitDeps,
    private readonly hooks: ExitHooks,
  ) {}

  /** Subscribes to exits and reconciles what happened while berthd was down. */
  async recover(): Promise<void> {
    const { exits, runtime, repo, log, lookup } = this.deps;
    exits.on(
      'exit',
      (e) => void this.onExit(e.id, e.exitCode).catch((err) => log.error({ err, id: e.id }, 'exit handling failed')),
    );
    exits.on('error', (err) => log.error({ err }, 'exit watcher failed'));
    await exits.start();
    // Before the exits below are handled: their tear-down removes runc's records too.
    for (const id of await runtime.recorded()) {
      const c = lookup.byId(id);
      if (c && !isActive(c)) await this.recoverStart(c);
    }
    for (const c of lookup.withStatus([...ACTIVE])) {
      const code = await exits.readExit(c.id);
      if (code !== null) {
        await this.onExit(c.id, code);
        continue;
      }
      const st = await runtime.state(c.id).catch(() => null);
      if (st && (st.status === 'running' || st.status === 'paused')) {
        const status = await this.thawAfterCrash(c, st.status);
        if (status !== c.status) repo.update(c.id, { status });
        await this.deps.endpoints
          .restore(memberOf(c))
          .catch((err) => log.error({ err, id: c.id }, "could not restore a running container's ports and names"));
        continue;
      }
      // Neither running nor an exit recorded (the machine rebooted, conmon was killed).
      await this.onExit(c.id, 255, 'container was not running when berthd started');
    }
    await this.sweepOrphans();
    // Restart policies that were due while berthd was down.
    for (const id of repo.restartable(['exited'], ['always', 'unless-stopped'])) {
      const c = lookup.byId(id);
      // Not one killed since the user started it (dockerd's HasBeenManuallyStopped).
      if (c?.hostConfig.RestartPolicy.Name === 'unless-stopped' && c.manuallyStopped) continue;
      this.scheduleRestart(id, 0);
    }
  }

  /**
   * A container that runc knows while its record says it does not run: a
   * start that a crash of berthd cut short between `runc create` and
   * recording the run (or an exit whose tear-down it cut short). A process
   * that the start had released runs on, as the container's run; one that has
   * ended since is recorded as exited, with its code; one never released is
   * ended, and the start leaves nothing behind.
   */
  private async recoverStart(c: Container): Promise<void> {
    const { runtime, exits, repo, log } = this.deps;
    await runtime.createSettled(c.id);
    let st = await runtime.state(c.id).catch(() => null);
    if (st?.status === 'created' && (await runtime.finishRelease(c.id))) st = { ...st, status: 'running' };
    if (st?.status === 'running' || st?.status === 'paused') {
      const conmonPid = (await runtime.conmonPid(c.bundleDir)) ?? 0;
      repo.update(c.id, runningState(st.status, st.pid, conmonPid));
      log.info({ id: c.id }, 'a start cut short by a crash had started the container: it runs on');
      // Its interfaces were made before its process was let go; its ports and names are held again.
      await this.deps.endpoints
        .restore({ ...memberOf(c), nsPath: `/proc/${st.pid}/ns/net` })
        .catch((err) => log.error({ err, id: c.id }, "could not restore a running container's ports and names"));
      return;
    }
    if (st?.status === 'stopped') {
      const [code, at] = await Promise.all([exits.readExit(c.id), exits.exitedAt(c.id)]);
      if (code !== null && at !== null && at > c.finishedAt) {
        repo.update(c.id, {
          status: 'exited',
          exit_code: code,
          finished_at: at,
          started_at: c.startedAt || at,
          pid: 0,
          error: '',
        });
      }
      await runtime.delete(c.id, true).catch((err: unknown) => log.warn({ err, id: c.id }, 'runc delete'));
      return;
    }
    await runtime.abandon(c.id, c.bundleDir);
    await exits.clear(c.id);
    log.info({ id: c.id }, 'ended a container whose start a crash cut short');
  }

  /** At start: a container left frozen by a commit that a crash cut short runs again. Returns its status. */
  private async thawAfterCrash(c: Container, status: 'running' | 'paused'): Promise<'running' | 'paused'> {
    if (!(await isMarkedFrozen(c))) return status;
    if (status === 'paused') await this.deps.runtime.resume(c.id);
    await unmarkFrozen(c);
    this.deps.log.info({ id: c.id }, 'unpaused a container that a commit cut short by a crash had paused');
    return 'running';
  }

  /** Records the exit of the container's process, and applies its restart policy or AutoRemove. */
  async onExit(id: string, exitCode: number, error = ''): Promise<void> {
    const { deps } = this;
    const { lookup, waits, log } = deps;
    await this.hooks.startOf(id);
    const before = lookup.byId(id);
    if (!before || !isActive(before)) return;
    // Whoever hears of the exit finds the json-file log whole (conmon wrote the last output before the exit file).
    const [, oom] = await Promise.all([
      this.deps.jsonLogs.stopped(id),
      deps.runtime.oomKilled(before.bundleDir).catch(() => false),
    ]);
    // Read again after the waits: a stop or kill that came meanwhile decides the restart too.
    const c = lookup.byId(id);
    if (!c || !isActive(c)) return;
    const decision = restartDecision({
      policy: c.hostConfig.RestartPolicy,
      exitCode,
      restartCount: c.restartCount,
      stoppedByUser: c.stoppedByUser,
      manuallyStopped: c.manuallyStopped,
    });
    deps.repo.update(id, {
      status: decision.restart ? 'restarting' : 'exited',
      exit_code: exitCode,
      finished_at: Date.now(),
      pid: 0,
      oom_killed: oom ? 1 : 0,
      error,
    });
    log.debug({ id, exitCode, restart: decision.restart }, 'container exited');
    this.deps.health.stopped(id);
    this.deps.logRotation.stopped(id);
    this.settle(c);
    publish(deps.events, c, 'die', { exitCode: String(exitCode) });
    deps.volumes.deactivate(id);
    waits.notify(id, ['not-running', 'next-exit'], exitCode);
    if (decision.restart) this.scheduleRestart(id, decision.delayMs);
    else if (c.hostConfig.AutoRemove) await this.hooks.autoRemove(id);
  }

  /**
   * Clears what an exited container's run left with the runtime (runc's state,
   * its cgroups), in the background. The rootfs stays mounted until the
   * container is removed (or started again, which reuses it): unmounting an
   * overlay syncs the whole filesystem under it, and at every exit that forced
   * flush would land on whatever comes next (a commit of what the container
   * wrote, say) instead of the kernel's own pace of writeback.
   */
  private settle(c: Container): void {
    const { id } = c;
    const job = Promise.all([
      this.deps.runtime.delete(id, true).catch((err) => this.deps.log.debug({ err, id }, 'runc delete')),
      this.deps.endpoints.detach({ id, name: c.name }),
    ]).then(() => undefined);
    this.settling.set(id, job);
    void job.finally(() => {
      if (this.settling.get(id) === job) this.settling.delete(id);
    });
  }

  /** Resolves once the tear-down after the container's last exit is done. */
  async settled(id: string): Promise<void> {
    await this.settling.get(id);
  }

  /**
   * Directories of containers that are in no record: removed just before a
   * crash, while their tear-down or deletion was under way (remove() answers
   * first, and deletes in the background).
   */
  private async sweepOrphans(): Promise<void> {
    const { root, runtime, exits, repo, log } = this.deps;
    const names = await readdir(root).catch(() => [] as string[]);
    for (const name of names.filter((n) => n.startsWith(TRASH_PREFIX))) {
      // Renamed by remove(), whose deletion had not ended: maybe not even the unmount.
      const dir = path.join(root, name);
      await releaseMounts(dir)
        .then(() => rm(dir, { recursive: true, force: true }))
        .catch((err: unknown) => log.warn({ err, name }, 'removing a leftover container directory failed'));
    }
    const known = repo.ids();
    for (const id of names) {
      if (!/^[0-9a-f]{64}$/.test(id) || known.has(id)) continue;
      const dir = path.join(root, id);
      await runtime.delete(id, true).catch(() => undefined);
      await releaseMounts(dir).catch(() => undefined);
      await exits.clear(id).catch(() => undefined);
      await rm(dir, { recursive: true, force: true }).catch((err: unknown) =>
        log.warn({ err, id }, 'removing a leftover container directory failed'),
      );
      log.info({ id }, 'removed the leftovers of a container removed before a crash');
    }
  }

  private scheduleRestart(id: string, delayMs: number): void {
    this.cancelRestart(id);
    const t = setTimeout(() => {
      this.restartTimers.delete(id);
      const c = this.deps.lookup.byId(id);
      if (!c || (c.status !== 'restarting' && c.status !== 'exited')) return;
      void this.hooks.startAgain(id, c.restartCount + 1).catch((err) => {
        this.deps.log.warn({ err, id }, 'restart failed');
        this.deps.repo.update(id, { status: 'exited' });
        this.deps.waits.notify(id, ['not-running'], c.exitCode);
      });
    }, delayMs);
    t.unref();
    this.restartTimers.set(id, t);
  }

  /** A restart scheduled by the policy does not happen (stop, remove). */
  cancelRestart(id: string): void {
    clearTimeout(this.restartTimers.get(id));
  }
}
