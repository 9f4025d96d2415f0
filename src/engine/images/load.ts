// `docker load`: images from an archive of `docker save` — dockerd 20.10's
// (manifest.json with <id>/layer.tar files, symlinks for repeated layers),
// Docker 25's (manifest.json beside an OCI layout) or an OCI layout alone
// (index.json, as skopeo's oci-archive writes it).
//
// An archive lists its metadata last (manifest.json sorts after the layers),
// so every file goes into the content store as it streams by (hashed on the
// way: its digest is its name there) and, when its first bytes are a tar's or
// gzip's, is extracted at the same time into a staged tree, its diff id
// computed on the way: the bytes are read once. Then the metadata says which
// files are configs and layers; a new layer whose staged tree has the diff id
// its config names is moved into place, any other is extracted again from its
// stored blob (and refused if it is not that diff id). The blob stays as the
// layer's (push and save send it again); files and trees nothing took go.
//
// A hostile archive gets what a hostile registry gets: names that leave the
// archive, links that do, metadata that is a link, a `blobs/<alg>/<hex>` whose
// bytes are not that digest, a layer that is not the diff id its config says
// — each refused with a clear error. An image is recorded, in one transaction,
// only when all its layers are in place; nothing half-loaded is listed.
import path from 'node:path';
import { PassThrough, type Readable, type Writable } from 'node:stream';
import * as tarStream from 'tar-stream';
import { invalidParameter, messageOf } from '../../errors.js';
import type { ContentStore } from '../content/store.js';
import type { EventBus } from '../events.js';
import { decompressUpload } from '../layers/compression.js';
import type { Extraction, Extractor } from '../layers/extractor.js';
import { chainIds, LayerStore, type StagedLayer } from '../layers/layer-store.js';
import { sniffMediaType, storedLayerMediaType } from '../layers/unpack.js';
import { familiarString, parseReference } from '../reference.js';
import { hostPlatform, MediaTypes, parseManifest, selectManifest } from '../registry/manifest.js';
import type { ImageRepository, LayerRow } from '../store/images.js';
import {
  ANNOTATION_IMAGE_NAME,
  ANNOTATION_REF_NAME,
  type ArchiveManifestEntry,
  blobPath,
  INDEX_FILE,
  MANIFEST_FILE,
} from './archive-layout.js';
import { imageRowOf, parseImageConfig } from './config.js';
import type { Holds } from './holds.js';
import type { PullEvent } from './pull.js';

export interface LoadDeps {
  repo: ImageRepository;
  content: ContentStore;
  layers: LayerStore;
  extractor: Extractor;
  events: EventBus;
  held: Holds;
}

/** A progress report (as a pull's), or a line of text for the client (`Loaded image: …`). */
export type LoadEvent = PullEvent | { stream: string };

/** A file of the archive, stored. */
interface StoredFile {
  digest: string;
  size: number;
}

/** A file's content extracted while it was stored; taken by the layer it turns out to be, or discarded. */
interface StagedTree {
  staged: StagedLayer;
  diffId: string;
  size: number;
}

/** One image the archive's metadata names. */
interface ImageToLoad {
  config: StoredFile;
  layers: StoredFile[];
  /** Full `name:tag` references. */
  tags: string[];
}

/** Symlinks followed at most this deep (dockerd 20.10 links a repeated layer.tar to the first). */
const MAX_LINK_HOPS = 8;

const short = (digest: string) => digest.replace(/^sha256:/, '').slice(0, 12);

/** The archive as read: its files by name, its symlinks, and what it added to the store. */
class ArchiveContents {
  readonly files = new Map<string, StoredFile>();
  readonly links = new Map<string, string>();
  /** Digests the archive's files brought into the store (removed at the end unless an image took them). */
  readonly added = new Set<string>();
  /** Trees extracted as the files streamed by, by blob digest (see the file comment). */
  readonly trees = new Map<string, StagedTree>();

  /** A metadata file: must be a regular file of the archive, never a link. */
  metadata(name: string): StoredFile | undefined {
    if (this.links.has(name)) throw invalidParameter(`invalid archive: ${name} is a symbolic link`);
    return this.files.get(name);
  }

