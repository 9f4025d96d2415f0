// Resolving directories inside a layer as if the layer were `/` (chroot
// semantics), by hand, because Node has neither chroot nor openat2.
//
// Every component is lstat'ed; a symlink among them is re-read and walked
// again from the layer root (absolute target) or from where it sits (relative
// target), `..` never climbing above the root. The result is a path made only
// of real directories that we have seen ourselves, so the kernel, resolving
// the same string later, follows exactly those directories and no link.
// That argument holds because only the extractor writes in the layer while it
// runs (the caller's contract); it is not safe against concurrent writers.
import { chmodSync, lstatSync, mkdirSync, readlinkSync, rmSync, type Stats } from 'node:fs';
import { invalidParameter } from '../../errors.js';
import { joinRel, linkComponents } from './tarpath.js';

/** Linux's MAXSYMLINKS: more hops than this is a loop or an attack. */
const MAX_SYMLINK_HOPS = 40;

/**
 * create:      missing directories are made (0755 root, as `mkdir -p` in the chroot would)
 * existing:    everything must already exist (hardlink targets)
 * no-symlinks: like create, but a symlink anywhere is refused (whiteouts)
 */
export type WalkPolicy = 'create' | 'existing' | 'no-symlinks';

export function lstatOrNull(path: string): Stats | null {
  return lstatSync(path, { throwIfNoEntry: false }) ?? null;
}

/**
 * Where apply.ts extracts: a layer directory (LayerTree, path strings, only
 * the extractor writing) or a live container's directory (rooted-tree.ts,
 * descriptors). A directory key from resolveDir, joined with one name by
 * LayerTree.child, gives a key whose abs() path follows no link but the last
 * component's, which every caller creates or opens with no-follow semantics.
 */
export interface ApplyTree {
  readonly root: string;
  abs(rel: string): string;
  noteCreated(rel: string): void;
  mayExist(rel: string): boolean;
  remember(lexical: string, real: string): void;
  forget(): void;
  resolveDir(comps: readonly string[], policy: WalkPolicy, entryName: string): string;
  /** The held descriptor behind a directory key from resolveDir, where the tree holds one. */
  heldFd?(dirKey: string): number | undefined;
  /** Removes what is at `abs` (a file, or a directory with all in it), never following a link. */
  remove(abs: string): void;
  /** Releases what the tree holds, once the extraction is over. */
  close(): void;
}

export class LayerTree implements ApplyTree {
  /** Lexical directory path → the real directory it resolved to, both relative to the root. */
  private readonly verified = new Map<string, string>([['', '']]);
  /**
   * Every path created in this run. The layer starts empty, so a path not in
   * here has nothing on it and needs no lstat before its creation.
   * Removals are not tracked: a stale entry only costs one lstat.
   */
  private readonly created = new Set<string>();

  constructor(readonly root: string) {}

  abs(rel: string): string {
    return rel === '' ? this.root : `${this.root}/${rel}`;
  }

  /** The relative path of `name` inside the verified directory `dirRel`. */
  static child(dirRel: string, name: string): string {
    return dirRel === '' ? name : `${dirRel}/${name}`;
  }

  noteCreated(rel: string): void {
    this.created.add(rel);
  }

  /** Only the extractor writes in a layer: a recursive removal by path cannot be led elsewhere. */
  remove(abs: string): void {
    rmSync(abs, { recursive: true, force: true });
  }

  close(): void {}

  /** False only when nothing can be at `rel`: we never created it, and the layer started empty. */
  mayExist(rel: string): boolean {
    return this.created.has(rel);
  }

  /** Records a directory we have just made or checked ourselves, so its children skip the walk. */
  remember(lexical: string, real: string): void {
    this.verified.set(lexical, real);
  }

  /**
   * Forgets every verified directory. Called whenever a directory or symlink
   * is removed: any cached resolution may have gone through it.
   */
  forget(): void {
    this.verified.clear();
    this.verified.set('', '');
  }

  /** Whether `comps` resolves from the cache alone, without touching the disk. */
  isVerified(comps: readonly string[]): boolean {
    return this.verified.has(joinRel(comps));
  }

  /** Resolves cleaned components to a verified real directory; returns its relative path. */
  resolveDir(comps: readonly string[], policy: WalkPolicy, entryName: string): string {
    let known = comps.length;
    let real = this.verified.get(joinRel(comps));
    while (real === undefined) real = this.verified.get(joinRel(comps.slice(0, --known)));
    if (policy === 'no-symlinks' && real !== joinRel(comps.slice(0, known))) {
      throw invalidParameter(`layer archive entry ${JSON.stringify(entryName)} has a parent path through a symlink`);
    }
    if (known === comps.length) return real;
    return this.walk(real === '' ? [] : real.split('/'), comps, known, policy, entryName);
  }

  private walk(cur: string[], comps: readonly string[], from: number, policy: WalkPolicy, entryName: string): string {
    const hops = { n: 0 };
    for (let i = from; i < comps.length; i++) {
      this.step(cur, comps[i]!, policy, entryName, hops);
      this.verified.set(joinRel(comps.slice(0, i + 1)), joinRel(cur));
    }
    return joinRel(cur);
  }

  /** Resolves one lexical component onto `cur` (mutated), expanding symlinks on the way. */
  private step(cur: string[], component: string, policy: WalkPolicy, entryName: string, hops: { n: number }): void {
    const pending = [component]; // a stack: symlink targets are pushed in reverse
    while (pending.length > 0) {
      const c = pending.pop()!;
      if (c === '..') {
        cur.pop(); // clamped at the root, as in a chroot
        continue;
      }
      const path = this.abs(joinRel([...cur, c]));
      const st = lstatOrNull(path);
      if (st === null) {
        if (policy === 'existing')
          throw invalidParameter(
            `layer archive entry ${JSON.stringify(entryName)} refers to a path that does not exist`,
          );
        mkdirSync(path, 0o755);
        chmodSync(path, 0o755); // whatever the daemon's umask: parents made for an image must be traversable
        cur.push(c);
        this.created.add(joinRel(cur));
      } else if (st.isDirectory()) {
        cur.push(c);
      } else if (st.isSymbolicLink()) {
        if (policy === 'no-symlinks')
          throw invalidParameter(
            `layer archive entry ${JSON.stringify(entryName)} has a parent path through a symlink`,
          );
        if (++hops.n > MAX_SYMLINK_HOPS)
          throw invalidParameter(
            `too many levels of symbolic links resolving layer archive entry ${JSON.stringify(entryName)}`,
          );
        const target = readlinkSync(path);
        if (target.startsWith('/')) cur.length = 0; // re-rooted at the layer, never the host
        pending.push(...linkComponents(target).reverse());
      } else {
        throw invalidParameter(`layer archive entry ${JSON.stringify(entryName)} has a parent that is not a directory`);
      }
    }
  }
}
