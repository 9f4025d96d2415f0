// The counting semaphore behind max-concurrent-downloads (and a few other limits).
import { describe, expect, it } from 'vitest';
import { Limiter } from '../../src/engine/limiter.js';

/** A promise and its resolve. */
function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const turn = () => new Promise((r) => setImmediate(r));

describe('Limiter', () => {
  it('runs at most max jobs at once, the others in order', async () => {
    const limiter = new Limiter(2);
    const gates = [deferred(), deferred(), deferred()];
    const started: number[] = [];
    const runs = gates.map((g, i) =>
      limiter.run(async () => {
        started.push(i);
        await g.promise;
        return i;
      }),
    );
    await turn();
    expect(started).toEqual([0, 1]);
    gates[1]!.resolve();
    await turn();
    expect(started).toEqual([0, 1, 2]);
    gates[0]!.resolve();
    gates[2]!.resolve();
    expect(await Promise.all(runs)).toEqual([0, 1, 2]);
  });

  it('gives the turn to the next job when a job leaves early, once however often it leaves', async () => {
    const limiter = new Limiter(1);
    const rest = deferred();
    const started: string[] = [];
    const first = limiter.run(async (leave) => {
      started.push('first');
      leave();
      leave();
      await rest.promise; // work that no longer counts
      return 'first';
    });
    const second = limiter.run(async () => {
      started.push('second');
      return 'second';
    });
    const third = limiter.run(async () => {
      started.push('third');
      return 'third';
    });
    expect(await second).toBe('second');
    expect(await third).toBe('third');
    expect(started).toEqual(['first', 'second', 'third']);
    rest.resolve();
    expect(await first).toBe('first');
  });

  it('a job waiting for its turn leaves the queue when its signal aborts', async () => {
    const limiter = new Limiter(1);
    const gate = deferred();
    const running = limiter.run(() => gate.promise);
    const ac = new AbortController();
    const waiting = limiter.run(async () => 'ran', ac.signal);
    ac.abort(new Error('gone'));
    await expect(waiting).rejects.toThrow('gone');
    gate.resolve();
    await running;
    expect(await limiter.run(async () => 'next')).toBe('next');
  });
});