  /** The file `ref` names (a path in the archive), following the archive's own symlinks. */
  file(ref: string): StoredFile {
    let name = archivePath(ref);
    for (let hops = 0; hops <= MAX_LINK_HOPS; hops++) {
      const file = this.files.get(name);
      if (file) return file;
      const target = this.links.get(name);
      if (target === undefined) throw invalidParameter(`invalid archive: no file ${ref}`);
      name = target;
    }
    throw invalidParameter(`invalid archive: too many levels of symbolic links at ${ref}`);
  }

  /** A blob of the OCI layout: its file must have the digest (and size) it is named by. */
  blob(d: { digest?: string; size?: number }): StoredFile {
    if (typeof d.digest !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(d.digest))
      throw invalidParameter(`invalid archive: descriptor digest ${String(d.digest)}`);
    const file = this.file(blobPath(d.digest));
    if (file.digest !== d.digest)
      throw invalidParameter(`invalid archive: ${blobPath(d.digest)} has digest ${file.digest}`);
    if (d.size !== undefined && file.size !== d.size)
      throw invalidParameter(
        `invalid archive: ${blobPath(d.digest)} is ${file.size} bytes, its descriptor says ${d.size}`,
      );
    return file;
  }
}

/**
 * A name in the archive as a clean relative path. Absolute names and names
 * that climb out with `..` are refused: a loader that honoured them would
 * read or write wherever they point.
 */
function archivePath(name: string): string {
  if (name.startsWith('/') || name.includes('\0'))
    throw invalidParameter(`invalid archive: entry name ${JSON.stringify(name)}`);
  const clean = path.posix.normalize(name).replace(/\/+$/, '');
  if (clean === '..' || clean.startsWith('../'))
    throw invalidParameter(`invalid archive: entry name ${JSON.stringify(name)} leaves the archive`);
  return clean === '.' ? '' : clean;
}

/** Where a symlink in the archive points, as an archive path (never outside it). */
function linkTarget(name: string, target: string): string {
  if (target.startsWith('/')) throw invalidParameter(`invalid archive: ${name} links to an absolute path`);
  return archivePath(path.posix.join(path.posix.dirname(name), target));
}

export class Loader {
  constructor(private readonly deps: LoadDeps) {}

  /** `POST /images/load`: reads the archive from `input`, reporting through `emit`. */
  async load(input: Readable, emit: (e: LoadEvent) => void): Promise<void> {
    const contents = new ArchiveContents();
    const releases: (() => void)[] = [];
    try {
      await this.read(input, contents, releases);
      const images = await this.images(contents);
      if (!images.length) throw invalidParameter('invalid archive: it names no image');
      for (const image of images) await this.loadImage(image, contents, emit, releases);
    } finally {
      for (const r of releases) r();
      await this.dropUnused(contents);
    }
  }

  /** Pass one: every file into the content store, every symlink noted. */
  private async read(received: Readable, contents: ArchiveContents, releases: (() => void)[]): Promise<void> {
    const { held } = this.deps;
    const extract = tarStream.extract();
    let inputError: unknown;
    received.once('error', (e) => {
      inputError = e;
      extract.destroy(e);
    });
    // dockerd's DecompressStream: docker save | gzip (or bzip2, xz) loads as the tar itself.
    const upload = await decompressUpload(received);
    const input = upload.plain;
    if (input !== received)
      input.once('error', (e) => extract.destroy(invalidParameter(`invalid archive: ${messageOf(e)}`, e)));
    input.pipe(extract as unknown as NodeJS.WritableStream);
    try {
      for await (const entry of extract) {
        const h = entry.header;
        const name = archivePath(h.name);
        if (h.type === 'file' || h.type === 'contiguous-file') {
          const { stored, tree } = await this.storeFile(entry as AsyncIterable<Buffer>, h.size ?? 0);
          releases.push(held.take([stored.digest]));
          if (stored.created) contents.added.add(stored.digest);
          contents.files.set(name, { digest: stored.digest, size: stored.size });
          contents.links.delete(name);
          if (tree && !contents.trees.has(stored.digest)) contents.trees.set(stored.digest, tree);
          else if (tree) await tree.staged.discard();
        } else if (h.type === 'symlink') {
          contents.links.set(name, linkTarget(name, h.linkname ?? ''));
          contents.files.delete(name);
          entry.resume();
        } else if (h.type === 'directory') {
          entry.resume();
        } else {
          throw invalidParameter(`invalid archive: ${name} is a ${h.type}, not a file, directory or symlink`);
        }
      }
    } catch (e) {
      input.unpipe(extract as unknown as NodeJS.WritableStream);
      extract.destroy();
      if (inputError) throw inputError;
      // The rest of the upload is read and dropped, so that the client, still sending, reads the answer.
      await upload.discard();
      if ((e as { kind?: unknown }).kind) throw e;
      throw invalidParameter(`invalid archive: ${messageOf(e)}`);
    }
  }

