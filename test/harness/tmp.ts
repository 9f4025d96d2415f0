// Scratch directories of plain files for a test file: made under the system's
// temp directory and removed after the file's last test. A hook of the file's
// own, registered as this module is imported while the file is collected
// (each file imports its modules afresh). A process 'exit' handler was tried
// first: it did not run in vitest's workers. Not for anything that may hold a
// mount.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll } from 'vitest';

const made: string[] = [];
afterAll(() => {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A new empty directory named `<prefix>XXXXXX`, gone after the test file's last test. */
export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  made.push(dir);
  return dir;
}
