// `docker save`: images as one tar (archive-layout.ts), streamed from the
// content store. Layers go as the blobs berth keeps (those a pull downloaded,
// byte for byte, or a commit's gzip), so nothing is recompressed or copied to
// a temp file; an image pulled with a manifest keeps that manifest, so its
// digest is the registry's. They are read straight into the writer's
// buffers and written to the connection (archive-writer.ts). Everything that can fail before the first byte
// (a missing image, a missing blob) fails before it: the client gets an error,
// not a broken archive.
import type { Writable } from 'node:stream';
import { noSuchImage, systemError } from '../../errors.js';
import type { ContentStore } from '../content/store.js';
import { computeDigest } from '../content/store.js';
import { storedLayerMediaType } from '../layers/unpack.js';
import { bodyPadding, encodeEntryHeader, endOfArchive, type EntryType } from '../layers/tarformat.js';
import { parseReference, type Reference } from '../reference.js';
import { type Descriptor, MediaTypes } from '../registry/manifest.js';
import type { ImageRepository, ImageRow } from '../store/images.js';
import {
  ANNOTATION_IMAGE_NAME,
  ANNOTATION_REF_NAME,
  type ArchiveManifestEntry,
  blobPath,
  INDEX_FILE,
  MANIFEST_FILE,
  OCI_LAYOUT,
  OCI_LAYOUT_FILE,
  REPOSITORIES_FILE,
} from './archive-layout.js';
import { ArchiveWriter } from './archive-writer.js';
import type { Holds } from './holds.js';
import { readDoc } from './manifests.js';

export interface SaveDeps {
  repo: ImageRepository;
  content: ContentStore;
  held: Holds;
}

/** An image to save and the tags (full `name:tag`) it is saved under. */
export interface ImageToSave {
  row: ImageRow;
  tags: string[];
}

/** A blob of the archive: from the store, or made here (a manifest berth writes). */
interface ArchiveBlob {
  digest: string;
  size: number;
  bytes?: Buffer;
}

interface PlannedImage {
  tags: Reference[];
  config: ArchiveBlob;
  layers: ArchiveBlob[];
  manifest: ArchiveBlob & { mediaType: string };
}

/**
 * What `names` ask for, as dockerd reads them: `name:tag` and `name@digest`
 * that image; a bare name every tag of that repository; an id the image with
 * no tags. Images named twice are saved once, with all their tags.
 */
export function imagesToSave(
  names: string[],
  repo: ImageRepository,
  find: (refOrId: string) => ImageRow,
): ImageToSave[] {
  const out = new Map<string, ImageToSave>();
  const add = (row: ImageRow, tag?: string) => {
    const entry = out.get(row.id) ?? { row, tags: [] };
    if (tag && !entry.tags.includes(tag)) entry.tags.push(tag);
    out.set(row.id, entry);
  };
  for (const name of names) {
    const ref = bareName(name);
    const tagged = ref ? repo.tagsOfRepository(ref.name) : [];
    if (tagged.length) {
      for (const t of tagged) add(repo.find(t.imageId) ?? find(t.imageId), t.ref);
      continue;
    }
    const row = find(name);
    const named = tryParse(name);
    const tag = named?.tag && !named.digest ? `${named.name}:${named.tag}` : undefined;
    add(row, tag && repo.imageForTag(tag) === row.id ? tag : undefined);
  }
  if (out.size === 0) throw noSuchImage(names.join(', '));
  return [...out.values()];
}

function tryParse(name: string): Reference | undefined {
  try {
    return parseReference(name, { defaultTag: false });
  } catch {
    return undefined;
  }
}

/** The reference when `name` is a repository alone (no tag, no digest). */
function bareName(name: string): Reference | undefined {
  const ref = tryParse(name);
  return ref && !ref.tag && !ref.digest ? ref : undefined;
}

/** An archive ready to go: everything that can fail before its first byte has been checked. */
export interface SavedArchive {
  /**
   * Writes the archive to `out` (not ended), waiting on each write (backpressure).
   * Rejects when a blob cannot be read or `out` closes; its blobs are held (a
   * removal meanwhile leaves them) until it settles.
   */
  writeTo(out: Writable): Promise<void>;
}

export async function saveArchive(deps: SaveDeps, images: ImageToSave[]): Promise<SavedArchive> {
  const planned = await Promise.all(images.map((i) => plan(deps, i)));
  const blobs = new Map<string, ArchiveBlob>();
  for (const p of planned) for (const b of [...p.layers, p.config, p.manifest]) blobs.set(b.digest, b);
  const release = deps.held.take(blobs.keys());
  return {
    writeTo: async (out) => {
      try {
        await writeEntries(deps.content, planned, [...blobs.values()], new ArchiveWriter(out));
      } finally {
        release();
      }
    },
  };
}

async function plan(deps: SaveDeps, image: ImageToSave): Promise<PlannedImage> {
  const { repo, content } = deps;
  const { row } = image;
  const stored = async (digest: string): Promise<ArchiveBlob> => {
    try {
      return { digest, size: await content.size(digest) };
    } catch {
      throw systemError(`image ${row.id} cannot be saved: its blob ${digest} is not in the content store`);
    }
  };
  const config: ArchiveBlob = (await content.has(row.id)) ? await stored(row.id) : configFromRow(row);
  const layers = await Promise.all(
    repo.layersOf(row.id).map((l) => {
      if (!l.blob) throw systemError(`image ${row.id} cannot be saved: layer ${l.diff_id} has no stored blob`);
      return stored(l.blob);
    }),
  );
  const manifest = (await pulledManifest(deps, row, layers)) ?? (await ociManifest(deps, config, layers));
  return { tags: image.tags.map((t) => parseReference(t)), config, layers, manifest };
}

