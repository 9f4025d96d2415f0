// A small bounded set of background tasks keyed by the path they create.
//
// Creating an inode is the slow part of extracting many small files (here
// ~0.8 ms of kernel time each, against microseconds for the rest), so
// apply.ts lets several small-file creations run at once while it parses on.
// The bounds keep memory in check: at most `maxTasks` tasks and `maxBytes` of
// buffered file bodies are in flight.

export class TaskPool {
  private readonly running = new Map<string, Promise<void>>();
  private bytes = 0;
  private failure: { error: unknown } | null = null;

  constructor(
    private readonly maxTasks: number,
    private readonly maxBytes: number,
  ) {}

  /** Whether a task for `key` is still in flight. */
  has(key: string): boolean {
    return this.running.has(key);
  }

  /** Waits until a task holding `bytes` of memory may start. */
  async admit(bytes: number): Promise<void> {
    while (this.running.size >= this.maxTasks || (this.running.size > 0 && this.bytes + bytes > this.maxBytes)) {
      await Promise.race(this.running.values());
    }
    this.check();
  }

  /** Starts `task` in the background; its failure is reported by check() or drain(). */
  run(key: string, bytes: number, task: () => Promise<void>): void {
    this.bytes += bytes;
    const p = task()
      .catch((error: unknown) => {
        this.failure ??= { error };
      })
      .finally(() => {
        this.running.delete(key);
        this.bytes -= bytes;
      });
    this.running.set(key, p);
  }

  /** Throws the first background failure, if any. */
  check(): void {
    if (this.failure) throw this.failure.error;
  }

  /** Waits for every task; throws the first failure. */
  async drain(): Promise<void> {
    while (this.running.size > 0) await Promise.all(this.running.values());
    this.check();
  }
}
