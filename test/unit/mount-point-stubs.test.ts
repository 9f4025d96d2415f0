// mountPointStubs: the empty mount points a runtime leaves in an upper dir
// are no change; anything else there is.
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { changes, mountPointStubs } from '../../src/engine/layers/diff.js';

const CANDIDATES = ['dev', 'proc', 'etc/hosts', 'etc/hostname', 'etc/resolv.conf'];
let base: string;
let lower: string;
let upper: string;

beforeEach(async () => {
  base = await mkdtemp(path.join(tmpdir(), 'berth-stubs-'));
  lower = path.join(base, 'lower');
  upper = path.join(base, 'upper');
  await mkdir(path.join(lower, 'etc'), { recursive: true, mode: 0o755 });
  await writeFile(path.join(lower, 'etc/passwd'), 'root\n');
  await mkdir(path.join(upper, 'etc'), { recursive: true, mode: 0o755 });
  await chmod(path.join(lower, 'etc'), 0o755);
  await chmod(path.join(upper, 'etc'), 0o755);
  for (const f of ['etc/hosts', 'etc/hostname', 'etc/resolv.conf']) await writeFile(path.join(upper, f), '');
  await mkdir(path.join(upper, 'proc'));
});
afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

describe('mountPointStubs', () => {
  it('finds empty mount points and the directories copied up only to hold them', async () => {
    const stubs = await mountPointStubs(upper, [lower], CANDIDATES);
    expect([...stubs].sort()).toEqual(['etc', 'etc/hostname', 'etc/hosts', 'etc/resolv.conf', 'proc']);
    expect(await changes(upper, [lower], { exclude: stubs })).toEqual([]);
  });

  it('keeps real changes: content, other files beside them, a changed mode', async () => {
    await writeFile(path.join(upper, 'etc/hosts'), '127.0.0.1 mine\n');
    await writeFile(path.join(upper, 'proc/x'), '');
    let stubs = await mountPointStubs(upper, [lower], CANDIDATES);
    expect([...stubs].sort()).toEqual(['etc/hostname', 'etc/resolv.conf']);
    expect(await changes(upper, [lower], { exclude: stubs })).toEqual([
      { Path: '/etc', Kind: 0 },
      { Path: '/etc/hosts', Kind: 1 },
      { Path: '/proc', Kind: 1 },
      { Path: '/proc/x', Kind: 1 },
    ]);
    await rm(path.join(upper, 'etc/hosts'));
    await chmod(path.join(upper, 'etc'), 0o700);
    stubs = await mountPointStubs(upper, [lower], CANDIDATES);
    expect(stubs.has('etc')).toBe(false);
  });

  it('takes a new directory that holds only mount points as one (a build mount’s /run/secrets), not one with content', async () => {
    await mkdir(path.join(upper, 'run/secrets'), { recursive: true });
    await writeFile(path.join(upper, 'run/secrets/tok'), '');
    await mkdir(path.join(upper, 'made/deep'), { recursive: true });
    await writeFile(path.join(upper, 'made/deep/sock'), '');
    await writeFile(path.join(upper, 'made/kept'), 'x');
    const stubs = await mountPointStubs(
      upper,
      [lower],
      [...CANDIDATES, 'run/secrets/tok', 'run/secrets', 'run', 'made/deep/sock', 'made/deep', 'made'],
    );
    expect([...stubs].filter((s) => /^(run|made)/.test(s)).sort()).toEqual([
      'made/deep',
      'made/deep/sock',
      'run',
      'run/secrets',
      'run/secrets/tok',
    ]);
  });

  it("takes a directory made only to hold them where the image has none (a scratch image's /etc) as theirs", async () => {
    await rm(path.join(lower, 'etc'), { recursive: true });
    const stubs = await mountPointStubs(upper, [lower], CANDIDATES);
    expect([...stubs].sort()).toEqual(['etc', 'etc/hostname', 'etc/hosts', 'etc/resolv.conf', 'proc']);
    expect(await changes(upper, [lower], { exclude: stubs })).toEqual([]);
    // With anything of its own in it, it is a change.
    await writeFile(path.join(upper, 'etc/passwd'), 'root\n');
    expect((await mountPointStubs(upper, [lower], CANDIDATES)).has('etc')).toBe(false);
  });
});
