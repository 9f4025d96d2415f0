// Scratch directories of plain files for a test file: made under the system's
// temp directory and removed when the test file's process ends (vitest runs
// each file in a process of its own). Not for anything that may hold a mount.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const made: string[] = [];
process.once('exit', () => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** A new empty directory named `<prefix>XXXXXX`, gone with the process. */
export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  made.push(dir);
  return dir;
}
