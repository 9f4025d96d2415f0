// bin/berthd.cjs runs the bundle with a V8 code cache beside it. V8 checks a
// cache against the source's length only, so the launcher stamps the cache with
// the bundle's size and modification time: a rebuilt bundle of the same length
// must run its own code, not the cached old one.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
});
