// SharedWork (one run per key for every caller, each with its own signal)
// and the Limiter's queue leaving on abort: what lets ten pulls share one
// download, and one pull's client hang up without failing the others.
import { describe, expect, it } from 'vitest';
import { Limiter } from '../../src/engine/limiter.js';
import { SharedWork } from '../../src/engine/shared.js';

/** A promise and its resolve/reject, for work a test finishes by hand. */
function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

const settled = <T>(p: Promise<T>) =>
  p.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );

describe('SharedWork', () => {
  it('runs the work once for callers of one key, and reports its progress to each', async () => {
    const work = new SharedWork<string, number>();
    const gate = deferred<string>();
    let runs = 0;
    const seen: number[][] = [[], []];
    const job = async (_s: AbortSignal, report: (p: number) => void) => {
      runs++;
      report(1);
      return gate.promise;
    };
    const a = work.run('k', job, { onProgress: (p) => seen[0]!.push(p) });
    const b = work.run('k', job, { onProgress: (p) => seen[1]!.push(p) });
    await Promise.resolve();
    gate.resolve('done');
    expect(await Promise.all([a, b])).toEqual(['done', 'done']);
    expect(runs).toBe(1);
    expect(seen[0]).toEqual([1]);
    expect(work.size).toBe(0);
  });

  it('shares a failure too', async () => {
    const work = new SharedWork<string>();
    const boom = new Error('registry said no');
    const job = () => Promise.reject(boom);
    const [a, b] = await Promise.all([settled(work.run('k', job)), settled(work.run('k', job))]);
    expect(a).toEqual({ error: boom });
    expect(b).toEqual({ error: boom });
  });

  it('lets a caller give up at once, and aborts the work only when the last one does', async () => {
    const work = new SharedWork<string>();
    let aborted: unknown;
    const job = (signal: AbortSignal) =>
      new Promise<string>((_resolve, reject) => {
        signal.addEventListener('abort', () => {
          aborted = signal.reason;
          reject(signal.reason);
        });
      });
    const one = new AbortController();
    const two = new AbortController();
    const a = settled(work.run('k', job, { signal: one.signal }));
    const b = settled(work.run('k', job, { signal: two.signal }));
    await Promise.resolve();
    one.abort(new Error('client one hung up'));
    expect(await a).toEqual({ error: new Error('client one hung up') });
    expect(aborted).toBeUndefined(); // the other still waits
    two.abort(new Error('client two hung up'));
    expect(await b).toEqual({ error: new Error('client two hung up') });
    expect(aborted).toEqual(new Error('client two hung up'));
  });

  it('starts afresh, after the aborted run has settled, for a caller that comes while it is aborting', async () => {
    const work = new SharedWork<number>();
    const cleanup = deferred<void>();
    const order: string[] = [];
    let n = 0;
    const job = async (signal: AbortSignal) => {
      const run = ++n;
      order.push(`start ${run}`);
      if (run === 1) {
        await new Promise((resolve) => signal.addEventListener('abort', resolve));
        await cleanup.promise;
        order.push('end 1');
        throw signal.reason;
      }
      return run;
    };
    const gone = new AbortController();
    const first = settled(work.run('k', job, { signal: gone.signal }));
    await Promise.resolve();
    gone.abort(new Error('gone'));
    await first;
    const second = work.run('k', job);
    await new Promise((r) => setTimeout(r, 10));
    expect(order).toEqual(['start 1']); // not overlapping the aborted run's clean-up
    cleanup.resolve();
    expect(await second).toBe(2);
    expect(order).toEqual(['start 1', 'end 1', 'start 2']);
  });

  it('refuses a caller whose signal has already aborted', async () => {
    const work = new SharedWork<number>();
    const signal = AbortSignal.abort(new Error('too late'));
    await expect(work.run('k', async () => 1, { signal })).rejects.toThrow('too late');
    expect(work.size).toBe(0);
  });
});

describe('Limiter', () => {
  it('lets a queued job leave when its signal aborts, and the next one take the turn', async () => {
    const limiter = new Limiter(1);
    const gate = deferred<void>();
    const started: string[] = [];
    const job = (name: string) => async () => {
      started.push(name);
      if (name === 'a') await gate.promise;
    };
    const leaving = new AbortController();
    const a = limiter.run(job('a'));
    const b = settled(limiter.run(job('b'), leaving.signal));
    const c = limiter.run(job('c'));
    leaving.abort(new Error('gone'));
    expect(await b).toEqual({ error: new Error('gone') });
    gate.resolve();
    await Promise.all([a, c]);
    expect(started).toEqual(['a', 'c']);
  });
});
