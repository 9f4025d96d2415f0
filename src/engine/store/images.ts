// SQL for images, tags, repo digests and layers, for the image and commit services (and /info's counts).
import type { Db } from './db.js';
import { preparedOnUse } from './statements.js';
import { Presence } from './presence.js';

export interface ImageRow {
  id: string;
  parent: string;
  config: string;
  size: number;
  created: string;
  added_at: number;
}

export interface LayerRow {
  chain_id: string;
  diff_id: string;
  parent: string | null;
  dir: string;
  size: number;
  blob: string | null;
}

/** Whether something (a chain id, a blob digest) is held by work under way, so must stay. */
export type Held = (key: string) => boolean;
const nothingHeld: Held = () => false;

/** Everything one pull or commit adds, written in one transaction. */
export interface NewImage {
  image: ImageRow;
  layers: LayerRow[]; // bottom first; rows already present are kept as they are
  blobs: string[];
  tags: string[];
  repoDigests: string[];
}

// `column = +?`: see db.ts ("A value bound for a column").
const statements = (db: Db) =>
  preparedOnUse(db, {
    byId: 'SELECT * FROM images WHERE id = ?',
    byPrefix: "SELECT * FROM images WHERE id >= ? AND id < ? || 'g' LIMIT 2",
    all: 'SELECT * FROM images ORDER BY created DESC, id',
    count: 'SELECT count(*) AS n FROM images',
    tag: 'SELECT image_id FROM tags WHERE ref = ?',
    digest: 'SELECT image_id FROM repo_digests WHERE ref = ?',
    tagsOf: 'SELECT ref FROM tags WHERE image_id = +? ORDER BY ref',
    digestsOf: 'SELECT ref FROM repo_digests WHERE image_id = +? ORDER BY ref',
    allTags: 'SELECT ref, image_id FROM tags ORDER BY ref',
    blobSources: `SELECT DISTINCT rd.ref FROM layers l JOIN image_layers il ON il.chain_id = l.chain_id
     JOIN repo_digests rd ON rd.image_id = il.image_id WHERE l.blob = +? ORDER BY rd.ref`,
    tagsOfRepository: 'SELECT ref, image_id FROM tags WHERE substr(ref, 1, ?) = ? ORDER BY ref',
    allDigests: 'SELECT ref, image_id FROM repo_digests ORDER BY ref',
    layersOf:
      'SELECT l.* FROM image_layers il JOIN layers l ON l.chain_id = il.chain_id WHERE il.image_id = +? ORDER BY il.idx',
    layer: 'SELECT * FROM layers WHERE chain_id = ?',
    insertImage:
      'INSERT OR IGNORE INTO images (id, parent, config, size, created, added_at) VALUES (@id, @parent, @config, @size, @created, @added_at)',
    insertLayer:
      'INSERT OR IGNORE INTO layers (chain_id, diff_id, parent, dir, size, blob) VALUES (@chain_id, @diff_id, @parent, @dir, @size, @blob)',
    insertImageLayer: 'INSERT OR IGNORE INTO image_layers (image_id, idx, chain_id) VALUES (?, ?, ?)',
    insertBlob: 'INSERT OR IGNORE INTO image_blobs (image_id, digest) VALUES (?, ?)',
    setTag:
      'INSERT INTO tags (ref, image_id) VALUES (?, ?) ON CONFLICT(ref) DO UPDATE SET image_id = excluded.image_id',
    setDigest:
      'INSERT INTO repo_digests (ref, image_id) VALUES (?, ?) ON CONFLICT(ref) DO UPDATE SET image_id = excluded.image_id',
    deleteTag: 'DELETE FROM tags WHERE ref = ?',
    deleteDigest: 'DELETE FROM repo_digests WHERE ref = ?',
    deleteImage: 'DELETE FROM images WHERE id = ?',
    children: 'SELECT id FROM images WHERE parent = +?',
    unusedLayers:
      'SELECT * FROM layers WHERE chain_id NOT IN (SELECT chain_id FROM image_layers) AND chain_id NOT IN (SELECT parent FROM layers WHERE parent IS NOT NULL)',
    deleteLayer: 'DELETE FROM layers WHERE chain_id = ?',
    blobsOf: 'SELECT digest FROM image_blobs WHERE image_id = +?',
    blobHeld: 'SELECT 1 FROM image_blobs WHERE digest = +? UNION ALL SELECT 1 FROM layers WHERE blob = +? LIMIT 1',
    layerInUse:
      'SELECT 1 FROM image_layers WHERE chain_id = +? UNION ALL SELECT 1 FROM layers WHERE parent = +? LIMIT 1',
    allLayerDirs: 'SELECT dir FROM layers',
    heldBlobs: 'SELECT digest FROM image_blobs UNION SELECT blob FROM layers WHERE blob IS NOT NULL',
    containersUsing: 'SELECT id, status FROM containers WHERE image_id = +? ORDER BY created',
    containerCounts: 'SELECT image_id, count(*) AS n FROM containers GROUP BY image_id',
    layersSize: 'SELECT coalesce(sum(size), 0) AS total FROM layers',
    // A chain id names a layer with all below it, so a layer two images list is one they share.
    sharedSizes: `SELECT il.image_id, sum(l.size) AS shared FROM image_layers il JOIN layers l ON l.chain_id = il.chain_id
     WHERE il.chain_id IN (SELECT chain_id FROM image_layers GROUP BY chain_id HAVING count(DISTINCT image_id) > 1)
     GROUP BY il.image_id`,
  });

