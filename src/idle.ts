// Giving memory back once the daemon has gone quiet. After a burst of work
// (pulls, commits, lists of many containers) berthd keeps what it grew to:
// V8 keeps its heap and young generation at their high-water mark until it
// needs them again, glibc keeps freed blocks in its arenas (one per thread
// that allocated), SQLite keeps its page cache, and the pages of the node
// binary's code that the burst ran stay mapped (counted in the resident size
// and PSS in full when no other process maps them). None of it is used by an
// idle daemon, and it is most of the memory of one. So, some time after the
// last request began or ended, berthd runs one compacting collection that also
// shrinks the young generation, asks SQLite to free its cache, returns the C
// heap's free pages to the kernel and unmaps the unchanged pages of files it
// mapped (they stay in the page cache: the next request maps those it runs
// again, with minor faults). It happens once per quiet spell; the next request
// re-arms it. Nothing is stopped or closed: the next request finds everything
// as before and only allocates again.
// While busy, two bounds keep the high-water mark itself down (what a daemon
// holds right after a burst, before this trim): the young generation stays at
// the size start-up gave it, and large C blocks go back to the kernel when
// freed instead of staying in an arena. (The extraction threads and the loop
// also scavenge as a pull's bytes go by: engine/layers/extractor.ts.) And the
// free pages in the middle of the arenas, which glibc returns only when asked
// (a pull's 64 KiB socket reads, freed by a collection, leave tens of MiB of
// them between blocks still in use), go back while busy too: after a
// collection, at most once a second, on a thread of the addon's.
import { PerformanceObserver } from 'node:perf_hooks';
import { capYoungGeneration, collectAllGarbage } from './engine/os/gc.js';
import { boundCHeap, releaseFileMappedPages, releaseFreeCHeap } from './engine/os/memory.js';
import type { Logger } from './log.js';

/** How long after the last request began or ended berthd counts as quiet (longer than an extraction thread idles). */
export const QUIET_MS = 20_000;
/** The young generation's bound while busy (engine/os/gc.ts capYoungGeneration): what a fresh daemon's start-up grows it to. */
const YOUNG_MAX = 16 << 20;
/**
 * C blocks this large or larger are mapped on their own (engine/os/memory.ts
 * boundCHeap): a pull's 1 MiB blocks and gunzip output (glibc counts its few
 * bytes of header, so a block of exactly 1 MiB is above it). Smaller ones, the
 * 64 KiB socket reads of every request and a commit's or an extraction's
 * 256-512 KiB pieces, come from the arenas and are reused there, without a
 * system call and fresh pages each time.
 */
const MMAP_MIN = 1 << 20;
/** An arena's free top beyond this goes back to the kernel. */
const TRIM_MIN = 2 << 20;
/** From the collection to the C heap's trim: ArrayBuffers' memory is freed by a sweeper that runs after it. */
const SWEEP_MS = 1000;
/** While busy, the C heap is trimmed after a collection at most this often. */
const BUSY_TRIM_MS = 1000;
/** ...and this long after it: the sweeper that frees ArrayBuffers' memory runs after the collection. */
const BUSY_SWEEP_MS = 50;

export interface IdleTrim {
  /** A request began or ended: the quiet spell starts over. */
  touch(): void;
  close(): void;
}

/** Runs `release` (the engine's caches), the collection and the C heap's trim QUIET_MS after the last touch. */
export function idleTrim(release: () => void, logger: Logger, quietMs = QUIET_MS): IdleTrim {
  let timer: NodeJS.Timeout | undefined;
  let sweep: NodeJS.Timeout | undefined;
  const guarded = (what: string, fn: () => void) => {
    try {
      fn();
    } catch (err) {
      logger.warn({ err }, `giving memory back: ${what} failed`);
    }
  };
  const trim = () => {
    timer = undefined;
    const t0 = performance.now();
    const before = process.memoryUsage.rss();
    guarded('releasing caches', release);
    guarded('collecting garbage', collectAllGarbage);
    const collectMs = performance.now() - t0;
    sweep = setTimeout(() => {
      sweep = undefined;
      releaseFreeCHeap()
        .catch((err: unknown) => logger.warn({ err }, 'giving memory back: trimming the C heap failed'))
        .then(() => {
          let fileKiB = 0;
          guarded('unmapping file pages', () => {
            fileKiB = releaseFileMappedPages();
          });
          logger.debug(
            { collectMs: Math.round(collectMs), rssBefore: before, rssAfter: process.memoryUsage.rss(), fileKiB },
            'quiet: gave memory back',
          );
        });
    }, SWEEP_MS).unref();
  };
  const touch = () => {
    if (timer) timer.refresh();
    else timer = setTimeout(trim, quietMs).unref();
  };
  touch(); // start-up's own garbage
  const uncap = capYoungGeneration(YOUNG_MAX);
  guarded('bounding the C heap', () => boundCHeap(MMAP_MIN, TRIM_MIN));
  const stopBusyTrim = trimAfterCollections(logger);
  return {
    touch,
    close: () => {
      stopBusyTrim();
      uncap();
      clearTimeout(timer);
      clearTimeout(sweep);
    },
  };
}

/**
 * After a garbage collection (which frees the C memory of the buffers it
 * collected), the free pages of every arena go back, on a thread of the
 * addon's, at most once per BUSY_TRIM_MS (a collection sooner than that puts
 * the trim off until then). Returns a function that stops it.
 */
function trimAfterCollections(logger: Logger): () => void {
  let last = Number.NEGATIVE_INFINITY;
  let timer: NodeJS.Timeout | undefined;
  let running = false;
  let again = false;
  // Put off, not dropped: the last collections of a burst are the ones whose buffers stay.
  const schedule = () => {
    timer = setTimeout(trim, Math.max(BUSY_SWEEP_MS, last + BUSY_TRIM_MS - performance.now())).unref();
  };
  let closed = false;
  const trim = () => {
    timer = undefined;
    running = true;
    releaseFreeCHeap()
      .then(
        (released) => logger.debug({ released }, 'busy: gave the C heap back'),
        (err: unknown) => logger.warn({ err }, 'giving memory back: trimming the C heap failed'),
      )
      .finally(() => {
        running = false;
        last = performance.now();
        if (again && !closed) schedule();
        again = false;
      });
  };
  const observer = new PerformanceObserver(() => {
    if (running) again = true;
    else if (!timer) schedule();
  });
  observer.observe({ entryTypes: ['gc'] });
  return () => {
    closed = true;
    observer.disconnect();
    clearTimeout(timer);
  };
}
