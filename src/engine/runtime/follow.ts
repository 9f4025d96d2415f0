// What a follow of a log waits on: a change in the log's directory, or its end
// (the caller hanging up, or the `until` it asked for passing).
import { watch, type FSWatcher } from 'node:fs';

/** Wakes a waiter when a file in dir changes (inotify via fs.watch; no polling). */
export class DirNotifier {
  private dirty = true;
  private wake: (() => void) | undefined;
  private readonly watcher: FSWatcher;

  constructor(dir: string, names: string[]) {
    this.watcher = watch(dir, (_event, name) => {
      if (!name || names.includes(name)) this.poke();
    });
    this.watcher.on('error', () => this.poke());
  }

  /** Resolves at once if something changed since the last call, else on the next change or abort. */
  async wait(signal: AbortSignal): Promise<void> {
    if (!this.dirty && !signal.aborted) {
      await new Promise<void>((resolve) => {
        const onAbort = () => resolve();
        this.wake = () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        };
        signal.addEventListener('abort', onAbort, { once: true });
      });
    }
    this.wake = undefined;
    this.dirty = false;
  }

  close(): void {
    this.watcher.close();
  }

  private poke(): void {
    this.dirty = true;
    this.wake?.();
  }
}

/** Aborts when the caller's signal does, or once `until` (if any) is past. */
export function stopSignal(
  signal: AbortSignal | undefined,
  until: bigint | undefined,
): { signal: AbortSignal; dispose: () => void } {
  const ctl = new AbortController();
  const abort = () => ctl.abort();
  signal?.addEventListener('abort', abort, { once: true });
  if (signal?.aborted) ctl.abort();
  let timer: NodeJS.Timeout | undefined;
  if (until !== undefined) {
    const ms = Number(until / 1_000_000n) - Date.now();
    timer = setTimeout(abort, Math.max(0, Math.min(ms, 2 ** 31 - 1)));
  }
  return {
    signal: ctl.signal,
    dispose: () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', abort);
    },
  };
}
