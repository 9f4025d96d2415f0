// The bench scripts' common ground: where the build is, clean-ups run at the end
// (last-in first-out, whatever ends the script), figures and their formatting, small utilities.
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { removeTree } from './mounts.mjs';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** The shipped launcher (the bundle in dist/ with its V8 code cache), as the tests and users run it. */
export const BERTHD = path.join(ROOT, 'bin/berthd.cjs');
export const MiB = 1024 * 1024;

const cleanups = [];
let cleaning;

/** Registers `fn` to run at the end (LIFO); returns a function that runs it now, once. */
export function onCleanup(fn) {
  let done;
  const entry = () =>
    (done ??= Promise.resolve()
      .then(fn)
      .catch((e) => console.error(`bench clean-up: ${e?.message ?? e}`)));
  cleanups.push(entry);
  return () => {
    const i = cleanups.indexOf(entry);
    if (i !== -1) cleanups.splice(i, 1);
    return entry();
  };
}

/** Runs every registered clean-up, newest first. */
export function cleanupAll() {
  cleaning ??= (async () => {
    while (cleanups.length) await cleanups.pop()();
  })();
  return cleaning;
}

/** Runs `main`, then the clean-ups, whatever happens (errors, SIGINT, SIGTERM). */
export async function runBench(main) {
  const onSignal = (sig) => {
    console.error(`\n${sig}: cleaning up`);
    cleanupAll().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let code = 0;
  try {
    await main();
  } catch (e) {
    console.error(`bench failed: ${e?.stack ?? e}`);
    code = 1;
  }
  await cleanupAll();
  process.exit(code);
}

export function stats(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const q = (f) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(f * s.length) - 1))];
  return {
    n: s.length,
    median: q(0.5),
    p90: q(0.9),
    min: s[0],
    max: s[s.length - 1],
    mean: s.reduce((a, b) => a + b, 0) / s.length,
  };
}

export const ms = (x) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
export const fmtMs = (s) => `median ${ms(s.median)} ms, p90 ${ms(s.p90)} ms, min ${ms(s.min)} ms (n=${s.n})`;
export const now = () => Number(process.hrtime.bigint()) / 1e6;
export const sleep = (t) => new Promise((r) => setTimeout(r, t));

/** A numeric argument `v` within [lo, hi]; `dflt` when it is not a number. */
export const clamp = (v, lo, hi, dflt) => Math.max(lo, Math.min(hi, Number.isFinite(Number(v)) ? Number(v) : dflt));

/** "0.42× (target ≤ 0.5×: met)"; just "0.42×" without a target. */
export function ratio(a, b, target, better = 'lower') {
  const r = a / b;
  if (target === undefined) return `${r.toFixed(2)}×`;
  const met = better === 'lower' ? r <= target : r >= target;
  return `${r.toFixed(2)}× (target ${better === 'lower' ? '≤' : '≥'} ${target}×: ${met ? 'met' : 'MISSED'})`;
}

/** Runs `fn(item)` for every item with at most `limit` at once; results in order. */
export async function mapLimit(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

export function which(cmd) {
  return (
    spawnSync('sh', ['-c', `command -v ${cmd}`])
      .stdout.toString()
      .trim() || undefined
  );
}

/** A temp dir (short path: unix socket paths stop at 108 bytes), removed at the end. */
export function tempDir(prefix, parent = os.tmpdir()) {
  const dir = mkdtempSync(path.join(parent, prefix));
  onCleanup(() => removeTree(dir));
  return dir;
}
