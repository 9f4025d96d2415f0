// V8's garbage collections on demand, in whichever isolate calls (the loop's
// or an extraction thread's). Memory that only a collection frees piles up
// where JavaScript allocates little but hands large buffers on: a pull's
// socket reads and shared blocks, an extraction thread's gunzip output. Their
// wrappers are a few bytes each, so the young generation, which they hardly
// fill, is rarely scavenged, and the buffers behind them (C memory) stay
// allocated until the next mark-compact, which V8 starts only after tens of
// MiB of them: docs/decisions/performance.md ("Memory after work").
import { PerformanceObserver } from 'node:perf_hooks';
import v8 from 'node:v8';
import vm from 'node:vm';

type GcFunction = (options?: { type?: string; execution?: string; flavor?: string }) => void;
let gc: GcFunction | undefined;

/**
 * The `gc` function of this isolate; it exists only with --expose-gc, which set at run time
 * gives it to contexts made afterwards. V8's flags are the process's, and their hash guards
 * every code cache (Node's own for its built-in modules, which compile afresh ~2x slower under
 * changed flags, and berthd's bundle's): the flag is on only while the context is made. Another
 * thread may turn it off in between, so that is tried again.
 */
function gcFunction(): GcFunction {
  for (let attempt = 0; !gc; attempt++) {
    if (attempt === 3) throw new Error('V8 gave no gc function with --expose-gc');
    v8.setFlagsFromString('--expose-gc');
    try {
      gc = vm.runInNewContext('typeof gc === "function" ? gc : undefined') as GcFunction | undefined;
    } finally {
      v8.setFlagsFromString('--no-expose-gc');
    }
  }
  return gc;
}

/** A scavenge: frees the young objects no longer used and the buffers only they held (a millisecond or so). */
export function collectYoungGarbage(): void {
  gcFunction()({ type: 'minor', execution: 'sync' });
}

/** V8's collection that frees all it can and shrinks the heap's spaces (what it runs before giving up on an allocation). */
export function collectAllGarbage(): void {
  gcFunction()({ type: 'major', execution: 'sync', flavor: 'last-resort' });
}

/**
 * Counts bytes handed on and scavenges each time `every` more have gone by:
 * the buffers that went before are then freed while the work goes on.
 */
export function scavengeEvery(every: number): (bytes: number) => void {
  let since = 0;
  return (bytes) => {
    since += bytes;
    if (since < every) return;
    since = 0;
    collectYoungGarbage();
  };
}

/** Where bin/berthd.cjs finds how to run something under the V8 flags berthd started with. */
const UNDER_START_FLAGS = Symbol.for('berth.underStartFlags');

/**
 * Keeps V8's young generation (both semi-spaces) at most `max` bytes. V8 sizes
 * its bound when the isolate starts (--max-semi-space-size, which only node's
 * command line can set, before the launcher runs) and doubles the young
 * generation while much of it survives, up to 64 MiB: a list of a thousand
 * containers does that, and the pages stay resident until a memory-reducing
 * collection. The growth factor, which V8 reads at each growth, is set to 1
 * after a collection that left the young generation where one more doubling
 * would pass `max`, and back to V8's 2 once it is smaller again (a shrinking
 * collection). Returns a function that stops watching and lets it grow again.
 */
export function capYoungGeneration(max: number): () => void {
  let factor = 2;
  // V8 takes a code cache only under the flags it was made with: bin/berthd.cjs makes
  // berthd's through this, under a fresh process's growth factor.
  (globalThis as Record<symbol, unknown>)[UNDER_START_FLAGS] = <T>(make: () => T): T => {
    if (factor === 2) return make();
    v8.setFlagsFromString('--semi-space-growth-factor=2');
    try {
      return make();
    } finally {
      v8.setFlagsFromString(`--semi-space-growth-factor=${factor}`);
    }
  };
  const observer = new PerformanceObserver(() => {
    const young = v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space')?.space_size ?? 0;
    const next = young * 2 > max ? 1 : 2;
    if (next === factor) return;
    factor = next;
    v8.setFlagsFromString(`--semi-space-growth-factor=${next}`);
  });
  observer.observe({ entryTypes: ['gc'] });
  return () => {
    delete (globalThis as Record<symbol, unknown>)[UNDER_START_FLAGS];
    observer.disconnect();
    if (factor !== 2) v8.setFlagsFromString('--semi-space-growth-factor=2');
  };
}
