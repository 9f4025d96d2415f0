// Docker's image verbs over the store: find, list, inspect, history, tag, remove,
// prune, and pull (its work is in pull.ts).
import type { Readable } from 'node:stream';
import { conflict, invalidParameter, noSuchImage, notFound, systemError } from '../../errors.js';
import type { ContentStore } from '../content/store.js';
import { boolFilter, checkFilters, globMatch, matchLabels, parseUntil, type Filters } from '../filters.js';
import type { LayerStore } from '../layers/layer-store.js';
import { storedLayerMediaType } from '../layers/unpack.js';
import type { Extractor } from '../layers/extractor.js';
import type { ImageRepository, ImageRow, LayerRow } from '../store/images.js';
import type { Logger } from '../../log.js';
import type { EventBus } from '../events.js';
import type { AuthConfig } from '../registry/auth.js';
import type { RegistryClient } from '../registry/client.js';
import { createdSeconds, type ImageConfig } from './config.js';
import { familiarString, parseReference, type Reference } from '../reference.js';
import { Holds } from './holds.js';
import { type ImageManifest, imageManifests } from './manifests.js';
import { Loader, type LoadEvent } from './load.js';
import { Puller } from './pull.js';
import { Pusher } from './push.js';
import { inspectDistribution, type DistributionInspect } from './distribution.js';
import { searchImages, type SearchOptions } from './search.js';
import type { SearchResult } from '../registry/search.js';
import { imagesToSave, saveArchive, type SavedArchive } from './save.js';

export interface Image {
  id: string;
  parent: string;
  config: ImageConfig;
  size: number;
  created: string;
  /** Familiar forms: `busybox:latest`, `busybox@sha256:…`. */
  repoTags: string[];
  repoDigests: string[];
  containers: number;
  /** Bytes of its layers other images have too, when the list was asked to count them. */
  sharedSize?: number;
}

/** An image as inspect shows it. */
export interface ImageDetails extends Image {
  /** Its layer trees on disk, topmost first (overlay lowerdirs). */
  layerDirs: string[];
}

export interface HistoryItem {
  Id: string;
  Created: number;
  CreatedBy: string;
  Tags: string[] | null;
  Size: number;
  Comment: string;
}

export type DeleteItem = { Untagged: string } | { Deleted: string };

const shortId = (id: string) => id.replace(/^sha256:/, '').slice(0, 12);

/** `docker.io/library/busybox:latest` → `busybox:latest`. */
export const familiar = (fullRef: string): string => familiarString(parseReference(fullRef, { defaultTag: false }));

export interface ImageDeps {
  events: EventBus;
  repo: ImageRepository;
  layers: LayerStore;
  /** Fills layer trees, on threads of their own. */
  extractor: Extractor;
  content: ContentStore;
  registry: RegistryClient;
  maxConcurrentDownloads: number;
  logger: Logger;
}

export class ImageService {
  /** Chains and blobs that pulls under way use (see pull.ts). */
  private readonly held = new Holds();
  private readonly puller: Puller;
  private readonly pusher: Pusher;
  private readonly loader: Loader;

  constructor(private readonly deps: ImageDeps) {
    this.puller = new Puller({ ...deps, held: this.held });
    this.pusher = new Pusher({ ...deps, held: this.held });
    this.loader = new Loader({ ...deps, held: this.held });
  }

  /** `POST /auth` (docker login): the registry accepts these credentials. */
  async login(auth: AuthConfig): Promise<void> {
    await this.deps.registry.login(auth.serveraddress ?? '', auth);
  }

  /** `POST /images/create?fromImage=&tag=`: see pull.ts. */
  pull(...args: Parameters<Puller['pull']>): Promise<void> {
    return this.puller.pull(...args);
  }

  /** Which tags a push names; throws not-found for none (before the push's stream begins). */
  pushTargets(...args: Parameters<Pusher['targets']>): void {
    this.pusher.targets(...args);
  }

