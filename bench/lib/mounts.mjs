// Mounts left below a bench's directories, and removing such a tree without crossing a mount.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';

/** Mount points at or below `dir`, deepest first (from /proc/self/mountinfo). */
export function mountsUnder(dir) {
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  const unoctal = (s) => s.replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => unoctal(line.split(' ')[4]))
    .filter((m) => m === dir || m.startsWith(prefix))
    .sort((a, b) => b.length - a.length);
}

/** Unmounts whatever is left below `dir` (lazily), then removes it; never crosses a mount. */
export function removeTree(dir) {
  if (!existsSync(dir)) return;
  for (const m of mountsUnder(dir)) spawnSync('umount', ['-l', m], { stdio: 'ignore' });
  const left = mountsUnder(dir);
  if (left.length) throw new Error(`not removing ${dir}: still mounted: ${left.join(', ')}`);
  rmSync(dir, { recursive: true, force: true });
}
