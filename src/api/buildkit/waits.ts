// Things registered by a client-made id (a session's UUID, a job's Ref) that other
// calls may ask for before they exist: BuildKit's clients send Status before
// Solve, Solve before the session connects, LLBBridge calls before the job is
// registered (docs/buildkit/protocol.md §3.1).

/** Values by id, with waiting (bounded) for one not there yet. */
export class Registry<T> {
  private readonly byId = new Map<string, T>();
  private readonly waiting = new Map<string, Set<(v: T) => void>>();

  has(id: string): boolean {
    return this.byId.has(id);
  }

  get(id: string): T | undefined {
    return this.byId.get(id);
  }

  /** Registers a value and hands it to those waiting for it. */
  set(id: string, value: T): void {
    this.byId.set(id, value);
    const waiters = this.waiting.get(id);
    this.waiting.delete(id);
    for (const w of waiters ?? []) w(value);
  }

  /** Forgets the value, if it is still this one. */
  delete(id: string, value: T): void {
    if (this.byId.get(id) === value) this.byId.delete(id);
  }

  /** The value of that id, waiting up to `ms` for it (then `timeout()` is thrown), or until `signal` aborts. */
  waitFor(id: string, signal: AbortSignal, ms: number, timeout: () => Error): Promise<T> {
    const have = this.byId.get(id);
    if (have !== undefined) return Promise.resolve(have);
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      const set = this.waiting.get(id) ?? new Set();
      this.waiting.set(id, set);
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        set.delete(got);
        if (!set.size && this.waiting.get(id) === set) this.waiting.delete(id);
      };
      const got = (v: T) => {
        done();
        resolve(v);
      };
      const onAbort = () => {
        done();
        reject(signal.reason);
      };
      const timer = setTimeout(() => {
        done();
        reject(timeout());
      }, ms);
      set.add(got);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}