  /** `POST /images/{name}/push?tag=`: see push.ts. */
  push(...args: Parameters<Pusher['push']>): Promise<void> {
    return this.pusher.push(...args);
  }

  /** `GET /images/search`: the v1 search API of the term's registry, filtered as dockerd does. */
  search(opts: SearchOptions): Promise<SearchResult[]> {
    return searchImages(this.deps.registry, opts);
  }

  /** `GET /distribution/{name}/json`: asks the registry what the reference names. */
  distribution(name: string, auth: AuthConfig | undefined, signal?: AbortSignal): Promise<DistributionInspect> {
    return inspectDistribution(this.deps.registry, name, auth, signal);
  }

  /** `GET /images/get?names=…`: the archive of those images (see save.ts), streamed. */
  save(names: string[]): Promise<SavedArchive> {
    const images = imagesToSave(names, this.deps.repo, (n) => this.find(n));
    return saveArchive({ ...this.deps, held: this.held }, images);
  }

  /** `POST /images/load`: the images of an archive (see load.ts). */
  load(input: Readable, emit: (e: LoadEvent) => void): Promise<void> {
    return this.loader.load(input, emit);
  }

  /**
   * Resolves what a user typed: a full or short id, a name[:tag], or name@digest,
   * in dockerd's order (reference first, then id prefix).
   */
  find(refOrId: string): ImageRow {
    const { repo } = this.deps;
    const full = /^sha256:([0-9a-f]{64})$/.exec(refOrId);
    if (full) return repo.find(refOrId) ?? throwNoSuch(refOrId);
    let ref: Reference | undefined;
    try {
      ref = parseReference(refOrId);
    } catch {
      ref = undefined;
    }
    if (ref) {
      const id = ref.digest
        ? repo.imageForDigest(`${ref.name}@${ref.digest}`)
        : repo.imageForTag(`${ref.name}:${ref.tag}`);
      const row = id ? repo.find(id) : undefined;
      if (row) return row;
    }
    const prefix = /^(?:sha256:)?([0-9a-f]{1,64})$/.exec(refOrId)?.[1];
    if (prefix) {
      const rows = repo.findByPrefix(prefix);
      if (rows.length > 1) throw notFound(`Multiple IDs found with provided prefix: ${refOrId}`);
      if (rows[0]) return rows[0];
    }
    return throwNoSuch(refOrId);
  }

  private present(row: ImageRow, refs?: { tags: string[]; digests: string[] }, containers = 0): Image {
    const { repo } = this.deps;
    const tags = refs?.tags ?? repo.tagsOf(row.id);
    const digests = refs?.digests ?? repo.digestsOf(row.id);
    return {
      id: row.id,
      parent: row.parent,
      config: JSON.parse(row.config) as ImageConfig,
      size: row.size,
      created: row.created,
      repoTags: tags.map(familiar),
      repoDigests: digests.map(familiar),
      containers,
    };
  }

  inspect(refOrId: string): ImageDetails {
    const row = this.find(refOrId);
    return {
      ...this.present(row, undefined, this.deps.repo.containersUsing(row.id).length),
      layerDirs: this.layerDirs(row.id),
    };
  }

  /** The manifests an image was pulled with (`GET /images/json?manifests=1`); none for a commit. */
  manifests(imageId: string): Promise<ImageManifest[]> {
    return imageManifests(this.deps, this.find(imageId));
  }

  /** Where a layer's tree is on disk (an overlay lowerdir). */
  layerDir(l: LayerRow): string {
    return this.deps.layers.diffDir(l.dir);
  }

  /** Where the image's layer trees are on disk, topmost first (overlay lowerdirs); some may not be made yet. */
  layerDirs(imageId: string): string[] {
    return this.layersOf(imageId)
      .map((l) => this.layerDir(l))
      .reverse();
  }