  /**
   * One file of the archive into the content store; a file that starts as a
   * tar or gzip does is extracted on the way too (a tree, or nothing when the
   * extraction fails: the file may be no layer at all).
   */
  private async storeFile(
    entry: AsyncIterable<Buffer>,
    size: number,
  ): Promise<{ stored: { digest: string; size: number; created: boolean }; tree?: StagedTree }> {
    const toStore = new PassThrough({ highWaterMark: 1 << 20 });
    const stored = this.deps.content.create(toStore);
    stored.catch(() => undefined); // awaited below
    let tap: { staged: StagedLayer; job: Extraction } | undefined;
    let head: Buffer | undefined = Buffer.alloc(0);
    try {
      for await (const chunk of entry) {
        let data = chunk;
        if (head) {
          head = Buffer.concat([head, chunk]);
          if (head.length < TAR_HEADER && head.length < size) continue;
          data = head;
          head = undefined;
          tap = await this.tapFor(data);
        }
        await Promise.all([writeTo(toStore, data), tap ? writeTo(tap.job.input, data) : undefined]);
      }
      if (head?.length) await writeTo(toStore, head);
      toStore.end();
      tap?.job.input.end();
      const result = await stored;
      return { stored: result, tree: tap && (await this.treeOf(tap)) };
    } catch (e) {
      toStore.destroy();
      tap?.job.input.destroy();
      if (tap) await this.treeOf(tap);
      throw e;
    }
  }

  /** An extraction for content whose first bytes are `head`, when they look like a layer's. */
  private async tapFor(head: Buffer): Promise<{ staged: StagedLayer; job: Extraction } | undefined> {
    const gzip = head[0] === 0x1f && head[1] === 0x8b;
    const tar = head.length >= TAR_HEADER && head.toString('latin1', 257, 262) === 'ustar';
    if (!gzip && !tar) return undefined;
    const staged = await this.deps.layers.stage('load');
    const job = this.deps.extractor.extract(staged.diffDir, { mediaType: sniffMediaType(head), digest: true });
    return { staged, job };
  }

  /** The tree a tap made, or undefined (and the tree discarded) when its extraction failed. */
  private async treeOf(tap: { staged: StagedLayer; job: Extraction }): Promise<StagedTree | undefined> {
    try {
      const layer = await tap.job.done;
      if (layer.diffId) return { staged: tap.staged, diffId: layer.diffId, size: layer.size };
    } catch {
      // not a layer after all, or a broken one: if a config names it, it is extracted again and refused then
    }
    await tap.staged.discard();
    return undefined;
  }

  /** Pass two: what the metadata says the images are (manifest.json first, as dockerd reads it). */
  private async images(contents: ArchiveContents): Promise<ImageToLoad[]> {
    const manifest = contents.metadata(MANIFEST_FILE);
    if (manifest) return this.fromManifestJson(contents, manifest);
    const index = contents.metadata(INDEX_FILE);
    if (index) return this.fromIndex(contents, index);
    throw invalidParameter(
      'invalid archive: it has neither manifest.json nor index.json (the pre-1.10 format is not supported)',
    );
  }

  private async readJson<T>(file: StoredFile, what: string): Promise<T> {
    const bytes = await this.deps.content.readBuffer(file.digest);
    try {
      return JSON.parse(bytes.toString('utf8')) as T;
    } catch (e) {
      throw invalidParameter(`invalid archive: ${what}: ${messageOf(e)}`);
    }
  }