/** The config as recorded, when its blob is not stored (its digest is the image id all the same). */
function configFromRow(row: ImageRow): ArchiveBlob {
  const bytes = Buffer.from(row.config, 'utf8');
  if (computeDigest(bytes) !== row.id) throw systemError(`image ${row.id} cannot be saved: its config is not stored`);
  return { digest: row.id, size: bytes.length, bytes };
}

/** The manifest the image was pulled with, when it names exactly these config and layer blobs. */
async function pulledManifest(
  deps: SaveDeps,
  row: ImageRow,
  layers: ArchiveBlob[],
): Promise<(ArchiveBlob & { mediaType: string }) | undefined> {
  for (const digest of deps.repo.blobsOf(row.id)) {
    if (digest === row.id || layers.some((l) => l.digest === digest)) continue;
    const d = await readDoc(deps.content, digest);
    const doc = d?.doc;
    if (!d || !doc?.config || doc.config.digest !== row.id || !doc.mediaType) continue;
    const named = (doc.layers ?? []).map((l) => l.digest);
    if (named.length !== layers.length || named.some((n, i) => n !== layers[i]!.digest)) continue;
    return { digest, size: d.size, mediaType: doc.mediaType };
  }
  return undefined;
}

/** An OCI manifest for an image that has none of its own (a commit, a load, an import). */
async function ociManifest(
  deps: SaveDeps,
  config: ArchiveBlob,
  layers: ArchiveBlob[],
): Promise<ArchiveBlob & { mediaType: string }> {
  const layerDescriptors = await Promise.all(
    layers.map(async (l) => ({
      mediaType: await storedLayerMediaType(deps.content, l.digest),
      digest: l.digest,
      size: l.size,
    })),
  );
  const bytes = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MediaTypes.ociManifest,
      config: { mediaType: MediaTypes.ociConfig, digest: config.digest, size: config.size },
      layers: layerDescriptors,
    }),
  );
  return { digest: computeDigest(bytes), size: bytes.length, bytes, mediaType: MediaTypes.ociManifest };
}

/** index.json: one entry per tag (Docker 25's annotations), one without a name for an untagged image. */
function indexJson(planned: PlannedImage[]): Buffer {
  const manifests: Descriptor[] = planned.flatMap((p) => {
    const base = { mediaType: p.manifest.mediaType, digest: p.manifest.digest, size: p.manifest.size };
    if (!p.tags.length) return [base];
    return p.tags.map((t) => ({
      ...base,
      annotations: { [ANNOTATION_IMAGE_NAME]: `${t.name}:${t.tag}`, [ANNOTATION_REF_NAME]: t.tag ?? 'latest' },
    }));
  });
  return json({ schemaVersion: 2, mediaType: MediaTypes.ociIndex, manifests });
}

/** manifest.json, which dockerd's load reads. */
function manifestJson(planned: PlannedImage[]): Buffer {
  const entries: ArchiveManifestEntry[] = planned.map((p) => ({
    Config: blobPath(p.config.digest),
    RepoTags: p.tags.length ? p.tags.map((t) => `${t.familiar}:${t.tag}`) : null,
    Layers: p.layers.map((l) => blobPath(l.digest)),
  }));
  return json(entries);
}

/** The legacy `repositories` file: familiar name → tag → top layer. */
function repositoriesJson(planned: PlannedImage[]): Buffer {
  const repos: Record<string, Record<string, string>> = {};
  for (const p of planned) {
    const top = p.layers.at(-1);
    if (!top) continue;
    for (const t of p.tags) {
      const tags = repos[t.familiar] ?? {};
      tags[t.tag ?? 'latest'] = top.digest.replace(/^sha256:/, '');
      repos[t.familiar] = tags;
    }
  }
  return json(repos);
}

const json = (v: unknown): Buffer => Buffer.from(`${JSON.stringify(v)}\n`);

async function writeEntries(
  content: ContentStore,
  planned: PlannedImage[],
  blobs: ArchiveBlob[],
  w: ArchiveWriter,
): Promise<void> {
  const mtime = Math.floor(Date.now() / 1000);
  const header = (name: string, type: EntryType, size: number) =>
    encodeEntryHeader({ name, type, mode: type === 'dir' ? 0o755 : 0o644, uid: 0, gid: 0, size, mtime });
  await w.append(header('blobs', 'dir', 0));
  await w.append(header('blobs/sha256', 'dir', 0));
  for (const b of blobs) {
    await w.append(header(blobPath(b.digest), 'file', b.size));
    if (b.bytes) await w.append(b.bytes);
    else {
      const fh = await content.openBlob(b.digest);
      try {
        await w.appendFile(fh, b.size, `blob ${b.digest}`);
      } finally {
        await fh.close();
      }
    }
    await w.append(bodyPadding(b.size));
  }
  const files: [string, Buffer][] = [
    [INDEX_FILE, indexJson(planned)],
    [MANIFEST_FILE, manifestJson(planned)],
    [OCI_LAYOUT_FILE, json(OCI_LAYOUT)],
    [REPOSITORIES_FILE, repositoriesJson(planned)],
  ];
  for (const [name, bytes] of files) {
    await w.append(header(name, 'file', bytes.length));
    await w.append(bytes);
    await w.append(bodyPadding(bytes.length));
  }
  await w.append(endOfArchive());
  await w.end();
}
