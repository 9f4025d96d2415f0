// Pulling an image: resolve the manifest, then for each layer download, verify
// and extract in one pass (bytes flow once: registry → digest check → content
// store file, and → gunzip → diff-id check → layer directory). The image is
// recorded in one transaction only after every layer is in place.
import { Transform, type TransformCallback } from 'node:stream';
import { invalidParameter, messageOf } from '../../errors.js';
import { chainIds, LayerStore } from '../layers/layers.js';
import { BLOCK } from '../layers/unpack.js';
import { Limiter } from '../limiter.js';
import { sharedConcat } from '../layers/extractor.js';
import type { AuthConfig } from '../registry/auth.js';
import type { Descriptor, RegistryClient } from '../registry/client.js';
import type { LayerRow } from '../store/images.js';
import { diffIdsOf, type ImageConfig } from './config.js';
import { familiarString, normalizeTag, type Reference } from './reference.js';
import { ImageService, type ImageDeps } from './service.js';

/** One progress report; the API turns these into dockerd's JSON lines. */
export interface PullEvent {
  status: string;
  id?: string;
  /** True for per-layer messages (dockerd gives those a progressDetail). */
  layer?: boolean;
  current?: number;
  total?: number;
}

export interface PullDeps extends ImageDeps {
  registry: RegistryClient;
  maxConcurrentDownloads: number;
}

const PROGRESS_INTERVAL_MS = 100;
const short = (digest: string) => digest.replace(/^sha256:/, '').slice(0, 12);

/**
 * Counts bytes going through, reporting at most every PROGRESS_INTERVAL_MS,
 * and passes them on in blocks of at least BLOCK bytes (the last one shorter).
 */
class Meter extends Transform {
  bytes = 0;
  private last = 0;
  private held: Buffer[] = [];
  private heldBytes = 0;
  constructor(private readonly report: (bytes: number) => void) {
    super({ highWaterMark: BLOCK });
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    const now = Date.now();
    if (now - this.last >= PROGRESS_INTERVAL_MS) {
      this.last = now;
      this.report(this.bytes);
    }
    this.held.push(chunk);
    this.heldBytes += chunk.length;
    if (this.heldBytes >= BLOCK) this.release();
    cb();
  }
  override _flush(cb: TransformCallback): void {
    if (this.heldBytes > 0) this.release();
    cb();
  }
  private release(): void {
    // In shared memory: the block goes on to an extraction thread (extractor.ts), which then needs no copy.
    this.push(sharedConcat(this.held, this.heldBytes));
    this.held = [];
    this.heldBytes = 0;
  }
}

export class PullingImageService extends ImageService {
  /** max-concurrent-downloads. */
  private readonly limiter: Limiter;

  constructor(private readonly pdeps: PullDeps) {
    super(pdeps);
    this.limiter = new Limiter(pdeps.maxConcurrentDownloads);
  }

  /** `POST /auth` (docker login): the registry accepts these credentials. */
  async login(auth: AuthConfig): Promise<void> {
    await this.pdeps.registry.login(auth.serveraddress ?? '', auth);
  }

