// `docker import`: an image of one layer from a root filesystem tar (plain,
// gzip, bzip2 or xz), sent as the request body or fetched from a URL, with a
// config made from the `changes` (Dockerfile instructions), as dockerd's ImportImage
// builds it. The tar is stored as the layer's blob as it arrives, then
// extracted from the store into a staged tree whose diff id decides its
// chain; the image is recorded only when the tree is in place.
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { VERSION } from '../../config.js';
import { invalidParameter, messageOf } from '../../errors.js';
import type { ContentStore } from '../content/store.js';
import type { EventBus } from '../events.js';
import { type ContainerConfigFields, dockerConfig, type ImageConfig } from '../images/config.js';
import { decompressUpload } from '../layers/compression.js';
import type { Extractor } from '../layers/extractor.js';
import { LayerStore } from '../layers/layer-store.js';
import { storedLayerMediaType } from '../layers/unpack.js';
import { hostPlatform, type Platform } from '../registry/manifest.js';
import type { ImageRepository, LayerRow } from '../store/images.js';
import { applyChanges } from './instructions.js';

export interface ImportRequest {
  /** The tar as the request body, or where to fetch it (`fromSrc`: http(s) URL, or a host[:port]/path taken as http). */
  source: Readable | string;
  /** The full reference to tag (see commitReference), if any. */
  target?: string;
  message?: string;
  changes?: string[];
  /** The image's platform (parsed by parsePlatform); the host's by default. */
  platform?: Platform | undefined;
}

export interface ImportDeps {
  repo: ImageRepository;
  layers: LayerStore;
  extractor: Extractor;
  content: ContentStore;
  events: EventBus;
}

/** Imports the tar; resolves with the new image's id. */
export async function importImage(deps: ImportDeps, req: ImportRequest): Promise<string> {
  const { repo, content, events } = deps;
  const platform: Platform = req.platform ?? hostPlatform();
  // dockerd's CheckOS: another architecture is only a label, another OS is refused.
  if (platform.os !== hostPlatform().os) throw invalidParameter('operating system is not supported');
  const config = applyChanges({}, req.changes ?? []);
  const source = typeof req.source === 'string' ? await download(req.source) : req.source;
  // As dockerd's DecompressStream: a bzip2 or xz tar is stored uncompressed; gzip is a layer blob as it is.
  const upload = await decompressUpload(source, ['gzip']);
  let blob: Awaited<ReturnType<ContentStore['create']>>;
  try {
    blob = await content.create(upload.plain);
  } catch (e) {
    await upload.discard();
    const decompressing = upload.compression === 'bzip2' || upload.compression === 'xz';
    throw decompressing ? invalidParameter(`invalid archive: ${messageOf(e)}`, e) : e;
  }
  let layer: LayerRow;
  try {
    layer = await installLayer(deps, blob.digest);
  } catch (e) {
    if (blob.created && !repo.blobHeld(blob.digest)) await content.delete(blob.digest).catch(() => undefined);
    throw e;
  }
  const created = new Date().toISOString();
  const imageConfig = importConfig(config, platform, created, layer.diff_id, req.message);
  const configBytes = Buffer.from(JSON.stringify(imageConfig));
  const id = `sha256:${createHash('sha256').update(configBytes).digest('hex')}`;
  await content.put(id, configBytes, { what: 'image config' });
  repo.add({
    image: { id, parent: '', config: configBytes.toString('utf8'), size: layer.size, created, added_at: Date.now() },
    layers: [layer],
    blobs: [id, blob.digest],
    tags: req.target ? [req.target] : [],
    repoDigests: [],
  });
  events.publish('image', 'import', id, { name: id });
  return id;
}

/** The layer of a stored tar: its tree extracted (or found, when the same content was imported before). */
async function installLayer(deps: ImportDeps, digest: string): Promise<LayerRow> {
  const { repo, layers, content, extractor } = deps;
  const staged = await layers.stage('import');
  let extracted: { diffId: string; size: number };
  try {
    extracted = await extractor.unpack(
      content.read(digest),
      await storedLayerMediaType(content, digest),
      staged.diffDir,
    );
  } catch (e) {
    await staged.discard();
    throw e;
  }
  const chainId = extracted.diffId;
  const known = repo.layer(chainId);
  if (known) {
    await staged.discard();
    return known;
  }
  await layers.adopt(chainId, staged, Promise.resolve());
  const row: LayerRow = {
    chain_id: chainId,
    diff_id: chainId,
    parent: null,
    dir: LayerStore.dirName(chainId),
    size: extracted.size,
    blob: digest,
  };
  repo.addLayer(row);
  return row;
}

/** dockerd's import config: the changes' config, the platform, one history entry with the message. */
function importConfig(
  config: ContainerConfigFields,
  platform: Platform,
  created: string,
  diffId: string,
  message: string | undefined,
): ImageConfig {
  return {
    ...(message ? { comment: message } : {}),
    created,
    docker_version: VERSION,
    config: dockerConfig(config),
    architecture: platform.architecture,
    ...(platform.variant ? { variant: platform.variant } : {}),
    os: platform.os,
    rootfs: { type: 'layers', diff_ids: [diffId] },
    history: [{ created, ...(message ? { comment: message } : {}) }],
  };
}

/** `fromSrc=<url>`: the body of a GET, as dockerd fetches it (a URL without a scheme is http). */
async function download(src: string): Promise<Readable> {
  const url = /^[a-z][a-z0-9+.-]*:\/\//i.test(src) ? src : `http://${src}`;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw invalidParameter(`invalid fromSrc URL: ${src}`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')
    throw invalidParameter(`fromSrc must be "-" or an http(s) URL, not ${src}`);
  let res: Response;
  try {
    res = await fetch(parsed, { redirect: 'follow' });
  } catch (e) {
    throw invalidParameter(`Get "${url}": ${messageOf((e as { cause?: unknown }).cause ?? e)}`);
  }
  if (!res.ok || !res.body) throw invalidParameter(`Get "${url}": HTTP ${res.status} ${res.statusText}`);
  return Readable.fromWeb(res.body as import('node:stream/web').ReadableStream);
}