  private async fromManifestJson(contents: ArchiveContents, file: StoredFile): Promise<ImageToLoad[]> {
    const entries = await this.readJson<ArchiveManifestEntry[]>(file, MANIFEST_FILE);
    if (!Array.isArray(entries)) throw invalidParameter('invalid archive: manifest.json is not a list');
    return entries.map((e) => {
      if (typeof e?.Config !== 'string' || !Array.isArray(e.Layers))
        throw invalidParameter('invalid archive: a manifest.json entry lacks Config or Layers');
      return {
        config: namedFile(contents, e.Config),
        layers: e.Layers.map((l) => namedFile(contents, String(l))),
        tags: (Array.isArray(e.RepoTags) ? e.RepoTags : []).map((t) => fullTag(String(t))),
      };
    });
  }

  /** An OCI layout alone: each index entry (a nested index gives its entry for this machine's platform). */
  private async fromIndex(contents: ArchiveContents, file: StoredFile): Promise<ImageToLoad[]> {
    const byManifest = new Map<string, ImageToLoad>();
    const doc = async (f: StoredFile, mediaType?: string) =>
      parseManifest(await this.deps.content.readBuffer(f.digest), mediaType);
    const top = await doc(file, MediaTypes.ociIndex);
    if (top.kind !== 'index') throw invalidParameter('invalid archive: index.json is not an image index');
    for (const entry of top.index.manifests) {
      const tag = indexTag(entry.annotations);
      let d = entry;
      let m = await doc(contents.blob(d), d.mediaType);
      for (let depth = 0; m.kind === 'index'; depth++) {
        if (depth >= 4) throw invalidParameter('invalid archive: indexes nested too deep');
        d = selectManifest(m.index, hostPlatform());
        m = await doc(contents.blob(d), d.mediaType);
      }
      const image = byManifest.get(d.digest) ?? {
        config: contents.blob(m.manifest.config),
        layers: m.manifest.layers.map((l) => contents.blob(l)),
        tags: [],
      };
      if (tag && !image.tags.includes(tag)) image.tags.push(tag);
      byManifest.set(d.digest, image);
    }
    return [...byManifest.values()];
  }

  /** One image: its new layers extracted from their blobs, then the image and its tags recorded together. */
  private async loadImage(
    image: ImageToLoad,
    contents: ArchiveContents,
    emit: (e: LoadEvent) => void,
    releases: (() => void)[],
  ): Promise<void> {
    const { repo, events, held } = this.deps;
    const configBytes = await this.deps.content.readBuffer(image.config.digest);
    const { config, diffIds } = parseImageConfig(configBytes, image.config.digest);
    if (diffIds.length !== image.layers.length)
      throw invalidParameter(
        `invalid manifest, layers length mismatch: expected ${diffIds.length}, got ${image.layers.length}`,
      );
    const chains = chainIds(diffIds);
    releases.push(held.take(chains));
    const rows: LayerRow[] = [];
    for (const [i, blob] of image.layers.entries()) {
      const chainId = chains[i]!;
      const known = repo.layer(chainId);
      if (known) {
        rows.push(known);
        continue;
      }
      const tree = contents.trees.get(blob.digest);
      let size: number;
      if (tree && tree.diffId === diffIds[i]) {
        contents.trees.delete(blob.digest);
        await this.deps.layers.adopt(chainId, tree.staged, Promise.resolve());
        size = tree.size;
        emit({ status: 'Loading layer', id: short(chainId), layer: true, current: blob.size, total: blob.size });
      } else {
        size = await this.deps.layers.extract(chainId, (dir) =>
          this.unpack(blob, diffIds[i]!, i, dir, (current) =>
            emit({ status: 'Loading layer', id: short(chainId), layer: true, current, total: blob.size }),
          ),
        );
      }
      const row = {
        chain_id: chainId,
        diff_id: diffIds[i]!,
        parent: chains[i - 1] ?? null,
        dir: LayerStore.dirName(chainId),
        size,
        blob: blob.digest,
      };
      repo.addLayer(row);
      rows.push(row);
    }
    const id = image.config.digest;
    const renamed = image.tags.flatMap((t) => {
      const before = repo.imageForTag(t);
      return before && before !== id ? [[t, before] as const] : [];
    });
    repo.add({
      image: imageRowOf(id, configBytes, config, rows),
      layers: rows,
      blobs: [id],
      tags: image.tags,
      repoDigests: [],
    });
    events.publish('image', 'load', id, { name: id });
    for (const [t, before] of renamed)
      emit({
        stream: `The image ${familiarString(parseReference(t))} already exists, renaming the old one with ID ${before} to empty string\n`,
      });
    if (!image.tags.length) emit({ stream: `Loaded image ID: ${id}\n` });
    for (const t of image.tags) emit({ stream: `Loaded image: ${familiarString(parseReference(t))}\n` });
  }

