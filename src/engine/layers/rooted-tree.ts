// The tree apply.ts extracts into for `docker cp`: a directory of a container
// that may be running and changing it meanwhile. Nothing is looked up by a
// path string of more than one untrusted component: directories are resolved
// with openat2(RESOLVE_IN_ROOT) from the destination's descriptor (symlinks
// re-rooted at the destination, `..` clamped there: a layer's rules) and held
// open; every entry is then named `/proc/self/fd/<dir>/<name>`, which the
// kernel resolves from the held directory, and created or opened with
// no-follow semantics by apply.ts. A swapped-in symlink can only lead back
// inside the destination.
import {
  closeSync,
  constants as C,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readlinkSync,
  rmdirSync,
  unlinkSync,
} from 'node:fs';
import { invalidParameter, messageOf } from '../../errors.js';
import { O_PATH, openInRoot } from '../os/rooted.js';
import type { ApplyTree, WalkPolicy } from './tree.js';
import { joinRel, linkComponents } from './tarpath.js';

const fdPath = (fd: number) => `/proc/self/fd/${fd}`;
const DIR = O_PATH | C.O_DIRECTORY;
/** Linux's MAXSYMLINKS. */
const MAX_SYMLINK_HOPS = 40;

const notDirectory = (entryName: string, cause?: unknown) =>
  invalidParameter(
    `archive entry ${JSON.stringify(entryName)} has a parent that is not a directory${cause ? ` (${messageOf(cause)})` : ''}`,
    cause,
  );

export class RootedTree implements ApplyTree {
  readonly root: string;
  /** Lexical directory path → `/proc/self/fd/N` of its held descriptor. */
  private readonly verified = new Map<string, string>();
  /** Every descriptor opened, closed only at the end: directory times are set through them last. */
  private readonly held: number[] = [];
  /** `/proc/self/fd/N` → N, for the directories held. */
  private readonly fds = new Map<string, number>();

  constructor(private readonly destFd: number) {
    this.root = fdPath(destFd);
    this.verified.set('', this.root);
    this.fds.set(this.root, destFd);
  }

  heldFd(dirKey: string): number | undefined {
    return this.fds.get(dirKey);
  }

  abs(rel: string): string {
    return rel === '' ? this.root : rel;
  }

  noteCreated(): void {}

  /** The destination is not empty: anything may be anywhere. */
  mayExist(): boolean {
    return true;
  }

  /** `real` is a held directory and one name in it: held itself now, opened without following. */
  remember(lexical: string, real: string): void {
    this.verified.set(lexical, this.hold(openSync(real, DIR | C.O_NOFOLLOW)));
  }

  forget(): void {
    this.verified.clear();
    this.verified.set('', this.root);
  }

  resolveDir(comps: readonly string[], policy: WalkPolicy, entryName: string): string {
    const lexical = joinRel(comps);
    const known = this.verified.get(lexical);
    if (known !== undefined) return known;
    let dir: string;
    try {
      // The common case, in one walk by the kernel: every directory is there.
      dir = this.hold(openInRoot(this.destFd, lexical, DIR));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw notDirectory(entryName, e);
      dir = this.walk(comps, policy, entryName);
    }
    this.verified.set(lexical, dir);
    return dir;
  }

  /**
   * Some directory is missing: one component at a time from the destination,
   * each opened with O_NOFOLLOW from the held one before it, a symlink's text
   * walked again from the destination (absolute) or from where it sits,
   * missing directories made (0755, as `mkdir -p`) unless they must exist.
   */
  private walk(comps: readonly string[], policy: WalkPolicy, entryName: string): string {
    const keys: string[] = [this.root]; // the held directories walked so far, the destination first
    const pending = [...comps].reverse();
    let hops = 0;
    while (pending.length > 0) {
      const c = pending.pop()!;
      if (c === '..') {
        if (keys.length > 1) keys.pop(); // clamped at the destination
        continue;
      }
      const path = `${keys[keys.length - 1]}/${c}`;
      const st = lstatSync(path, { throwIfNoEntry: false });
      if (st?.isSymbolicLink()) {
        if (++hops > MAX_SYMLINK_HOPS) throw notDirectory(entryName);
        const target = readlinkSync(path);
        if (target.startsWith('/')) keys.length = 1; // re-rooted at the destination
        pending.push(...linkComponents(target).reverse());
        continue;
      }
      if (!st) {
        if (policy === 'existing')
          throw invalidParameter(`archive entry ${JSON.stringify(entryName)} refers to a path that does not exist`);
        mkdirSync(path, 0o755);
      }
      try {
        keys.push(this.hold(openSync(path, DIR | C.O_NOFOLLOW)));
      } catch (e) {
        throw notDirectory(entryName, e);
      }
    }
    return keys[keys.length - 1]!;
  }

  private hold(fd: number): string {
    this.held.push(fd);
    const key = fdPath(fd);
    this.fds.set(key, fd);
    return key;
  }

  remove(abs: string): void {
    const st = lstatSync(abs, { throwIfNoEntry: false });
    if (!st) return;
    if (!st.isDirectory()) {
      unlinkSync(abs);
      return;
    }
    this.forget();
    removeDir(abs);
  }

  close(): void {
    this.fds.clear();
    for (const fd of this.held.splice(0)) closeSync(fd);
  }
}

/**
 * Removes the directory `path` names (a held directory and one name) with
 * all in it: opened without following, its entries named through its own
 * descriptor, level by level, so a swapped-in link is removed, never followed.
 */
function removeDir(path: string): void {
  const fd = openSync(path, C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW);
  try {
    const dir = fdPath(fd);
    for (const name of readdirSync(dir)) {
      const entry = `${dir}/${name}`;
      const st = lstatSync(entry, { throwIfNoEntry: false });
      if (st?.isDirectory()) removeDir(entry);
      else if (st) unlinkSync(entry);
    }
  } finally {
    closeSync(fd);
  }
  rmdirSync(path);
}
