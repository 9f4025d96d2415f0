import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SealedExecutable } from '../../src/engine/runtime/sealed.js';
import { createLogger } from '../../src/log.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-sealed-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const quiet = createLogger('silent', { write: () => undefined });

describe('the sealed copy of runc that conmon runs', () => {
  it('executes the same bytes from a memfd that no one can change', async () => {
    const sealed = new SealedExecutable('/usr/sbin/runc', quiet);
    const p = await sealed.path();
    expect(p).toMatch(new RegExp(`^/proc/${process.pid}/fd/\\d+$`));
    expect(readlinkSync(p)).toMatch(/^\/memfd:/);
    expect(readFileSync(p).equals(readFileSync('/usr/sbin/runc'))).toBe(true);
    expect(execFileSync(p, ['--version'], { encoding: 'utf8' })).toMatch(/^runc version/);
    // Sealed: not even berthd can write it (what runc checks before trusting it as its own copy).
    const fh = await open(p, 'r+').catch((e: NodeJS.ErrnoException) => e);
    if (!(fh instanceof Error)) {
      await expect(fh.write('x', 0)).rejects.toMatchObject({ code: 'EPERM' });
      await fh.close();
    } else expect(fh.code).toBe('EPERM');
    expect(await sealed.path()).toBe(p); // one copy while the file stays as it was
  });

  it('copies again when the file is replaced (an upgraded runc)', async () => {
    const file = path.join(dir, 'tool');
    copyFileSync('/bin/true', file);
    const sealed = new SealedExecutable(file, quiet);
    const first = await sealed.path();
    writeFileSync(file, readFileSync('/bin/false'));
    const second = await sealed.path();
    expect(second).not.toBe(first);
    expect(readFileSync(second).equals(readFileSync('/bin/false'))).toBe(true);
    expect(() => execFileSync(second)).toThrow(); // false
    // The replaced copy stays readable for a conmon about to exec it.
    expect(readFileSync(first).equals(readFileSync('/bin/true'))).toBe(true);
  });

  it('falls back to the file itself when it cannot be read', async () => {
    expect(await new SealedExecutable(path.join(dir, 'missing'), quiet).path()).toBe(path.join(dir, 'missing'));
  });
});
