// bin/berthd.cjs runs the bundle with a V8 code cache beside it. V8 checks a
// cache against the source's length only, so the launcher stamps the cache with
// the bundle's size and modification time: a rebuilt bundle of the same length
// must run its own code, not the cached old one.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const launcher = path.resolve(__dirname, '../../bin/berthd.cjs');
const root = mkdtempSync(path.join(os.tmpdir(), 'berth-launcher-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A bundle that prints `word` and lives past the launcher's cache write (2 s after start). */
const bundle = (word: string) =>
  `#!/usr/bin/env node\nconsole.log(${JSON.stringify(word)});\nsetTimeout(() => {}, 2300);\n`;

function run(): string {
  const r = spawnSync(process.execPath, [path.join(root, 'bin/berthd.cjs')], { encoding: 'utf8', timeout: 20_000 });
  expect(r.status).toBe(0);
  return r.stdout.trim();
}

/** A bundle that changes V8's flags as berthd does (engine/os/gc.ts), and offers the launcher its start flags. */
const flagBundle = `#!/usr/bin/env node
const v8 = require('node:v8');
v8.setFlagsFromString('--semi-space-growth-factor=1');
globalThis[Symbol.for('berth.underStartFlags')] = (make) => {
  v8.setFlagsFromString('--semi-space-growth-factor=2');
  try { return make(); } finally { v8.setFlagsFromString('--semi-space-growth-factor=1'); }
};
console.log('flags');
setTimeout(() => {}, 2300);
`;

describe('the launcher', () => {
  it('writes a code cache, and a rebuilt bundle of the same length runs its own code', () => {
    mkdirSync(path.join(root, 'bin'));
    mkdirSync(path.join(root, 'dist'));
    copyFileSync(launcher, path.join(root, 'bin/berthd.cjs'));
    const file = path.join(root, 'dist/berthd.bundle.cjs');
    writeFileSync(file, bundle('alpha'));
    expect(run()).toBe('alpha');
    expect(existsSync(path.join(root, 'dist/berthd.bundle.cache'))).toBe(true);
    expect(run()).toBe('alpha'); // from the cache
    writeFileSync(file, bundle('omega')); // the same length
    expect(run()).toBe('omega');
  });

  it('makes a cache that the next start takes, though the daemon changed V8 flags before it was made', () => {
    const file = path.join(root, 'dist/berthd.bundle.cjs');
    const cache = path.join(root, 'dist/berthd.bundle.cache');
    writeFileSync(file, flagBundle);
    expect(run()).toBe('flags');
    const made = statSync(cache).mtimeMs;
    // A cache V8 refuses is made again 2 s into the next start: this one is taken as it is.
    expect(run()).toBe('flags');
    expect(statSync(cache).mtimeMs).toBe(made);
  });
});
