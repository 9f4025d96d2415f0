// Where the package itself lives on disk, for files that ship beside the code.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

function findRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, 'package.json'))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error('berth: package root not found');
    dir = up;
  }
  return dir;
}

/** The repository / package root (the directory holding package.json). */
export const packageRoot = findRoot();
