// The stages of a build as a graph: each starts once the stages it needs have
// built, at most `max` at once (a stage waits for its deps before it takes a
// place, so a waiting stage never holds one), its own steps in order. The first
// stage to fail stops the others (their signal aborts) and its error is the
// build's; the others' ends (their aborted steps' errors) are awaited, not
// reported.
import { availableParallelism } from 'node:os';
import { Limiter } from '../limiter.js';

/**
 * Stages one build runs at once: the cores' count, and never fewer than two, so
 * that stages waiting on each other (a cache mount shared between them) meet
 * even on one core.
 */
export const STAGES_AT_ONCE = Math.max(2, availableParallelism());

export interface ScheduleOptions {
  /** The stages to build, in Dockerfile order. */
  order: readonly number[];
  /** Each stage's direct dependencies (indices), all in `order`. */
  deps: readonly (readonly number[])[];
  max: number;
  signal: AbortSignal;
  /** Told of the stage that failed first, before the others are stopped. */
  failed(i: number, e: unknown): void;
}

/** Builds every stage with `build`; resolves to each stage's result. */
export async function scheduleStages<T>(
  o: ScheduleOptions,
  build: (i: number, signal: AbortSignal) => Promise<T>,
): Promise<Map<number, T>> {
  const stop = new AbortController();
  const signal = AbortSignal.any([o.signal, stop.signal]);
  const limiter = new Limiter(o.max);
  const results = new Map<number, Promise<T>>();
  let first: { error: unknown } | undefined;
  for (const i of o.order) {
    const needs = o.deps[i]!.map((d) => results.get(d)!);
    const job = (async () => {
      await Promise.all(needs);
      signal.throwIfAborted();
      return limiter.run(() => build(i, signal), signal);
    })();
    job.catch((e: unknown) => {
      if (first) return;
      first = { error: e };
      o.failed(i, e);
      stop.abort(e);
    });
    results.set(i, job);
  }
  await Promise.allSettled(results.values());
  if (first) throw first.error;
  const out = new Map<number, T>();
  for (const [i, p] of results) out.set(i, await p);
  return out;
}
