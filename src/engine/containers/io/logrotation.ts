// Rotation of the logs of running containers that keep more than one file
// (json-file with max-size and max-file ≥ 2; local). conmon 2.1.6 has no
// rotation that keeps the old file (its --log-size-max throws it away), so
// berth rotates: it renames the files one up, the live one to <log>.1, and
// asks conmon to reopen (logfiles.ts says why nothing is lost).
//
// When: one timer for all watched containers, once a second, one stat of each
// live log; no inotify (a chatty container would wake berthd at every line).
// 100 containers cost 100 stats a second. A log may pass max-size by what is
// written in a second before it is rotated. The watch is kept in memory: a
// start or berthd's own start (recover) arms it, an exit or removal ends it.
// While berthd is down nothing rotates, and the live log grows (conmon's cap
// cannot stand in: see conmon.ts logSizeMax); the first check after berthd's
// start rotates it, whatever its size.
import { stat } from 'node:fs/promises';
import type { Logger } from '../../../log.js';
import { compressRotated, forgetLog, lockLog, shiftLogs } from '../../runtime/logfiles.js';
import { type LogPolicy, logPolicy, rotatedByBerth } from '../create/logconfig.js';
import type { ContainerLookup } from '../lookup.js';

const CHECK_INTERVAL_MS = 1000;
/** conmon reopens within milliseconds; a log still missing after this was never reopened (message lost, crash). */
const REOPEN_RETRY_MS = 5000;

interface Watched {
  id: string;
  log: string;
  bundleDir: string;
  maxSize: number;
  maxFiles: number;
  compress: boolean;
  /** Rotated files may be plain still (a rotation since the last check, or a berthd crash). */
  uncompressed: boolean;
  /** When conmon was last asked to reopen, while the live log is renamed away. */
  reopenAskedAt?: number;
}

export interface LogRotationDeps {
  lookup: ContainerLookup;
  /** Asks the container's conmon to reopen its log (runtime.ts); false when no conmon runs. */
  reopenLog(bundleDir: string): Promise<boolean>;
  log: Logger;
}

export class LogRotation {
  private readonly watched = new Map<string, Watched>();
  /** The job on a container's files under way (a check, a last compression): one at a time per container. */
  private readonly jobs = new Map<string, Promise<void>>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly deps: LogRotationDeps) {}

  /** The container runs (started, or found running at berthd's start): its log is watched if it rotates. */
  started(id: string): void {
    const c = this.deps.lookup.byId(id);
    if (!c) return;
    let p: LogPolicy;
    try {
      p = logPolicy(c.hostConfig.LogConfig);
    } catch {
      return; // a LogConfig an older berth took: its start said why (lifecycle.ts reads the same)
    }
    if (!rotatedByBerth(p)) return;
    this.watched.set(id, {
      id,
      log: c.logPath,
      bundleDir: c.bundleDir,
      maxSize: p.maxSize,
      maxFiles: p.maxFiles,
      compress: p.compress,
      uncompressed: p.compress,
    });
    this.timer ??= setInterval(() => this.checkAll(), CHECK_INTERVAL_MS).unref();
  }

  /**
   * The container's process has ended (or it is removed): conmon writes no
   * more, and the file rotated last is compressed now (as dockerd's, which
   * compresses right after a rotation).
   */
  stopped(id: string): void {
    const w = this.unwatch(id);
    if (w?.compress) this.run(w, () => compressRotated(w.log));
  }

  /** The container is removed, its files with it. */
  removed(id: string, log: string): void {
    this.unwatch(id);
    forgetLog(log);
  }

  close(): void {
    this.watched.clear();
    this.stopTimer();
  }

  private unwatch(id: string): Watched | undefined {
    const w = this.watched.get(id);
    this.watched.delete(id);
    if (this.watched.size === 0) this.stopTimer();
    return w;
  }

  private stopTimer(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private checkAll(): void {
    for (const w of this.watched.values()) if (!this.jobs.has(w.id)) this.run(w, () => this.check(w));
  }

  private run(w: Watched, job: () => Promise<void>): void {
    const done = (this.jobs.get(w.id) ?? Promise.resolve()).then(job).catch((err: unknown) => {
      // The container's directory is gone: it was removed.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
        this.deps.log.warn({ err, id: w.id }, 'log rotation failed');
    });
    this.jobs.set(w.id, done);
    void done.then(() => {
      if (this.jobs.get(w.id) === done) this.jobs.delete(w.id);
    });
  }

  private async check(w: Watched): Promise<void> {
    const st = await stat(w.log).catch(() => null);
    if (!st) {
      // Renamed away by a rotation, and not reopened yet: conmon was asked, or a
      // crash of berthd came in between, or the message was lost.
      if (w.reopenAskedAt === undefined || Date.now() - w.reopenAskedAt >= REOPEN_RETRY_MS) await this.reopen(w);
      return;
    }
    w.reopenAskedAt = undefined;
    // The live log is there: conmon writes into none of the rotated files any more.
    if (w.uncompressed) {
      await compressRotated(w.log);
      w.uncompressed = false;
    }
    if (st.size > 0 && st.size >= w.maxSize) {
      await lockLog(w.log, () => shiftLogs(w.log, w.maxFiles));
      w.uncompressed = w.compress;
      await this.reopen(w);
    }
  }

  private async reopen(w: Watched): Promise<void> {
    w.reopenAskedAt = Date.now();
    await this.deps.reopenLog(w.bundleDir);
  }
}
