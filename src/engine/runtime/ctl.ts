// conmon's ctl FIFO, one per container (its bundle directory) and per exec
// (its directory): terminal resizes and the log's reopening. conmon acts on
// only the first line of what it reads at once, so messages to one FIFO go
// one after another, spaced apart.
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import path from 'node:path';
import { conflict, invalidParameter, isEngineError, systemError } from '../../errors.js';
import { BUNDLE_FILES, CTL_REOPEN_LOG, CTL_RESIZE } from './conmon.js';

/** Gap between two messages on one conmon's ctl FIFO (see sendCtl()). */
const CTL_SPACING_MS = 50;

/** A terminal's pending resizes: the size to end on, and the callers waiting for a write. */
interface ResizeQueue {
  latest: { height: number; width: number };
  waiting: { resolve: () => void; reject: (e: unknown) => void }[];
}

/** The ctl FIFOs of a daemon's containers and execs. */
export class ConmonCtl {
  /** Resizes being written per terminal (bundle or exec dir). */
  private readonly resizes = new Map<string, ResizeQueue>();
  /** The last message under way per ctl FIFO (bundle or exec dir), the next one goes after it. */
  private readonly ctlLanes = new Map<string, Promise<void>>();

  /**
   * Sets the terminal size of a container (its bundle directory) or an exec
   * (its directory) through conmon's ctl FIFO. Refused when no conmon reads it.
   */
  async resize(dir: string, height: number, width: number): Promise<void> {
    if (
      !Number.isInteger(height) ||
      !Number.isInteger(width) ||
      height < 0 ||
      width < 0 ||
      height > 65535 ||
      width > 65535
    ) {
      throw invalidParameter(`invalid terminal size ${height}x${width}`);
    }
    // A burst of resizes (a window being dragged) is written one at a time
    // (sendCtl()), the latest size always the one written last. A caller is
    // answered as soon as a message with its size (or a later one) is written:
    // the docker CLI watches for window changes only once its first resize is
    // answered.
    const size = { height, width };
    const running = this.resizes.get(dir);
    const q = running ?? { latest: size, waiting: [] };
    q.latest = size;
    const answered = new Promise<void>((resolve, reject) => q.waiting.push({ resolve, reject }));
    if (!running) {
      this.resizes.set(dir, q);
      void this.writeResizes(dir, q);
    }
    return answered;
  }

  private async writeResizes(dir: string, q: ResizeQueue): Promise<void> {
    try {
      let written: ResizeQueue['latest'] | undefined;
      while (q.latest !== written) {
        written = q.latest;
        const answered = q.waiting.splice(0);
        await this.sendCtl(dir, `${CTL_RESIZE} ${written.height} ${written.width}\n`).then(
          () => {
            for (const w of answered) w.resolve();
          },
          (e: unknown) => {
            for (const w of answered) w.reject(e);
          },
        );
      }
    } finally {
      this.resizes.delete(dir);
    }
  }

  /**
   * Asks the container's conmon to reopen its log (conmon.ts CTL_REOPEN_LOG).
   * False when no conmon reads its ctl FIFO (the container has exited).
   */
  async reopenLog(bundleDir: string): Promise<boolean> {
    return this.sendCtl(bundleDir, `${CTL_REOPEN_LOG} 0 0\n`).then(
      () => true,
      (e: unknown) => {
        if (isEngineError(e, 'conflict')) return false;
        throw e;
      },
    );
  }

  /**
   * One message on conmon's ctl FIFO, after the messages before it. conmon
   * acts on only the first line of what it reads at once, so messages are
   * spaced apart: two in one read would lose the second.
   */
  private sendCtl(dir: string, message: string): Promise<void> {
    const written = (this.ctlLanes.get(dir) ?? Promise.resolve()).then(() => this.writeCtl(dir, message));
    const lane = written.then(
      () => new Promise<void>((r) => setTimeout(r, CTL_SPACING_MS)),
      () => undefined,
    );
    this.ctlLanes.set(dir, lane);
    void lane.then(() => {
      if (this.ctlLanes.get(dir) === lane) this.ctlLanes.delete(dir);
    });
    return written;
  }

  private async writeCtl(dir: string, message: string): Promise<void> {
    // Non-blocking: with no reader (conmon gone) the open fails with ENXIO instead of waiting.
    const fh = await open(path.join(dir, BUNDLE_FILES.ctl), constants.O_WRONLY | constants.O_NONBLOCK).catch(
      (e: NodeJS.ErrnoException) => {
        if (e.code === 'ENXIO' || e.code === 'ENOENT') return null;
        throw systemError(`cannot reach the container's monitor: ${e.message}`, e);
      },
    );
    const gone = () => conflict('cannot resize: the process is not running');
    if (!fh) throw gone();
    try {
      await fh.write(message).catch((e: NodeJS.ErrnoException) => {
        throw e.code === 'EPIPE' ? gone() : e; // conmon exited since the open
      });
    } finally {
      await fh.close();
    }
  }
}