  /** `POST /images/create?fromImage=&tag=`. */
  async pull(fromImage: string, tag: string | undefined, auth: AuthConfig | undefined, emit: (e: PullEvent) => void): Promise<void> {
    const ref = normalizeTag(fromImage, tag);
    const { registry, repo, content } = this.pdeps;
    const resolved = await registry.resolve(ref, auth);
    emit({ status: `Pulling from ${ref.familiar.includes('/') || ref.domain !== 'docker.io' ? ref.path : `library/${ref.familiar}`}`, id: ref.digest ?? ref.tag ?? 'latest' });

    const config = JSON.parse(resolved.config.toString('utf8')) as ImageConfig;
    let diffIds: string[];
    try {
      diffIds = diffIdsOf(config);
    } catch (e) {
      throw invalidParameter(`invalid image config: ${messageOf(e)}`);
    }
    if (diffIds.length !== resolved.layers.length) {
      throw invalidParameter("layers from manifest don't match image configuration");
    }
    const chains = chainIds(diffIds);
    const imageId = resolved.configDigest;
    const tagRef = ref.tag && !ref.digest ? `${ref.name}:${ref.tag}` : undefined;
    const digestRef = `${ref.name}@${resolved.manifestDigest}`;
    const before = tagRef ? repo.imageForTag(tagRef) : repo.imageForDigest(digestRef);

    const existing = chains.map((c) => repo.layer(c));
    resolved.layers.forEach((d, i) => {
      if (existing[i]) emit({ status: 'Already exists', id: short(d.digest), layer: true });
      else emit({ status: 'Pulling fs layer', id: short(d.digest), layer: true });
    });
    let queued = 0;
    resolved.layers.forEach((d, i) => {
      if (!existing[i] && queued++ >= this.pdeps.maxConcurrentDownloads) emit({ status: 'Waiting', id: short(d.digest), layer: true });
    });

    const fresh: LayerRow[] = [];
    const ingested: string[] = [];
    const metaDigests = [resolved.configDigest, resolved.manifestDigest, resolved.image.digest];
    let metadata: Promise<unknown> = Promise.resolve();
    try {
      // The config and manifests are stored (and fsync'd) while the layers download.
      metadata = Promise.all([
        content.put(resolved.configDigest, resolved.config),
        content.put(resolved.manifestDigest, resolved.manifest),
        resolved.image.digest !== resolved.manifestDigest ? content.put(resolved.image.digest, resolved.image.bytes) : undefined,
      ]);
      metadata.catch(() => undefined); // awaited below; a layer failure may come first
      const rows = await Promise.all(
        resolved.layers.map(async (desc, i): Promise<LayerRow> => {
          const known = existing[i];
          if (known) return known;
          const row = await this.limiter.run(() => this.pullLayer(ref, auth, desc, diffIds[i]!, chains[i]!, chains[i - 1] ?? null, emit));
          fresh.push(row);
          ingested.push(desc.digest);
          return row;
        }),
      );
      await metadata;
      repo.add({
        image: {
          id: imageId,
          parent: '',
          config: resolved.config.toString('utf8'),
          size: rows.reduce((a, r) => a + r.size, 0),
          created: config.created ?? new Date(0).toISOString(),
          added_at: Date.now(),
        },
        layers: rows,
        blobs: [...new Set([resolved.configDigest, resolved.manifestDigest, resolved.image.digest, ...resolved.layers.map((l) => l.digest)])],
        tags: tagRef ? [tagRef] : [],
        repoDigests: [digestRef],
      });
    } catch (e) {
      // Nothing of a failed pull stays: layers and blobs no image records go.
      for (const l of fresh) if (!repo.layer(l.chain_id)) await this.pdeps.layers.remove(l.dir);
      await metadata.catch(() => undefined);
      for (const b of new Set([...ingested, ...metaDigests])) {
        if (!repo.blobHeld(b)) await content.delete(b).catch(() => undefined);
      }
      throw e;
    }
    this.pdeps.events.publish('image', 'pull', familiarString(ref), { name: familiarString(ref) });
    emit({ status: `Digest: ${resolved.manifestDigest}` });
    const shown = familiarString(ref);
    emit({ status: before === imageId ? `Status: Image is up to date for ${shown}` : `Status: Downloaded newer image for ${shown}` });
  }

  private async pullLayer(
    ref: Reference,
    auth: AuthConfig | undefined,
    desc: Descriptor,
    diffId: string,
    chainId: string,
    parent: string | null,
    emit: (e: PullEvent) => void,
  ): Promise<LayerRow> {
    const id = short(desc.digest);
    const size = await this.pdeps.layers.extract(chainId, async (dir) => {
      const meter = new Meter((n) => emit({ status: 'Downloading', id, layer: true, current: n, total: desc.size }));
      const extraction = this.pdeps.extractor.extract(dir, { mediaType: desc.mediaType, digest: true });
      // The content store writes the blob and feeds the same bytes to the tap
      // (an extraction thread: gunzip → diff-id hash → tree); it ends the tap
      // only once the blob is verified, and destroys it on any failure.
      const fetch = async () => {
        const body = await this.pdeps.registry.fetchBlob(ref, desc, auth);
        body.once('error', (e) => meter.destroy(e));
        return body.pipe(meter);
      };
      const store = this.pdeps.content.ingest(desc.digest, desc.size, fetch, { tap: extraction.input, what: 'filesystem layer' });
      let layer;
      try {
        [, layer] = await Promise.all([store, extraction.done]);
      } catch (e) {
        for (const s of [meter, extraction.input]) s.destroy();
        await extraction.done.catch(() => undefined); // the thread has stopped writing before `dir` is removed
        throw e;
      }
      emit({ status: 'Verifying Checksum', id, layer: true });
      emit({ status: 'Download complete', id, layer: true });
      if (layer.diffId !== diffId) {
        throw invalidParameter(`layers from manifest don't match image configuration: layer ${desc.digest} has diff id ${layer.diffId}, config says ${diffId}`);
      }
      emit({ status: 'Extracting', id, layer: true, current: desc.size, total: desc.size });
      return layer.size;
    });
    emit({ status: 'Pull complete', id, layer: true });
    return { chain_id: chainId, diff_id: diffId, parent, dir: LayerStore.dirName(chainId), size, blob: desc.digest };
  }
}

