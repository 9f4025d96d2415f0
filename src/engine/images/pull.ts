// Pulling an image: resolve the manifest, then for each layer download, verify
// and extract in one pass (bytes flow once: registry → digest check → content
// store file, and → gunzip → diff-id check → layer directory). The image is
// recorded in one transaction only after every layer is in place.
//
// Faults (docs/decisions/images.md, "Pulls facing faults"):
//   * Concurrent pulls share each layer's work (and the config's): one
//     download per blob. A pull whose client hangs up stops waiting at once;
//     the shared work stops when no pull waits for it any more.
//   * A layer that fails stops the pull from starting more, but the layers
//     already downloading finish: each verified layer is recorded on its own
//     (not an image: nothing lists it) and the next pull finds it there. The
//     pull then fails with the first error. prune, and the next start, remove
//     such layers if no image took them.
//   * While it runs, a pull holds its chains and blobs (holds.ts), so
//     that a removal or a failing pull of another image sharing them leaves them be.
import { Transform, type TransformCallback } from 'node:stream';
import { invalidParameter } from '../../errors.js';
import { SharedWork, type Report } from '../shared.js';
import type { ContentStore } from '../content/store.js';
import type { EventBus } from '../events.js';
import { chainIds, LayerStore } from '../layers/layer-store.js';
import { BLOCK } from '../layers/unpack.js';
import { Limiter } from '../limiter.js';
import { sharedConcat, type Extractor } from '../layers/extractor.js';
import type { AuthConfig } from '../registry/auth.js';
import type { Descriptor, RegistryClient, ResolvedManifest } from '../registry/client.js';
import type { Platform } from '../registry/manifest.js';
import type { ImageRepository, LayerRow } from '../store/images.js';
import { imageRowOf, parseImageConfig } from './config.js';
import { familiarString, normalizeTag, type Reference } from '../reference.js';
import type { Holds } from './holds.js';

/** One progress report; the API turns these into dockerd's JSON lines. */
export interface PullEvent {
  status: string;
  id?: string;
  /** True for per-layer messages (dockerd gives those a progressDetail). */
  layer?: boolean;
  current?: number;
  total?: number;
}

export interface PullOptions {
  /** Aborts the pull (its client hung up); shared work goes on while other pulls wait for it. */
  signal?: AbortSignal;
  /** The platform to take from an image index (default: this machine's). */
  platform?: Platform | undefined;
}

/** A layer of the image being pulled. */
interface LayerToPull {
  desc: Descriptor;
  diffId: string;
  chainId: string;
  /** The chain id of the layer below; null at the bottom. */
  parent: string | null;
  /** Its record, when a pull or commit has made it already. */
  known: LayerRow | undefined;
}

export interface PullDeps {
  repo: ImageRepository;
  layers: LayerStore;
  extractor: Extractor;
  content: ContentStore;
  registry: RegistryClient;
  events: EventBus;
  maxConcurrentDownloads: number;
  /** What the image service's removals and prune leave alone; shared with it. */
  held: Holds;
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

/** Pulls images into the store, for the image service (see the file comment). */
export class Puller {
  /** max-concurrent-downloads. */
  private readonly limiter: Limiter;
  /** Layers being pulled, by chain id, shared by the pulls that need them. */
  private readonly layerWork = new SharedWork<LayerRow, PullEvent>();
  /** Image configs being fetched, by digest. */
  private readonly configWork = new SharedWork<Buffer>();
  /** Chain ids of the layers downloading now (past the max-concurrent-downloads queue). */
  private readonly downloading = new Set<string>();

  constructor(private readonly deps: PullDeps) {
    this.limiter = new Limiter(deps.maxConcurrentDownloads);
  }

  /** `POST /images/create?fromImage=&tag=`. */
  async pull(
    fromImage: string,
    tag: string | undefined,
    auth: AuthConfig | undefined,
    emit: (e: PullEvent) => void,
    opts: PullOptions = {},
  ): Promise<void> {
    const { signal, platform } = opts;
    const ref = normalizeTag(fromImage, tag);
    const { repo, content } = this.deps;
    const resolved = await this.deps.registry.resolveManifest(ref, auth, { signal, ...(platform ? { platform } : {}) });
    emit({
      status: `Pulling from ${ref.familiar.includes('/') || ref.domain !== 'docker.io' ? ref.path : `library/${ref.familiar}`}`,
      id: ref.digest ?? ref.tag ?? 'latest',
    });

    const metaDigests = [...new Set([resolved.configDigest, resolved.manifestDigest, resolved.image.digest])];
    const holds = [this.deps.held.take([...metaDigests, ...resolved.layers.map((l) => l.digest)])];
    const release = () => {
      for (const r of holds) r();
    };
    let metadata: Promise<unknown> = Promise.resolve();
    try {
      const configBytes = await this.config(ref, resolved, auth, signal);
      const { config, diffIds } = parseImageConfig(configBytes);
      if (diffIds.length !== resolved.layers.length) {
        throw invalidParameter("layers from manifest don't match image configuration");
      }
      const chains = chainIds(diffIds);
      holds.push(this.deps.held.take(chains));
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
        if (!existing[i] && queued++ >= this.deps.maxConcurrentDownloads)
          emit({ status: 'Waiting', id: short(d.digest), layer: true });
      });