export class ImageRepository {
  private readonly q: ReturnType<typeof statements>;
  private readonly rows: Presence;

  constructor(private readonly db: Db) {
    const q = statements(db);
    this.q = q;
    this.rows = new Presence(() => (q.count.get() as { n: number }).n > 0);
  }

  find(id: string): ImageRow | undefined {
    return this.q.byId.get(id) as ImageRow | undefined;
  }

  /** Images whose id starts with `sha256:<prefix>` (at most two: enough to tell ambiguity). */
  findByPrefix(prefix: string): ImageRow[] {
    const p = `sha256:${prefix}`;
    return this.q.byPrefix.all(p, p) as ImageRow[];
  }

  list(): ImageRow[] {
    return this.rows.any ? (this.q.all.all() as ImageRow[]) : [];
  }

  count(): number {
    return (this.q.count.get() as { n: number }).n;
  }

  imageForTag(ref: string): string | undefined {
    return (this.q.tag.get(ref) as { image_id: string } | undefined)?.image_id;
  }

  imageForDigest(ref: string): string | undefined {
    return (this.q.digest.get(ref) as { image_id: string } | undefined)?.image_id;
  }

  tagsOf(id: string): string[] {
    return (this.q.tagsOf.all(id) as { ref: string }[]).map((r) => r.ref);
  }

  /** The tags (`name:tag`) of one repository (`name`, fully qualified), with their images. */
  tagsOfRepository(name: string): { ref: string; imageId: string }[] {
    const prefix = `${name}:`;
    return (this.q.tagsOfRepository.all(prefix.length, prefix) as { ref: string; image_id: string }[]).map((r) => ({
      ref: r.ref,
      imageId: r.image_id,
    }));
  }

  digestsOf(id: string): string[] {
    return (this.q.digestsOf.all(id) as { ref: string }[]).map((r) => r.ref);
  }

  /** All tags and digests, grouped by image id, for listing many images at once. */
  refsByImage(): Map<string, { tags: string[]; digests: string[] }> {
    const out = new Map<string, { tags: string[]; digests: string[] }>();
    const get = (id: string) => {
      let refs = out.get(id);
      if (!refs) {
        refs = { tags: [], digests: [] };
        out.set(id, refs);
      }
      return refs;
    };
    for (const r of this.q.allTags.all() as { ref: string; image_id: string }[]) get(r.image_id).tags.push(r.ref);
    for (const r of this.q.allDigests.all() as { ref: string; image_id: string }[]) get(r.image_id).digests.push(r.ref);
    return out;
  }

  /** The repo digests (`name@digest`) of the images that have a layer made from this blob. */
  blobSources(digest: string): string[] {
    return (this.q.blobSources.all(digest) as { ref: string }[]).map((r) => r.ref);
  }

  /** Records that `ref` (`name@digest`) names image `id` (a push made it). */
  addDigest(ref: string, id: string): void {
    this.q.setDigest.run(ref, id);
  }

  layersOf(id: string): LayerRow[] {
    return this.q.layersOf.all(id) as LayerRow[];
  }

  layer(chainId: string): LayerRow | undefined {
    return this.q.layer.get(chainId) as LayerRow | undefined;
  }

  children(id: string): string[] {
    return (this.q.children.all(id) as { id: string }[]).map((r) => r.id);
  }

