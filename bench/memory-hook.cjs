// Preloaded into berthd by bench/memory.mjs (node --require): on SIGUSR2 it
// writes the main isolate's figures (process.memoryUsage, V8's heap statistics
// and its spaces) as JSON to $BERTH_MEMORY_HOOK, which the bench reads. Only the
// bench loads it; the daemon itself knows nothing of it. With
// BERTH_MEMORY_HOOK_GC=1 and node's --expose-gc it first runs a full garbage
// collection (bench/pods.mjs: the live heap, not what is yet to be collected).
'use strict';
const fs = require('node:fs');
const v8 = require('node:v8');

const out = process.env.BERTH_MEMORY_HOOK;
if (out) {
  let n = 0;
  process.on('SIGUSR2', () => {
    if (process.env.BERTH_MEMORY_HOOK_GC && typeof global.gc === 'function') global.gc();
    const figures = {
      n: ++n,
      memoryUsage: process.memoryUsage(),
      heap: v8.getHeapStatistics(),
      spaces: v8.getHeapSpaceStatistics(),
      handles: process.getActiveResourcesInfo().length,
    };
    fs.writeFileSync(`${out}.tmp`, JSON.stringify(figures));
    fs.renameSync(`${out}.tmp`, out);
  });
}