  /**
   * The image's layer trees, topmost first (overlay lowerdirs), each made from
   * its blob first if it is not on disk: a commit records its image once the
   * blob is stored and fills the tree after (see commit/service.ts).
   */
  async readyLayerDirs(imageId: string): Promise<string[]> {
    const rows = this.layersOf(imageId);
    await Promise.all(rows.map((l) => this.ensureLayer(l)));
    return rows.map((l) => this.layerDir(l)).reverse();
  }

  /** Fills a layer's tree from its blob if it is not on disk yet. */
  ensureLayer(l: LayerRow): Promise<void> {
    const { layers, content, extractor } = this.deps;
    return layers.ensure(l.chain_id, async (dir) => {
      if (!l.blob) throw systemError(`layer ${l.chain_id} has no tree on disk and no blob to make it from`);
      await extractor.unpackBlob(content.read(l.blob), await storedLayerMediaType(content, l.blob), dir, l.diff_id);
    });
  }

  /** The chain of layer rows of an image, bottom first (for a container's rootfs). */
  layersOf(imageId: string): LayerRow[] {
    return this.deps.repo.layersOf(imageId);
  }

  /** Bytes of every stored layer, each counted once (`/system/df`). */
  layersSize(): number {
    return this.deps.repo.layersSize();
  }

  /** The images, as `GET /images/json` lists them; with `sharedSize`, each one's sharedSize counted. */
  list(opts: { all?: boolean; filters?: Filters; sharedSize?: boolean } = {}): Image[] {
    const filters = opts.filters ?? {};
    // `until` (API 1.44, unversioned in dockerd): created before that time.
    checkFilters(filters, ['dangling', 'label', 'reference', 'before', 'since', 'until']);
    const { repo } = this.deps;
    const dangling = boolFilter(filters, 'dangling');
    const before = filters.before?.[0] ? this.find(filters.before[0]) : undefined;
    const since = filters.since?.[0] ? this.find(filters.since[0]) : undefined;
    const untils = (filters.until ?? []).map(parseUntil);
    const rows = repo.list();
    // No image: the tags, digests and container counts are not read (`docker images` on a fresh daemon).
    if (!rows.length) return [];
    const refs = repo.refsByImage();
    const counts = repo.containerCounts();
    const shared = opts.sharedSize ? repo.sharedSizes() : undefined;
    const parents = new Set(rows.map((r) => r.parent).filter(Boolean));
    const out: Image[] = [];
    for (const row of rows) {
      const r = refs.get(row.id) ?? { tags: [], digests: [] };
      const untagged = r.tags.length === 0;
      // Without `all`, intermediate images (untagged parents of others) are hidden, as dockerd does.
      if (!opts.all && untagged && r.digests.length === 0 && parents.has(row.id)) continue;
      if (dangling === true && !untagged) continue;
      if (dangling === false && untagged) continue;
      let img = this.present(row, r, counts.get(row.id) ?? 0);
      if (shared) img.sharedSize = shared.get(row.id) ?? 0;
      if (!matchLabels(filters, img.config.config?.Labels)) continue;
      if (!untils.every((u) => createdBefore(img.config, u))) continue;
      if (before && !(row.created < before.created)) continue;
      if (since && !(row.created > since.created)) continue;
      if (filters.reference?.length) {
        // As dockerd: only the names that match are listed (`docker images -q name` prints one line).
        const match = (t: string) => filters.reference!.some((p) => matchesReference(p, [t]));
        img = { ...img, repoTags: img.repoTags.filter(match), repoDigests: img.repoDigests.filter(match) };
        if (!img.repoTags.length && !img.repoDigests.length) continue;
      }
      out.push(img);
    }
    return out;
  }

