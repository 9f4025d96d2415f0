// Extracted layers on disk: one directory per chain id under <data-root>/layers,
// shared by every image that has that chain. A layer is filled in a temp
// directory and renamed into place only when its content has been verified, so
// a crash never leaves a half layer where a whole one is expected.
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';

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

  constructor(readonly root: string) {
    this.tmpRoot = path.join(root, 'tmp');
  }

  async init(): Promise<void> {
    await mkdir(this.tmpRoot, { recursive: true, mode: 0o700 });
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
    const running = this.inflight.get(chainId);
    if (running) return running as Promise<T>;
    const job = this.fillOnce(chainId, fill).finally(() => this.inflight.delete(chainId));
    this.inflight.set(chainId, job);
    return job;
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

  async remove(dir: string): Promise<void> {
    await rm(path.join(this.root, dir), { recursive: true, force: true });
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
