// An image's manifests as `GET /images/json?manifests=1` lists them (API 1.47).
// berth keeps one platform's image per pull: its manifest (and the index it
// was chosen from, when there was one) are among the blobs the image holds.
// A committed image has no manifest, so it lists none.
import type { ContentStore } from '../content/store.js';
import type { ImageRepository, ImageRow } from '../store/images.js';
import type { ImageConfig } from './config.js';

export interface Platform {
  architecture: string;
  os: string;
  variant?: string;
  'os.version'?: string;
}

/** One manifest of an image, in the terms of dockerd's ManifestSummary. */
export interface ImageManifest {
  /** As the index named it (with its platform), or as pulled by itself (size: the manifest's bytes). */
  descriptor: { mediaType: string; digest: string; size: number; platform?: Platform };
  /** The index entry's, else the image config's. */
  platform: Platform;
  /** Whether the config and every layer blob are in the content store. */
  available: boolean;
  /** Bytes of the manifest, config and layer blobs that are in the content store. */
  contentSize: number;
  /** Bytes of the unpacked layers. */
  unpackedSize: number;
  /** The containers made from it. */
  containers: string[];
}

interface Descriptor {
  mediaType?: string;
  digest?: string;
  platform?: Platform;
}

export interface ManifestDoc {
  mediaType?: string;
  config?: Descriptor;
  layers?: Descriptor[];
  manifests?: Descriptor[];
}

export interface ManifestDeps {
  repo: ImageRepository;
  content: ContentStore;
}

/** Reads a small blob as JSON; undefined when it is missing or not JSON. */
export async function readDoc(
  content: ContentStore,
  digest: string,
): Promise<{ doc: ManifestDoc; size: number } | undefined> {
  try {
    const buf = await content.readBuffer(digest, 4 * 1024 * 1024);
    return { doc: JSON.parse(buf.toString('utf8')) as ManifestDoc, size: buf.length };
  } catch {
    return undefined;
  }
}

const sizeIfPresent = (content: ContentStore, digest: string) => content.size(digest).catch(() => undefined);

export async function imageManifests(deps: ManifestDeps, row: ImageRow): Promise<ImageManifest[]> {
  const { repo, content } = deps;
  const layerBlobs = repo
    .layersOf(row.id)
    .map((l) => l.blob)
    .filter((b): b is string => !!b);
  // The config and layer blobs are not manifests; what else the image holds is read.
  const skip = new Set([row.id, ...layerBlobs]);
  const docs = new Map<string, { doc: ManifestDoc; size: number }>();
  for (const digest of repo.blobsOf(row.id).filter((b) => !skip.has(b))) {
    const d = await readDoc(content, digest);
    if (d) docs.set(digest, d);
  }
  const entries = [...docs.values()].flatMap((d) => d.doc.manifests ?? []);
  const config = JSON.parse(row.config) as ImageConfig;
  const out: ImageManifest[] = [];
  for (const [digest, { doc, size }] of docs) {
    if (doc.config?.digest !== row.id) continue;
    const sizes = await Promise.all([digest, row.id, ...layerBlobs].map((b) => sizeIfPresent(content, b)));
    const entry = entries.find((e) => e.digest === digest);
    out.push({
      descriptor: {
        mediaType: entry?.mediaType ?? doc.mediaType ?? '',
        digest,
        size,
        ...(entry?.platform ? { platform: entry.platform } : {}),
      },
      platform: entry?.platform ?? platformOf(config),
      available: sizes.every((s) => s !== undefined),
      contentSize: sizes.reduce<number>((a, s) => a + (s ?? 0), 0),
      unpackedSize: row.size,
      containers: repo.containersUsing(row.id).map((c) => c.id),
    });
  }
  return out;
}

function platformOf(c: ImageConfig): Platform {
  return {
    architecture: c.architecture ?? 'amd64',
    os: c.os ?? 'linux',
    ...(c['os.version'] ? { 'os.version': c['os.version'] } : {}),
    ...(c.variant ? { variant: c.variant } : {}),
  };
}