      // The manifests are stored (and fsync'd) while the layers download.
      metadata = Promise.all([
        content.put(resolved.manifestDigest, resolved.manifest),
        resolved.image.digest !== resolved.manifestDigest
          ? content.put(resolved.image.digest, resolved.image.bytes)
          : undefined,
      ]);
      metadata.catch(() => undefined); // awaited below, after the layers
      const layers = resolved.layers.map((desc, i) => ({
        desc,
        diffId: diffIds[i]!,
        chainId: chains[i]!,
        parent: chains[i - 1] ?? null,
        known: existing[i],
      }));
      const rows = await this.layers(ref, auth, layers, emit, signal);
      await metadata;
      repo.add({
        image: imageRowOf(imageId, configBytes, config, rows),
        layers: rows,
        blobs: [...new Set([...metaDigests, ...resolved.layers.map((l) => l.digest)])],
        tags: tagRef ? [tagRef] : [],
        repoDigests: [digestRef],
      });
      this.deps.events.publish('image', 'pull', familiarString(ref), { name: familiarString(ref) });
      emit({ status: `Digest: ${resolved.manifestDigest}` });
      const shown = familiarString(ref);
      emit({
        status:
          before === imageId
            ? `Status: Image is up to date for ${shown}`
            : `Status: Downloaded newer image for ${shown}`,
      });
    } catch (e) {
      // The config and manifests go unless an image or another pull holds them;
      // verified layers stay recorded for the next pull (see the file comment).
      release();
      await metadata.catch(() => undefined);
      for (const b of metaDigests) {
        if (!repo.blobHeld(b) && !this.deps.held.has(b)) await content.delete(b).catch(() => undefined);
      }
      throw e;
    } finally {
      release();
    }
  }

  /**
   * The image's layers, bottom first: those recorded already as they are, the
   * others pulled. After a failure, the layers that have not begun downloading
   * are left (other pulls may still want them) and those under way finish;
   * then it rejects with the first failure, or with the pull's abort reason.
   */
  private async layers(
    ref: Reference,
    auth: AuthConfig | undefined,
    layers: LayerToPull[],
    emit: (e: PullEvent) => void,
    signal: AbortSignal | undefined,
  ): Promise<LayerRow[]> {
    let failure: { error: unknown } | undefined;
    const leave = layers.map(() => new AbortController());
    const outcomes = await Promise.allSettled(
      layers.map(async (l, i): Promise<LayerRow> => {
        if (l.known) return l.known;
        const layerSignal = signal ? AbortSignal.any([signal, leave[i]!.signal]) : leave[i]!.signal;
        try {
          return await this.layer(ref, auth, l, emit, layerSignal);
        } catch (e) {
          if (!failure) {
            failure = { error: e };
            for (const [j, other] of layers.entries()) if (!this.downloading.has(other.chainId)) leave[j]!.abort(e);
          }
          throw e;
        }
      }),
    );
    if (signal?.aborted) throw signal.reason;
    if (failure) throw failure.error;
    return outcomes.map((o) => (o as PromiseFulfilledResult<LayerRow>).value);
  }

  /** The image config: from the store when it is there, else fetched (once for concurrent pulls) and stored. */
  private async config(
    ref: Reference,
    resolved: ResolvedManifest,
    auth: AuthConfig | undefined,
    signal: AbortSignal | undefined,
  ): Promise<Buffer> {
    const { content, registry } = this.deps;
    const desc = resolved.configDescriptor;
    if (await content.has(desc.digest)) return content.readBuffer(desc.digest);
    return this.configWork.run(
      desc.digest,
      async (s) => {
        const bytes = await registry.fetchConfig(ref, desc, auth, { signal: s });
        await content.put(desc.digest, bytes, { what: 'image config' });
        return bytes;
      },
      { signal },
    );
  }

  /** One layer, pulled once for every pull that needs it now; its progress goes to each. */
  private layer(
    ref: Reference,
    auth: AuthConfig | undefined,
    l: LayerToPull,
    emit: (e: PullEvent) => void,
    signal: AbortSignal,
  ): Promise<LayerRow> {
    const work = async (shared: AbortSignal, report: Report<PullEvent>) => {
      // A pull that waited for an aborted run of this chain may find it done by another since.
      const known = this.deps.repo.layer(l.chainId);
      if (known) return known;
      return this.limiter.run(async (downloaded) => {
        this.downloading.add(l.chainId);
        try {
          return await this.pullLayer(ref, auth, l, report, shared, downloaded);
        } finally {
          this.downloading.delete(l.chainId);
        }
      }, shared);
    };
    return this.layerWork.run(l.chainId, work, { signal, onProgress: emit });
  }

  private async pullLayer(
    ref: Reference,
    auth: AuthConfig | undefined,
    l: LayerToPull,
    emit: Report<PullEvent>,
    signal: AbortSignal,
    downloaded: () => void,
  ): Promise<LayerRow> {
    const { desc, diffId, chainId, parent } = l;
    const id = short(desc.digest);
    const size = await this.deps.layers.extract(chainId, (dir) =>
      this.fill(ref, auth, desc, diffId, dir, emit, signal, downloaded),
    );
    const row: LayerRow = {
      chain_id: chainId,
      diff_id: diffId,
      parent,
      dir: LayerStore.dirName(chainId),
      size,
      blob: desc.digest,
    };
    // Verified and in place: recorded at once, so that a pull that fails later keeps it for the next.
    this.deps.repo.addLayer(row);
    emit({ status: 'Pull complete', id, layer: true });
    return row;
  }

  /**
   * Downloads, verifies and extracts a layer blob into `dir`; resolves with
   * the layer's size. Calls `downloaded` once the blob is stored: the rest of
   * the extraction no longer takes a download's turn (max-concurrent-downloads
   * counts downloads, as dockerd's does).
   */
  private async fill(
    ref: Reference,
    auth: AuthConfig | undefined,
    desc: Descriptor,
    diffId: string,
    dir: string,
    emit: Report<PullEvent>,
    signal: AbortSignal,
    downloaded: () => void,
  ): Promise<number> {
    const id = short(desc.digest);
    const meter = new Meter((n) => emit({ status: 'Downloading', id, layer: true, current: n, total: desc.size }));
    // The meter's failure is the content store's pipeline's to report.
    meter.on('error', () => undefined);
    const extraction = this.deps.extractor.extract(dir, { mediaType: desc.mediaType, digest: true });
    // The content store writes the blob and feeds the same bytes to the tap
    // (an extraction thread: gunzip → diff-id hash → tree); it ends the tap
    // only once the blob is verified, and destroys it on any failure.
    const fetch = async () => {
      const body = await this.deps.registry.fetchBlob(ref, desc, auth, { signal });
      body.on('error', (e) => meter.destroy(e));
      // pipe() does not end the source when its destination stops early (too many bytes,
      // a bad digest, an abort): the response, and its connection, would stay open.
      meter.once('close', () => body.destroy());
      return body.pipe(meter);
    };
    const store = this.deps.content.ingest(desc.digest, desc.size, fetch, {
      tap: extraction.input,
      what: 'filesystem layer',
      signal,
    });
    store.then(downloaded, () => undefined); // a failure is handled below
    // Both settle: the store destroys the tap on any failure of its own, and reads on to the
    // end when the extraction fails first, so that its verdict on the bytes comes first (a
    // corrupted download is a verification failure, not a gzip error). When the extraction
    // fails, the store fails with its error.
    const [stored, extracted] = await Promise.allSettled([store, extraction.done]);
    if (stored.status === 'rejected') throw stored.reason;
    if (extracted.status === 'rejected') throw extracted.reason;
    const layer = extracted.value;
    emit({ status: 'Verifying Checksum', id, layer: true });
    emit({ status: 'Download complete', id, layer: true });
    if (layer.diffId !== diffId) {
      // The blob is what its digest says, but not the layer the config names: no use to anyone.
      if (!this.deps.repo.blobHeld(desc.digest)) await this.deps.content.delete(desc.digest).catch(() => undefined);
      throw invalidParameter(
        `layers from manifest don't match image configuration: layer ${desc.digest} has diff id ${layer.diffId}, config says ${diffId}`,
      );
    }
    emit({ status: 'Extracting', id, layer: true, current: desc.size, total: desc.size });
    return layer.size;
  }
}
