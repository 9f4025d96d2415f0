// `RUN --mount=type=cache`'s store: directories under the data root kept from
// build to build, one per cache (its id with the uid, gid and mode it was asked
// with: BuildKit makes a different cache for each, as its base differs). A
// cache's first directory is the shared one; `sharing=private` takes another
// when that one is in use (kept for later private users), `sharing=locked`
// waits until no locked user holds the shared one. Directory names are digests
// of the id: a hostile id never names a path.
import { createHash } from 'node:crypto';
import { execFile } from 'node:child_process';
import { chmod, chown, mkdir, rename, rm, stat } from 'node:fs/promises';
import { promisify } from 'node:util';
import path from 'node:path';
import { systemError } from '../../errors.js';
import type { CacheSharing } from '../dockerfile/index.js';

export interface CacheMountRequest {
  id: string;
  sharing: CacheSharing;
  uid: number;
  gid: number;
  mode: number;
  /** `from`/`source`: a new cache starts as a copy of this tree (a stage's or an image's), which keys it too. */
  seed?: { key: string; dir: string };
}

export interface HeldCache {
  dir: string;
  release(): void;
}

export class CacheMountStore {
  /** Directory → users now. */
  private readonly users = new Map<string, number>();
  /** Cache key → the tail of its locked users' queue. */
  private readonly locks = new Map<string, Promise<void>>();
  /** Directory → its making, while it is made. */
  private readonly making = new Map<string, Promise<void>>();

  constructor(private readonly root: string) {}

  /** The cache's directory for one RUN, made on first use; release it when the RUN is over. */
  async acquire(req: CacheMountRequest, signal: AbortSignal): Promise<HeldCache> {
    const key = createHash('sha256')
      .update(JSON.stringify([req.id, req.uid, req.gid, req.mode, req.seed?.key ?? null]))
      .digest('hex');
    const base = path.join(this.root, key);
    let unlock: () => void = () => undefined;
    let n = 0;
    if (req.sharing === 'locked') unlock = await this.lock(key, signal);
    else if (req.sharing === 'private') while ((this.users.get(path.join(base, String(n))) ?? 0) > 0) n++;
    const dir = path.join(base, String(n));
    // Counted before it is made: a private user picking at the same time (another stage of this
    // build, another build) takes the next directory.
    this.users.set(dir, (this.users.get(dir) ?? 0) + 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      const left = (this.users.get(dir) ?? 1) - 1;
      if (left > 0) this.users.set(dir, left);
      else this.users.delete(dir);
      unlock();
    };
    try {
      await this.made(dir, req);
    } catch (e) {
      release();
      throw e;
    }
    return { dir, release };
  }

  /** The directory made once however many users ask for it at the same time. */
  private made(dir: string, req: CacheMountRequest): Promise<void> {
    let making = this.making.get(dir);
    if (!making) {
      making = this.make(dir, req).finally(() => this.making.delete(dir));
      this.making.set(dir, making);
    }
    return making;
  }

  /** Removes every cache (none may be in use). */
  async clear(): Promise<void> {
    await rm(this.root, { recursive: true, force: true });
    await mkdir(this.root, { recursive: true, mode: 0o700 });
  }

  private async make(dir: string, req: CacheMountRequest): Promise<void> {
    if (await stat(dir).catch(() => undefined)) return;
    await mkdir(path.dirname(dir), { recursive: true, mode: 0o700 });
    if (req.seed) {
      // Made aside and renamed into place: a failed copy leaves no half cache behind.
      const part = `${dir}.part`;
      await rm(part, { recursive: true, force: true });
      try {
        await copyTree(req.seed.dir, part);
        await rename(part, dir);
      } catch (e) {
        await rm(part, { recursive: true, force: true });
        throw e;
      }
      return;
    }
    await mkdir(dir, { mode: req.mode });
    await chmod(dir, req.mode);
    await chown(dir, req.uid, req.gid);
  }

  private async lock(key: string, signal: AbortSignal): Promise<() => void> {
    const before = this.locks.get(key) ?? Promise.resolve();
    let free!: () => void;
    const mine = new Promise<void>((resolve) => {
      free = resolve;
    });
    const tail = before.then(() => mine);
    this.locks.set(key, tail);
    const done = () => {
      free();
      if (this.locks.get(key) === tail) this.locks.delete(key);
    };
    try {
      await abortable(before, signal);
    } catch (e) {
      // Our turn still comes after the holder's; whoever waits behind us then goes at once.
      done();
      throw e;
    }
    return done;
  }
}

/** A tree copied with owners, modes, times, links and xattrs (cp -a: the daemon is root). */
async function copyTree(from: string, to: string): Promise<void> {
  try {
    await promisify(execFile)('cp', ['-a', '--no-target-directory', from, to]);
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw systemError(`copying the cache mount's base: ${(err.stderr || err.message).trim()}`, e);
  }
}

function abortable(p: Promise<void>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<void>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}
