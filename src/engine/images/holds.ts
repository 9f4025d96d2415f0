// Keeps what a pull under way uses from being removed under it.
/**
 * What work under way (a pull) is using: layer chain ids and blob digests
 * that no image records yet, or whose image may be removed meanwhile. Image
 * removal and prune leave them alone; each hold is released when its work ends.
 */
export class Holds {
  private readonly counts = new Map<string, number>();

  /** Holds `keys` until the returned function is called. */
  take(keys: Iterable<string>): () => void {
    const taken = [...new Set(keys)];
    for (const k of taken) this.counts.set(k, (this.counts.get(k) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      for (const k of taken) {
        const n = (this.counts.get(k) ?? 1) - 1;
        if (n > 0) this.counts.set(k, n);
        else this.counts.delete(k);
      }
    };
  }

  readonly has = (key: string): boolean => this.counts.has(key);
}