  history(refOrId: string): HistoryItem[] {
    const { repo } = this.deps;
    const start = this.find(refOrId);
    const cfg = JSON.parse(start.config) as ImageConfig;
    const layers = repo.layersOf(start.id);
    const tagsOf = (id: string) => nullIfEmpty(repo.tagsOf(id).map(familiar));
    if (!cfg.history?.length) {
      return [
        {
          Id: start.id,
          Created: createdSeconds(cfg.created),
          CreatedBy: '',
          Tags: tagsOf(start.id),
          Size: start.size,
          Comment: cfg.comment ?? '',
        },
      ];
    }
    // Non-empty history entries line up with the layers, bottom first.
    let li = 0;
    const sizes = cfg.history.map((h) => (h.empty_layer ? 0 : (layers[li++]?.size ?? 0)));
    // An image whose config has n entries owns entry n-1 (commit chains share the rest).
    const owners = new Map<number, ImageRow>();
    for (let row: ImageRow | undefined = start; row; row = row.parent ? repo.find(row.parent) : undefined) {
      const n = (JSON.parse(row.config) as ImageConfig).history?.length ?? 0;
      if (n > 0 && !owners.has(n - 1)) owners.set(n - 1, row);
    }
    return cfg.history
      .map((h, i) => {
        const owner = owners.get(i);
        return {
          Id: owner?.id ?? '<missing>',
          Created: createdSeconds(h.created),
          CreatedBy: h.created_by ?? '',
          Tags: owner ? tagsOf(owner.id) : null,
          Size: sizes[i] ?? 0,
          Comment: h.comment ?? '',
        };
      })
      .reverse();
  }

  /** `POST /images/{name}/tag?repo=&tag=`. */
  tag(source: string, repoName: string, tag?: string): void {
    const img = this.find(source);
    if (!repoName) throw invalidParameter('repository name must have at least one component');
    let ref = parseReference(repoName, { defaultTag: false });
    if (ref.digest) throw invalidParameter('refusing to create a tag with a digest reference');
    // `sha256:<tag>` would read as an id prefix ever after (dockerd's reference store refuses it).
    if (ref.familiar === 'sha256')
      throw invalidParameter('refusing to create an ambiguous tag using digest algorithm as name');
    if (tag) ref = parseReference(`${ref.name}:${tag}`);
    else if (!ref.tag) ref = parseReference(ref.name);
    this.deps.repo.setTag(`${ref.name}:${ref.tag}`, img.id);
    this.deps.events.publish('image', 'tag', img.id, { name: familiar(`${ref.name}:${ref.tag}`) });
  }

  /** `DELETE /images/{name}`: untag, and delete the image when nothing else names it. */
  async remove(refOrId: string, opts: { force?: boolean; noprune?: boolean } = {}): Promise<DeleteItem[]> {
    const out = await this.removeImage(refOrId, opts);
    this.announceUntags(out);
    return out;
  }

  private announceUntags(items: DeleteItem[]): void {
    for (const i of items)
      if ('Untagged' in i) this.deps.events.publish('image', 'untag', i.Untagged, { name: i.Untagged });
  }

