// A tiny counting semaphore: at most `max` jobs at once, the others in order.
// A job still waiting for its turn leaves the queue when its signal aborts.

export class Limiter {
  private active = 0;
  private readonly queue: (() => void)[] = [];
  constructor(private readonly max: number) {}

  async run<T>(fn: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    if (this.active >= this.max) await this.turn(signal);
    this.active++;
    try {
      return await fn();
    } finally {
      this.active--;
      this.queue.shift()?.();
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
