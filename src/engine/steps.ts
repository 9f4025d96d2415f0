// The time each step of an operation took, for its debug log line (a start's
// steps: bench/runpath.mjs reads them to tell berthd's share from runc's).
import { performance } from 'node:perf_hooks';

export class Steps {
  private last = performance.now();
  /** Milliseconds by step, in the order they were marked. */
  readonly ms: Record<string, number> = {};

  /** The step `name` ends now (it began when the one before it ended). */
  mark(name: string): void {
    const t = performance.now();
    this.ms[name] = Math.round((t - this.last) * 10) / 10;
    this.last = t;
  }
}
