// The runc that conmon runs for a create or an exec: a sealed in-memory copy
// of the runc binary, reached through /proc/<berthd's pid>/fd/<n>.
//
// runc's init must not run from a file that a process in the container could
// reach through /proc/<pid>/exe and overwrite (CVE-2019-5736). runc 1.1
// therefore makes itself a safe copy (a read-only bind mount, or a sealed
// memfd) and execs it again, on every create and every exec, unless it already
// runs from a memfd sealed against writing, growing and shrinking. Run from
// this copy, it goes straight on: one exec of runc and a mount, remount and
// unmount fewer per container start, with runc's own protection (the seals
// are the ones runc checks for).
import { closeSync, statSync } from 'node:fs';
import type { Logger } from '../../log.js';
import { sealedCopy } from '../os/files.js';

/** How long a replaced copy stays open: a conmon handed its path may not have exec'd it yet. */
const REPLACED_COPY_GRACE_MS = 60_000;

function statOrNull(file: string) {
  try {
    return statSync(file);
  } catch {
    return null;
  }
}

export class SealedExecutable {
  /** The copy of the file as it was (`key`); fd -1 when it could not be made. */
  private copy: { key: string; fd: number } | undefined;

  constructor(
    private readonly file: string,
    private readonly log: Logger,
  ) {}

  /** A path that executes the file from the sealed copy; the file itself when no copy can be made. */
  async path(): Promise<string> {
    // Asked at every create and exec (health checks: one a second per container): a stat of a
    // local binary's cached inode costs less on the loop than a trip through the thread pool.
    const st = statOrNull(this.file);
    if (!st) return this.file; // the spawn reports the missing binary
    // A new runc (an upgrade) is copied again, so it takes effect at the next start as it would without a copy.
    const key = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
    if (this.copy?.key !== key) {
      const replaced = this.copy;
      try {
        this.copy = { key, fd: sealedCopy(this.file) };
      } catch (e) {
        this.log.warn(
          { err: e, file: this.file },
          'cannot make a sealed copy of runc: runc will copy itself at each start',
        );
        this.copy = { key, fd: -1 };
      }
      if (replaced && replaced.fd >= 0) setTimeout(() => this.close(replaced.fd), REPLACED_COPY_GRACE_MS).unref();
    }
    return this.copy.fd >= 0 ? `/proc/${process.pid}/fd/${this.copy.fd}` : this.file;
  }

  private close(fd: number): void {
    try {
      closeSync(fd);
    } catch (e) {
      this.log.warn({ err: e, fd }, 'closing a replaced copy of runc');
    }
  }
}
