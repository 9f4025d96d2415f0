// Waits for a container's exit or removal (`POST /containers/{id}/wait`, log
// followers, stop and remove themselves), answered when the exit is recorded.
import { invalidParameter } from '../../errors.js';

export type WaitCondition = 'not-running' | 'next-exit' | 'removed';
export interface WaitResult {
  StatusCode: number;
  Error: { Message: string } | null;
}

const CONDITIONS: readonly string[] = ['not-running', 'next-exit', 'removed'];
const isCondition = (s: string): s is WaitCondition => CONDITIONS.includes(s);

/** A condition as a client names it; others are refused with dockerd's wording. */
export function waitCondition(s: string): WaitCondition {
  if (!isCondition(s)) throw invalidParameter(`invalid condition: "${s}"`);
  return s;
}

interface Waiter {
  condition: WaitCondition;
  resolve: (r: WaitResult) => void;
}

export class Waits {
  private readonly waiters = new Map<string, Waiter[]>();

  /** Waits not yet answered (counted in /info as dockerd counts its goroutines). */
  get pending(): number {
    let n = 0;
    for (const list of this.waiters.values()) n += list.length;
    return n;
  }

  /**
   * Resolves when notify() names the condition for the container. When
   * `signal` aborts (the client went away), the wait is forgotten and the
   * promise rejects.
   */
  add(id: string, condition: WaitCondition, signal?: AbortSignal): Promise<WaitResult> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const waiter: Waiter = {
        condition,
        resolve: (r) => {
          signal?.removeEventListener('abort', forget);
          resolve(r);
        },
      };
      const forget = () => {
        const list = this.waiters.get(id);
        const i = list?.indexOf(waiter) ?? -1;
        if (i >= 0) list!.splice(i, 1);
        if (list && !list.length) this.waiters.delete(id);
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', forget, { once: true });
      const list = this.waiters.get(id) ?? [];
      list.push(waiter);
      this.waiters.set(id, list);
    });
  }

  /** Answers the container's waits for any of `conditions`. */
  notify(id: string, conditions: WaitCondition[], code: number, error = ''): void {
    const list = this.waiters.get(id);
    if (!list) return;
    const keep = list.filter((w) => {
      if (!conditions.includes(w.condition)) return true;
      w.resolve({ StatusCode: code, Error: error ? { Message: error } : null });
      return false;
    });
    if (keep.length) this.waiters.set(id, keep);
    else this.waiters.delete(id);
  }
}
