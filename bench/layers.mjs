// applyLayer throughput: a ~100 MiB tar of 4 big files and 2,000 small ones,
// extracted three times into fresh directories on the data disk, under a
// directory that spreads its children over the disk as berthd's layer store
// does (src/engine/os/dirs.ts; without it, on ext4 with no journal, the
// figure mostly measures how many inodes nearby were deleted lately).
// Usage: node bench/layers.mjs   (after npm run build)
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { applyLayer } from '../dist/engine/layers/apply.js';
import { spreadChildren } from '../dist/engine/os/dirs.js';
import { bodyPadding, encodeEntryHeader, endOfArchive } from '../dist/engine/layers/tarformat.js';

const base = await mkdtemp(path.join(os.tmpdir(), 'berth-bench-layers-'));
spreadChildren(base);
try {
  const tarPath = path.join(base, 'bench.tar');
  const out = createWriteStream(tarPath);
  const put = (b) => new Promise((resolve) => (out.write(b) ? resolve() : out.once('drain', resolve)));
  const addFile = async (name, size) => {
    await put(encodeEntryHeader({ name, type: 'file', mode: 0o644, uid: 0, gid: 0, size, mtime: 1 }));
    for (let left = size; left > 0; left -= 1 << 20) await put(randomBytes(Math.min(left, 1 << 20)));
    await put(bodyPadding(size));
  };
  for (let i = 0; i < 4; i++) await addFile(`big/blob${i}`, 24 << 20);
  for (let d = 0; d < 100; d++) {
    await put(encodeEntryHeader({ name: `small/d${d}`, type: 'dir', mode: 0o755, uid: 0, gid: 0, size: 0, mtime: 1 }));
    for (let f = 0; f < 20; f++) await addFile(`small/d${d}/f${f}`, 512 + (((d * 20 + f) * 37) % 3584));
  }
  await put(endOfArchive());
  await new Promise((resolve) => out.end(resolve));
  const bytes = (await stat(tarPath)).size;
  const runs = [];
  for (let i = 0; i < 3; i++) {
    const into = path.join(base, `run-${i}`);
    await mkdir(into);
    const t0 = process.hrtime.bigint();
    await applyLayer(createReadStream(tarPath, { highWaterMark: 1 << 20 }), into);
    runs.push(Number(process.hrtime.bigint() - t0) / 1e9);
    await rm(into, { recursive: true });
  }
  const best = Math.min(...runs);
  console.log(
    `applyLayer: ${(bytes / 1e6).toFixed(1)} MB in ${best.toFixed(3)} s = ${(bytes / 1e6 / best).toFixed(0)} MB/s (runs ${runs.map((r) => r.toFixed(3)).join(', ')})`,
  );
} finally {
  await rm(base, { recursive: true, force: true });
}
