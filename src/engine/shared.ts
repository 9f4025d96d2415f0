// Work that callers asking for the same thing share while it runs: ten pulls
// of one image download each blob once, and one token serves every layer.
//
// Each caller waits with its own AbortSignal. A caller that gives up stops
// waiting at once; the work itself is aborted only when every caller has given
// up (a client hanging up one pull must not fail another pull of the same
// layer). Work being aborted is not joined: a caller that comes meanwhile
// starts the work afresh once the aborted run has settled, so that two runs
// of one key never overlap.

/** What a run reports as it goes (download progress), to every caller waiting on it. */
export type Report<P> = (progress: P) => void;

interface Run<T, P> {
  promise: Promise<T>;
  controller: AbortController;
  waiters: number;
  listeners: Set<Report<P>>;
}

export interface JoinOptions<P> {
  signal?: AbortSignal | undefined;
  onProgress?: Report<P> | undefined;
}

export class SharedWork<T, P = never> {
  private readonly runs = new Map<string, Run<T, P>>();

  /** Keys with a run under way (aborted ones included until they settle). */
  get size(): number {
    return this.runs.size;
  }

  /**
   * Joins the run for `key`, or starts `work` for it. Resolves or rejects as
   * the run does, or rejects with the caller's abort reason as soon as its
   * signal aborts.
   */
  run(
    key: string,
    work: (signal: AbortSignal, report: Report<P>) => Promise<T>,
    opts: JoinOptions<P> = {},
  ): Promise<T> {
    const { signal, onProgress } = opts;
    if (signal?.aborted) return Promise.reject(signal.reason);
    let run = this.runs.get(key);
    if (!run || run.controller.signal.aborted) run = this.start(key, work, run?.promise);
    run.waiters++;
    if (onProgress) run.listeners.add(onProgress);
    const joined = run;
    return new Promise<T>((resolve, reject) => {
      const leave = () => {
        signal?.removeEventListener('abort', onAbort);
        if (onProgress) joined.listeners.delete(onProgress);
        joined.waiters--;
      };
      const onAbort = () => {
        leave();
        if (joined.waiters === 0) joined.controller.abort(signal!.reason);
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      joined.promise.then(
        (v) => {
          if (signal?.aborted) return; // onAbort answered already
          leave();
          resolve(v);
        },
        (e: unknown) => {
          if (signal?.aborted) return;
          leave();
          reject(e);
        },
      );
    });
  }

  private start(
    key: string,
    work: (signal: AbortSignal, report: Report<P>) => Promise<T>,
    previous: Promise<T> | undefined,
  ): Run<T, P> {
    const controller = new AbortController();
    const listeners = new Set<Report<P>>();
    const report: Report<P> = (p) => {
      for (const l of listeners) l(p);
    };
    // After an aborted run of the same key has settled: its clean-up must not meet ours.
    const begin = previous ? previous.then(noop, noop) : Promise.resolve();
    const run: Run<T, P> = {
      promise: begin.then(() => {
        controller.signal.throwIfAborted();
        return work(controller.signal, report);
      }),
      controller,
      waiters: 0,
      listeners,
    };
    run.promise.catch(noop); // its callers hear the failure; a run nobody waits for any more must not be unhandled
    void run.promise.then(noop, noop).then(() => {
      if (this.runs.get(key) === run) this.runs.delete(key);
    });
    this.runs.set(key, run);
    return run;
  }
}

const noop = () => undefined;