  /** Extracts a stored layer blob into `dir`, checking its diff id; resolves with its size. */
  private async unpack(
    blob: StoredFile,
    diffId: string,
    index: number,
    dir: string,
    progress: (bytes: number) => void,
  ): Promise<number> {
    const { content, extractor } = this.deps;
    const mediaType = await storedLayerMediaType(content, blob.digest);
    let bytes = 0;
    let last = 0;
    const source = content.read(blob.digest);
    source.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes - last >= 1 << 20 || bytes === blob.size) {
        last = bytes;
        progress(bytes);
      }
    });
    const layer = await extractor.unpack(source, mediaType, dir);
    if (layer.diffId !== diffId)
      throw invalidParameter(`invalid diffID for layer ${index}: expected "${diffId}", got "${layer.diffId}"`);
    return layer.size;
  }

  /** Removes what the archive brought into the store that no image took (its metadata files, unused blobs). */
  private async dropUnused(contents: ArchiveContents): Promise<void> {
    const { repo, content, held } = this.deps;
    for (const tree of contents.trees.values()) await tree.staged.discard().catch(() => undefined);
    contents.trees.clear();
    for (const digest of contents.added) {
      if (!repo.blobHeld(digest) && !held.has(digest)) await content.delete(digest).catch(() => undefined);
    }
  }
}

/** One tar header block: enough of a file's start to tell a tar (its `ustar` magic) or a gzip. */
const TAR_HEADER = 512;

/** Writes with backpressure; resolves at once when `w` is gone (its own failure is reported elsewhere). */
function writeTo(w: Writable, chunk: Buffer): Promise<void> {
  if (w.destroyed || w.writableEnded) return Promise.resolve();
  if (w.write(chunk)) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      w.off('drain', done);
      w.off('close', done);
      resolve();
    };
    w.on('drain', done);
    w.on('close', done);
  });
}

/** A file manifest.json names; one under `blobs/<alg>/` must have that digest. */
function namedFile(contents: ArchiveContents, name: string): StoredFile {
  const file = contents.file(name);
  const m = /^blobs\/(sha256)\/([0-9a-f]{64})$/.exec(archivePath(name));
  if (m && file.digest !== `${m[1]}:${m[2]}`)
    throw invalidParameter(`invalid archive: ${name} has digest ${file.digest}`);
  return file;
}

/** A `RepoTags` entry as a full `name:tag` (a name alone means `latest`). */
function fullTag(t: string): string {
  const ref = parseReference(t);
  if (ref.digest) throw invalidParameter(`invalid archive: RepoTags entry ${t} has a digest`);
  return `${ref.name}:${ref.tag ?? 'latest'}`;
}

/** The tag an index entry gives: containerd's full name, or an OCI ref name that is a full reference. */
function indexTag(annotations: Record<string, string> | undefined): string | undefined {
  for (const key of [ANNOTATION_IMAGE_NAME, ANNOTATION_REF_NAME]) {
    const v = annotations?.[key];
    if (!v || !/[:/]/.test(v)) continue; // a bare "latest" names no repository
    try {
      const ref = parseReference(v);
      if (ref.tag && !ref.digest) return `${ref.name}:${ref.tag}`;
    } catch {
      // not a reference: the entry is loaded untagged
    }
  }
  return undefined;
}
