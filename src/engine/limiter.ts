// A tiny counting semaphore: at most `max` jobs at once, the others in order.
// A job still waiting for its turn leaves the queue when its signal aborts.

export class Limiter {
  private active = 0;
  private readonly queue: (() => void)[] = [];
  constructor(private readonly max: number) {}

  /**
   * Runs `fn` in its turn. The turn ends when `fn` settles, or earlier when it
   * calls the `leave` it is given (its remaining work no longer counts).
   */
  async run<T>(fn: (leave: () => void) => Promise<T>, signal?: AbortSignal): Promise<T> {
    if (this.active >= this.max) await this.turn(signal);
    this.active++;
    let left = false;
    const leave = () => {
      if (left) return;
      left = true;
      this.active--;
      this.queue.shift()?.();
    };
    try {
      return await fn(leave);
    } finally {
      leave();
    }
  }

  private turn(signal: AbortSignal | undefined): Promise<void> {
    signal?.throwIfAborted();
    return new Promise<void>((resolve, reject) => {
      const go = () => {
        signal?.removeEventListener('abort', leave);
        resolve();
      };
      const leave = () => {
        const i = this.queue.indexOf(go);
        if (i !== -1) this.queue.splice(i, 1);
        reject(signal!.reason);
      };
      this.queue.push(go);
      signal?.addEventListener('abort', leave, { once: true });
    });
  }
}
