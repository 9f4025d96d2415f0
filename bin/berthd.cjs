#!/usr/bin/env node
// berthd's launcher: runs the single-file bundle (dist/berthd.bundle.cjs) with a
// V8 code cache beside it, so a start skips parsing and compiling ~2.5 MB of
// JavaScript. A missing or stale cache is rebuilt after start; the daemon runs
// the same either way.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const vm = require('node:vm');
const Module = require('node:module');

const dist = path.join(__dirname, '..', 'dist');
const file = path.join(dist, 'berthd.bundle.cjs');
const cacheFile = path.join(dist, 'berthd.bundle.cache');

// The bundle keeps main.ts's shebang line; inside a function wrapper it must go.
const source = fs.readFileSync(file, 'utf8').replace(/^#!/, '//');
let cachedData;
try {
  cachedData = fs.readFileSync(cacheFile);
} catch {
  cachedData = undefined;
}
const script = new vm.Script(Module.wrap(source), { filename: file, cachedData });
const module_ = { exports: {} };
script.runInThisContext()(module_.exports, Module.createRequire(file), module_, file, dist);

if (!cachedData || script.cachedDataRejected) {
  // After start-up has run, so the functions it compiled are in the cache too.
  setTimeout(() => {
    try {
      const tmp = `${cacheFile}.${process.pid}`;
      fs.writeFileSync(tmp, script.createCachedData());
      fs.renameSync(tmp, cacheFile);
    } catch {
      // A read-only install just starts without a cache.
    }
  }, 2000).unref();
}
