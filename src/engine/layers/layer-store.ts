// Extracted layers on disk: one directory per chain id under <data-root>/layers,
// shared by every image that has that chain. A layer is filled in a temp
// directory and renamed into place only when its content has been verified, so
// a crash never leaves a half layer where a whole one is expected.
import { createHash, randomBytes } from 'node:crypto';
import { access, mkdir, readdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { removeInBackground, spreadChildren } from '../os/dirs.js';

const hex = (digest: string) => digest.replace(/^sha256:/, '');

/** Docker's chain ids: chain(0) = diff(0); chain(n) = sha256(chain(n-1) + " " + diff(n)). */
export function chainIds(diffIds: readonly string[]): string[] {
  const out: string[] = [];
  for (const d of diffIds) {
    const prev = out.at(-1);
    out.push(prev === undefined ? d : `sha256:${createHash('sha256').update(`${prev} ${d}`).digest('hex')}`);
  }
  return out;
}

/** Removes a staged tree that will not be installed, once `filling` (what writes to it) has ended. */
export function discardWhenFilled(staged: StagedLayer, filling: Promise<unknown>): Promise<void> {
  return filling.then(
    () => staged.discard(),
    () => staged.discard(),
  );
}

export interface StagedLayer {
  /** The tree to fill. */
  diffDir: string;
  /** Moves the tree into place as the layer of `chainId`. Only for a chain no image records. */
  install(chainId: string): Promise<void>;
  discard(): Promise<void>;
}

export class LayerStore {
  private readonly tmpRoot: string;
  private readonly inflight = new Map<string, Promise<unknown>>();
  /** Removals under way: a fill of the same layer starts only once they are done. */
  private readonly removing = new Map<string, Promise<void>>();

  constructor(readonly root: string) {
    this.tmpRoot = path.join(root, 'tmp');
  }

  async init(): Promise<void> {
    await mkdir(this.tmpRoot, { recursive: true, mode: 0o700 });
    // Each layer is a tree of its own, filled at once: spread them over the disk.
    spreadChildren(this.root);
    spreadChildren(this.tmpRoot);
  }

  /** The directory name (under root) that holds a chain. */
  static dirName(chainId: string): string {
    return hex(chainId);
  }

  /** The layer's tree: an overlay lowerdir. */
  diffDir(dir: string): string {
    return path.join(this.root, dir, 'diff');
  }

  /**
   * Fills a new layer: `fill` writes the tree into an empty directory and checks
   * it; only then is the layer renamed into place. Concurrent calls for one
   * chain share the first call's work.
   */
  extract<T>(chainId: string, fill: (diffDir: string) => Promise<T>): Promise<T> {
    return this.once(chainId, () => this.fillOnce(chainId, fill));
  }

  /**
   * Makes sure the layer's tree is on disk, filling it when it is not (a
   * committed layer whose tree a crash, or a hand, removed) and waiting for a
   * fill under way. Never replaces a tree that is there: containers may be
   * using it.
   */
  async ensure(chainId: string, fill: (diffDir: string) => Promise<unknown>): Promise<void> {
    // Registered at once, so that a remove() that follows waits for it.
    await this.once(chainId, async () => {
      if (!(await this.present(chainId))) await this.fillOnce(chainId, fill);
    });
  }

  /**
   * Takes over a tree that is being filled elsewhere (a commit's, fed the same
   * bytes as its blob): once `filling` ends it is installed as the chain's, and
   * ensure() and remove() for the chain wait for that meanwhile. A tree that
   * fails, or that another fill got ahead of, is dropped (ensure() makes the
   * tree again from the blob when it is needed).
   */
  adopt(chainId: string, staged: StagedLayer, filling: Promise<unknown>): Promise<void> {
    if (this.inflight.has(LayerStore.dirName(chainId))) return discardWhenFilled(staged, filling);
    return this.once(chainId, async () => {
      try {
        await filling;
      } catch (e) {
        await staged.discard();
        throw e;
      }
      if (await this.present(chainId)) await staged.discard();
      else await staged.install(chainId);
    });
  }

  /** Whether the chain's tree is in place (trees are renamed in whole). */
  private present(chainId: string): Promise<boolean> {
    return access(this.diffDir(LayerStore.dirName(chainId))).then(
      () => true,
      () => false,
    );
  }

  /** Runs `job` unless one for the chain is running already, whose result is shared. */
  private once<T>(chainId: string, job: () => Promise<T>): Promise<T> {
    const key = LayerStore.dirName(chainId);
    const running = this.inflight.get(key);
    if (running) return running as Promise<T>;
    const removal = this.removing.get(key);
    const started = (removal ? removal.then(job) : job()).finally(() => this.inflight.delete(key));
    this.inflight.set(key, started);
    return started;
  }

  private async fillOnce<T>(chainId: string, fill: (diffDir: string) => Promise<T>): Promise<T> {
    const staged = await this.stage(hex(chainId).slice(0, 16));
    try {
      const result = await fill(staged.diffDir);
      await staged.install(chainId);
      return result;
    } catch (e) {
      await staged.discard();
      throw e;
    }
  }

  /**
   * An empty temp layer to fill, for a layer whose chain id only its content
   * tells (a commit). The caller installs it under that id or discards it;
   * a crash leaves it for cleanup() at the next start.
   */
  async stage(label = 'new'): Promise<StagedLayer> {
    const tmp = path.join(this.tmpRoot, `${label}-${randomBytes(6).toString('hex')}`);
    const diffDir = path.join(tmp, 'diff');
    await mkdir(diffDir, { recursive: true, mode: 0o755 });
    return {
      diffDir,
      install: async (chainId) => {
        const final = path.join(this.root, LayerStore.dirName(chainId));
        // An earlier pull that died after its rename may have left the same layer:
        // it is not recorded anywhere, so ours replaces it.
        await rm(final, { recursive: true, force: true });
        await rename(tmp, final);
      },
      discard: () => rm(tmp, { recursive: true, force: true }),
    };
  }

  /**
   * Removes a layer's tree, once any filling of it has ended; the deletion
   * goes on in the background, from tmp/, which the next start empties.
   */
  remove(dir: string): Promise<void> {
    const previous = this.removing.get(dir);
    const job = (async () => {
      await previous;
      await this.inflight.get(dir)?.catch(() => undefined);
      await removeInBackground(path.join(this.root, dir), this.tmpRoot, () => undefined);
    })();
    const settled = job.catch(() => undefined);
    this.removing.set(dir, settled);
    void settled.then(() => this.removing.get(dir) === settled && this.removing.delete(dir));
    return job;
  }

  /** Removes temp directories and layer directories the store does not know. */
  async cleanup(known: Set<string>): Promise<string[]> {
    await rm(this.tmpRoot, { recursive: true, force: true });
    await this.init();
    const removed: string[] = [];
    for (const name of await readdir(this.root)) {
      if (name === 'tmp' || name === 'l' || known.has(name)) continue;
      await rm(path.join(this.root, name), { recursive: true, force: true });
      removed.push(name);
    }
    return removed;
  }
}
