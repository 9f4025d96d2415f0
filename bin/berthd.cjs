#!/usr/bin/env node
// berthd's launcher: runs the daemon's bundle (dist/berthd.bundle.cjs) with a
// V8 code cache beside it, so a start skips parsing and compiling its
// JavaScript; and, when the daemon first needs its API (src/api/front.ts), the
// API's bundle (dist/berthd-api.bundle.cjs) with its own cache. A missing or
// stale cache is rebuilt after the bundle has run; the daemon runs the same
// either way.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const vm = require('node:vm');
const Module = require('node:module');

const dist = path.join(__dirname, '..', 'dist');
/** The stamp before the V8 data in a cache file. */
const STAMP_BYTES = 64;
// V8 takes a cache only under the flags it was made with. berthd changes the young
// generation's growth factor as it runs (engine/os/gc.ts): a cache is made under its start value.
const underStartFlags = (make) => (globalThis[Symbol.for('berth.underStartFlags')] ?? ((m) => m()))(make);

/** Runs dist/<name>.cjs with the cache dist/<name>.cache; returns its exports. */
function run(name) {
  const file = path.join(dist, `${name}.cjs`);
  const cacheFile = path.join(dist, `${name}.cache`);
  // A bundle may keep its entry's shebang line; inside a function wrapper it must go.
  // It is all ASCII (scripts/bundle.mjs), so Latin-1 reads it as UTF-8 would, faster.
  const source = fs.readFileSync(file, 'latin1').replace(/^#!/, '//');
  // V8 checks a cache against the source's length only: one edit that keeps the
  // length would run the old code. So the cache begins with the bundle's size and
  // modification time, and is used only for that bundle.
  const stat = fs.statSync(file, { bigint: true });
  // Milliseconds: what a copy that keeps times (cp -p, fs.cp) keeps.
  const stamp = Buffer.from(`${stat.size}:${stat.mtimeNs / 1_000_000n}\n`.padEnd(STAMP_BYTES));
  let cachedData;
  try {
    const stored = fs.readFileSync(cacheFile);
    if (stored.subarray(0, STAMP_BYTES).equals(stamp)) cachedData = stored.subarray(STAMP_BYTES);
  } catch {
    cachedData = undefined;
  }
  const script = new vm.Script(Module.wrap(source), { filename: file, cachedData });
  const module_ = { exports: {} };
  script.runInThisContext()(module_.exports, Module.createRequire(file), module_, file, dist);

  if (!cachedData || script.cachedDataRejected) {
    // After the bundle's start has run, so the functions it compiled are in the cache too.
    setTimeout(() => {
      try {
        const tmp = `${cacheFile}.${process.pid}`;
        fs.writeFileSync(tmp, Buffer.concat([stamp, underStartFlags(() => script.createCachedData())]));
        fs.renameSync(tmp, cacheFile);
      } catch {
        // A read-only install just starts without a cache.
      }
    }, 2000).unref();
  }
  return module_.exports;
}

globalThis[Symbol.for('berth.loadApi')] = () => run('berthd-api.bundle');
run('berthd.bundle');