  /** Adds an image with its layers, blobs, tags and digests, all or nothing. */
  add(n: NewImage): void {
    this.rows.added();
    this.db.transaction(() => {
      for (const l of n.layers) this.q.insertLayer.run(l);
      this.q.insertImage.run(n.image);
      for (const [i, l] of n.layers.entries()) this.q.insertImageLayer.run(n.image.id, i, l.chain_id);
      for (const b of n.blobs) this.q.insertBlob.run(n.image.id, b);
      for (const t of n.tags) this.q.setTag.run(t, n.image.id);
      for (const d of n.repoDigests) this.q.setDigest.run(d, n.image.id);
    })();
  }

  /**
   * Records a layer on its own, before any image has it: a pull's verified
   * layer, kept for the next pull when this one fails. prune removes it,
   * and so does the next start if no image took it by then.
   */
  addLayer(l: LayerRow): void {
    this.q.insertLayer.run(l);
  }

  setTag(ref: string, id: string): void {
    this.q.setTag.run(ref, id);
  }

  deleteTag(ref: string): boolean {
    return this.q.deleteTag.run(ref).changes > 0;
  }

  deleteDigest(ref: string): boolean {
    return this.q.deleteDigest.run(ref).changes > 0;
  }

  /**
   * Deletes an image row (tags, digests, layer links cascade) and returns what it
   * freed: its layers no image uses any more and blobs nothing holds, except
   * what `held` (work under way, such as a pull) keeps.
   */
  deleteImage(id: string, held: Held = nothingHeld): { layers: LayerRow[]; blobs: string[] } {
    return this.db.transaction(() => {
      const blobs = this.blobsOf(id);
      const chain = this.layersOf(id).reverse();
      this.q.deleteImage.run(id);
      this.rows.removed();
      // From the top down: a layer is in use while an image or a layer above it is.
      const layers: LayerRow[] = [];
      for (const l of chain) {
        if (held(l.chain_id) || this.q.layerInUse.get(l.chain_id, l.chain_id)) break;
        this.q.deleteLayer.run(l.chain_id);
        layers.push(l);
      }
      const freed = new Set([...blobs, ...layers.flatMap((l) => (l.blob ? [l.blob] : []))]);
      return { layers, blobs: [...freed].filter((b) => !held(b) && !this.blobHeld(b)) };
    })();
  }

  /**
   * Deletes every layer no image uses (a failed pull's, kept for reuse),
   * except those `held`, and returns them with the blobs nothing holds any more.
   */
  deleteUnusedLayers(held: Held = nothingHeld): { layers: LayerRow[]; blobs: string[] } {
    return this.db.transaction(() => {
      const layers: LayerRow[] = [];
      for (;;) {
        const unused = (this.q.unusedLayers.all() as LayerRow[]).filter((l) => !held(l.chain_id));
        if (unused.length === 0) break;
        for (const l of unused) {
          this.q.deleteLayer.run(l.chain_id);
          layers.push(l);
        }
      }
      const blobs = new Set(layers.flatMap((l) => (l.blob ? [l.blob] : [])));
      return { layers, blobs: [...blobs].filter((b) => !held(b) && !this.blobHeld(b)) };
    })();
  }

  /** Every blob some image holds (or a layer is made from). */
  heldBlobs(): Set<string> {
    return new Set((this.q.heldBlobs.all() as { digest: string }[]).map((r) => r.digest));
  }

  /** The blobs an image holds (its manifests, config and layer blobs). */
  blobsOf(id: string): string[] {
    return (this.q.blobsOf.all(id) as { digest: string }[]).map((r) => r.digest);
  }

  /** True when some image holds this blob, or a layer is made from it. */
  blobHeld(digest: string): boolean {
    return this.q.blobHeld.get(digest, digest) !== undefined;
  }

  layerDirs(): Set<string> {
    return new Set((this.q.allLayerDirs.all() as { dir: string }[]).map((r) => r.dir));
  }

  containersUsing(id: string): { id: string; status: string }[] {
    return this.q.containersUsing.all(id) as { id: string; status: string }[];
  }

  containerCounts(): Map<string, number> {
    return new Map((this.q.containerCounts.all() as { image_id: string; n: number }[]).map((r) => [r.image_id, r.n]));
  }

  /** Bytes of every stored layer, each counted once (`/system/df`'s LayersSize). */
  layersSize(): number {
    return (this.q.layersSize.get() as { total: number }).total;
  }

  /** Per image, the bytes of its layers that other images have too (images sharing none are absent). */
  sharedSizes(): Map<string, number> {
    return new Map(
      (this.q.sharedSizes.all() as { image_id: string; shared: number }[]).map((r) => [r.image_id, r.shared]),
    );
  }

  transaction<T>(fn: () => T): T {
    return this.db.transaction(fn)();
  }
}