  private async removeImage(refOrId: string, opts: { force?: boolean; noprune?: boolean }): Promise<DeleteItem[]> {
    const { repo } = this.deps;
    const row = this.find(refOrId);
    const tags = repo.tagsOf(row.id);
    const digests = repo.digestsOf(row.id);
    const users = repo.containersUsing(row.id);
    const running = users.find((c) => c.status === 'running' || c.status === 'paused' || c.status === 'restarting');
    const byName = !isIdLike(refOrId, row.id);
    const out: DeleteItem[] = [];

    if (byName) {
      const ref = parseReference(refOrId);
      const full = ref.digest ? `${ref.name}@${ref.digest}` : `${ref.name}:${ref.tag}`;
      // Several names, or a container using it: removing a name only untags.
      if (tags.length + digests.length > 1 || (users.length > 0 && !opts.force)) {
        if (!opts.force && users.length > 0 && isSingleReference(tags, digests)) {
          throw conflict(
            `conflict: unable to remove repository reference "${refOrId}" (must force) - container ${shortId(users[0]!.id)} is using its referenced image ${shortId(row.id)}`,
          );
        }
        if (ref.digest ? repo.deleteDigest(full) : repo.deleteTag(full)) out.push({ Untagged: familiar(full) });
        // dockerd drops the repo digests of a repository once its last tag there is gone.
        if (!ref.digest && !repo.tagsOf(row.id).some((t) => t.startsWith(`${ref.name}:`))) {
          for (const d of repo.digestsOf(row.id).filter((x) => x.startsWith(`${ref.name}@`))) {
            if (repo.deleteDigest(d)) out.push({ Untagged: familiar(d) });
          }
        }
        if (repo.tagsOf(row.id).length + repo.digestsOf(row.id).length > 0) return out;
        if (users.length > 0) return out; // keep the image for its containers
      }
    } else if (tags.length > 1 && !opts.force) {
      throw conflict(
        `conflict: unable to delete ${shortId(row.id)} (must be forced) - image is referenced in multiple repositories`,
      );
    }
    if (running) {
      throw conflict(
        `conflict: unable to delete ${shortId(row.id)} (cannot be forced) - image is being used by running container ${shortId(running.id)}`,
      );
    }
    if (users.length > 0 && !opts.force) {
      throw conflict(
        `conflict: unable to delete ${shortId(row.id)} (must be forced) - image is being used by stopped container ${shortId(users[0]!.id)}`,
      );
    }
    if (users.length > 0) {
      // Forced: dockerd deletes the image under its stopped containers. A container's image
      // is a record berth keeps (its rootfs is made of the image's layers), so the image
      // loses its names and stays, dangling, for its containers.
      for (const t of repo.tagsOf(row.id)) if (repo.deleteTag(t)) out.push({ Untagged: familiar(t) });
      for (const d of repo.digestsOf(row.id)) if (repo.deleteDigest(d)) out.push({ Untagged: familiar(d) });
      return out;
    }
    if (repo.children(row.id).length > 0) {
      // An image others were committed from stays as an untagged parent.
      for (const t of repo.tagsOf(row.id)) if (repo.deleteTag(t)) out.push({ Untagged: familiar(t) });
      return out;
    }
    for (const t of repo.tagsOf(row.id)) out.push({ Untagged: familiar(t) });
    for (const d of repo.digestsOf(row.id)) out.push({ Untagged: familiar(d) });
    await this.deleteImage(row.id, out);
    if (!opts.noprune && row.parent) await this.pruneParents(row.parent, out);
    return out;
  }

  private async deleteImage(id: string, out: DeleteItem[]): Promise<void> {
    const freed = this.deps.repo.deleteImage(id, this.held.has);
    out.push({ Deleted: id });
    this.deps.events.publish('image', 'delete', id, { name: id });
    await this.free(freed);
  }

  /** Removes the trees and files of layers and blobs whose records are gone. */
  private async free(freed: { layers: LayerRow[]; blobs: string[] }): Promise<void> {
    for (const l of freed.layers) await this.deps.layers.remove(l.dir);
    for (const b of freed.blobs) await this.deps.content.delete(b);
  }

  /** Deletes untagged, unused parents left behind (dockerd's prune-parents); with `since`, only those added since. */
  private async pruneParents(id: string, out: DeleteItem[], since = 0): Promise<void> {
    const { repo } = this.deps;
    for (let cur: string | undefined = id; cur; ) {
      const row = repo.find(cur);
      if (
        !row ||
        row.added_at < since ||
        repo.tagsOf(cur).length ||
        repo.digestsOf(cur).length ||
        repo.children(cur).length ||
        repo.containersUsing(cur).length
      )
        return;
      await this.deleteImage(cur, out);
      cur = row.parent || undefined;
    }
  }

  /**
   * Removes an image a build made only to hand its files to the client
   * (BuildKit's local and tar exporters make no image), and the parents made
   * with it: each one added since `since` (ms) that nothing names, uses or was
   * made from. An image that was there before (a cached result) stays.
   */
  async discardBuilt(imageId: string, since: number): Promise<void> {
    await this.pruneParents(imageId, [], since);
  }

  /** `POST /images/prune`: dangling images (or, with dangling=false, all unused ones). */
  async prune(filters: Filters = {}): Promise<{ ImagesDeleted: DeleteItem[] | null; SpaceReclaimed: number }> {
    checkFilters(filters, ['dangling', 'label', 'label!', 'until']);
    const onlyDangling = boolFilter(filters, 'dangling') ?? true;
    const until = filters.until?.[0] ? parseUntil(filters.until[0]) : undefined;
    const { repo } = this.deps;
    const deleted: DeleteItem[] = [];
    let reclaimed = 0;
    for (const row of repo.list()) {
      if (!repo.find(row.id)) continue; // went with an earlier one
      if (repo.containersUsing(row.id).length || repo.children(row.id).length) continue;
      const tagged = repo.tagsOf(row.id).length > 0;
      if (onlyDangling && tagged) continue;
      const cfg = JSON.parse(row.config) as ImageConfig;
      if (!matchLabels(filters, cfg.config?.Labels)) continue;
      if ((filters['label!'] ?? []).length && matchLabels({ label: filters['label!']! }, cfg.config?.Labels)) continue;
      if (until !== undefined && !createdBefore(cfg, until, true)) continue;
      for (const t of repo.tagsOf(row.id)) deleted.push({ Untagged: familiar(t) });
      for (const d of repo.digestsOf(row.id)) deleted.push({ Untagged: familiar(d) });
      await this.deleteImage(row.id, deleted);
      reclaimed += row.size;
    }
    // Verified layers that failed pulls kept for the next attempt, and no image took.
    const unused = repo.deleteUnusedLayers(this.held.has);
    await this.free(unused);
    reclaimed += unused.layers.reduce((a, l) => a + l.size, 0);
    this.announceUntags(deleted);
    return { ImagesDeleted: deleted.length ? deleted : null, SpaceReclaimed: reclaimed };
  }
}

function throwNoSuch(ref: string): never {
  throw noSuchImage(ref);
}

const nullIfEmpty = <T>(xs: T[]): T[] | null => (xs.length ? xs : null);

/**
 * dockerd's isSingleReference: at most one tag, and any digests of that same repository.
 * Removing such a name would leave the image of a container dangling, so it needs force.
 */
function isSingleReference(tags: string[], digests: string[]): boolean {
  if (tags.length + digests.length <= 1) return tags.length + digests.length === 1;
  if (tags.length > 1) return false;
  const repos = new Set(digests.map((d) => d.slice(0, d.indexOf('@'))));
  const name = tags[0] !== undefined ? tags[0].slice(0, tags[0].lastIndexOf(':')) : [...repos][0];
  return repos.size === 1 && repos.has(name!);
}

/** True when the user named the image by (a prefix of) its id rather than by a reference. */
function isIdLike(input: string, id: string): boolean {
  const hex = input.replace(/^sha256:/, '');
  return /^[0-9a-f]+$/.test(hex) && id.startsWith(`sha256:${hex}`);
}

/** dockerd's reference filter: the pattern matches the familiar name, or the whole name:tag or name@digest. */
function matchesReference(pattern: string, repoTags: string[]): boolean {
  return repoTags.some((t) => {
    const name = t.includes('@') ? t.slice(0, t.indexOf('@')) : t.replace(/:[^:/]+$/, '');
    return globMatch(pattern, t) || globMatch(pattern, name);
  });
}

/** dockerd's `until`: created before that time (list) or not after it (prune); an image with no time is neither. */
function createdBefore(config: ImageConfig, seconds: number, orAt = false): boolean {
  const t = config.created ? Date.parse(config.created) / 1000 : Number.NaN;
  return t < seconds || (orAt && t === seconds);
}
