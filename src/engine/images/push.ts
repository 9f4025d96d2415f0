// Pushing an image: `POST /images/{name}/push`.
//
// What goes up is what berth keeps: the compressed layer blobs as they were
// pulled (or as commit made them), byte for byte, so that a pulled image
// pushed elsewhere keeps its manifest digest. The manifest is the one pulled
// (Docker schema 2 or OCI, as it came) when it is stored with all its blobs;
// a committed image, which has none, gets a Docker schema 2 manifest made here.
//
// Per layer, as dockerd: HEAD in the target repository ("Layer already
// exists"); else a cross-repository mount from a repository of the same
// registry the blob is known to come from ("Mounted from …"); else an upload
// ("Pushing", "Pushed"). At most LIMITS.concurrentUploads at once ("Waiting").
// A registry that fails (5xx, 429) or a connection that breaks makes the
// blob start over after a back-off, up to LIMITS.attempts times.
import { setTimeout as sleep } from 'node:timers/promises';
import { Transform, type TransformCallback } from 'node:stream';
import { invalidParameter, notFound, systemError } from '../../errors.js';
import type { ContentStore } from '../content/store.js';
import { computeDigest } from '../content/store.js';
import type { EventBus } from '../events.js';
import { sniffMediaType } from '../layers/unpack.js';
import { Limiter } from '../limiter.js';
import { familiarName, familiarString, parseReference, withTag, type Reference } from '../reference.js';
import type { AuthConfig } from '../registry/auth.js';
import type { RegistryClient, RepositoryWriter } from '../registry/client.js';
import { formatPlatform, MediaTypes, samePlatform, type Platform } from '../registry/manifest.js';
import { blobExists, mountBlob, putManifest, retryable, uploadBlob } from '../registry/upload.js';
import type { ImageRepository } from '../store/images.js';
import type { Holds } from './holds.js';
import type { PullEvent } from './pull.js';

/** One progress report; the API turns these into dockerd's JSON lines (aux: the final {Tag, Digest, Size}). */
export interface PushEvent extends PullEvent {
  aux?: Record<string, unknown>;
}

export interface PushOptions {
  /** Aborts the push (its client hung up). */
  signal?: AbortSignal;
}

export interface PushDeps {
  repo: ImageRepository;
  content: ContentStore;
  registry: RegistryClient;
  events: EventBus;
  /** What image removals leave alone while a push reads it; shared with the image service. */
  held: Holds;
}

const LIMITS = {
  /** dockerd's max-concurrent-uploads default. */
  concurrentUploads: 5,
  /** dockerd's maxUploadAttempts. */
  attempts: 5,
  firstBackoffMs: 500,
  /** Repositories tried as mount sources per blob, and in all (each one is a scope in the token). */
  mountCandidates: 3,
  sources: 8,
  progressIntervalMs: 100,
} as const;
const DOCKER_LAYER = 'application/vnd.docker.image.rootfs.diff.tar';
const DOCKER_LAYER_GZIP = 'application/vnd.docker.image.rootfs.diff.tar.gzip';

const short = (digest: string) => digest.replace(/^sha256:/, '').slice(0, 12);

interface BlobDescriptor {
  mediaType: string;
  digest: string;
  size: number;
}

/** What one tag's push sends: the blobs, then the manifest. */
interface PushPlan {
  config: BlobDescriptor;
  layers: BlobDescriptor[];
  manifest: { mediaType: string; bytes: Buffer; digest: string };
}

interface ManifestShape {
  mediaType?: string;
  config?: { digest?: string };
  layers?: BlobDescriptor[];
}

/** Counts the bytes going through, reporting at most every LIMITS.progressIntervalMs. */
class Counter extends Transform {
  private bytes = 0;
  private last = 0;
  constructor(private readonly report: (bytes: number) => void) {
    super();
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    const now = Date.now();
    if (now - this.last >= LIMITS.progressIntervalMs) {
      this.last = now;
      this.report(this.bytes);
    }
    cb(null, chunk);
  }
}

export class Pusher {
  constructor(private readonly deps: PushDeps) {}

  /**
   * Which tags a push names: the one given, or every tag of the repository.
   * Throws not-found (before anything is streamed) when there is none.
   */
  targets(
    name: string,
    tag: string | undefined,
    platform?: Platform,
  ): { ref: Reference; tags: { ref: Reference; imageId: string }[] } {
    const found = this.tagsNamed(name, tag);
    // berth keeps one platform per image: a platform asked for is the image's, or there is nothing to push.
    for (const t of platform ? found.tags : []) {
      const row = this.deps.repo.find(t.imageId);
      const config = JSON.parse(row?.config ?? '{}') as Partial<Platform>;
      const own = { os: config.os ?? 'linux', architecture: config.architecture ?? 'amd64', variant: config.variant };
      if (!samePlatform(own, platform!)) {
        throw notFound(
          `image with reference ${familiarString(t.ref)} was found but does not provide the specified platform (${formatPlatform(platform!)})`,
        );
      }
    }
    return found;
  }

  private tagsNamed(
    name: string,
    tag: string | undefined,
  ): { ref: Reference; tags: { ref: Reference; imageId: string }[] } {
    let ref = parseReference(name, { defaultTag: false });
    if (tag) ref = withTag(ref, tag);
    if (ref.digest) throw invalidParameter('cannot push a digest reference');
    const repoName = { ...ref, tag: undefined };
    const all = this.deps.repo.tagsOfRepository(ref.name);
    if (all.length === 0) throw notFound(`An image does not exist locally with the tag: ${familiarName(ref)}`);
    if (!ref.tag) {
      return {
        ref: repoName,
        tags: all.map((t) => ({ ref: parseReference(t.ref), imageId: t.imageId })),
      };
    }
    const imageId = this.deps.repo.imageForTag(`${ref.name}:${ref.tag}`);
    if (!imageId) throw notFound(`tag does not exist: ${familiarString(ref)}`);
    return { ref: repoName, tags: [{ ref, imageId }] };
  }

  /** `POST /images/{name}/push?tag=`. */
  async push(
    what: { name: string; tag?: string | undefined; auth?: AuthConfig | undefined; platform?: Platform | undefined },
    emit: (e: PushEvent) => void,
    opts: PushOptions = {},
  ): Promise<void> {
    const { name, tag, auth, platform } = what;
    const { ref, tags } = this.targets(name, tag, platform);
    emit({ status: `The push refers to repository [${ref.name}]` });
    for (const t of tags) await this.pushTag(t.ref, t.imageId, auth, emit, opts.signal);
  }

  private async pushTag(
    ref: Reference,
    imageId: string,
    auth: AuthConfig | undefined,
    emit: (e: PushEvent) => void,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const { repo, held } = this.deps;
    const plan = await this.plan(imageId);
    const release = held.take([imageId, ...plan.layers.map((l) => l.digest)]);
    try {
      const sources = new Map(plan.layers.map((l) => [l.digest, this.mountSources(ref, l.digest)]));
      const mountFrom = [...new Set([...sources.values()].flat())].slice(0, LIMITS.sources);
      const writer = await this.deps.registry.writer(ref, auth, { signal, mountFrom });
      await this.pushLayers(writer, ref, plan.layers, sources, emit, signal);
      await this.pushConfig(writer, ref, plan.config, signal);
      const digest = await retrying(() => putManifest(writer, ref, ref.tag!, plan.manifest), signal);
      const size = plan.manifest.bytes.length;
      emit({ status: `${ref.tag}: digest: ${digest} size: ${size}` });
      emit({ status: '', aux: { Tag: ref.tag, Digest: digest, Size: size } });
      repo.addDigest(`${ref.name}@${digest}`, imageId);
      this.deps.events.publish('image', 'push', familiarString(ref), { name: familiarName(ref) });
    } finally {
      release();
    }
  }

  /** The layers, top first as dockerd lists them; each blob once, however often the image has it. */
  private async pushLayers(
    w: RepositoryWriter,
    ref: Reference,
    layers: BlobDescriptor[],
    sources: Map<string, string[]>,
    emit: (e: PushEvent) => void,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const unique = [...new Map([...layers].reverse().map((l) => [l.digest, l])).values()];
    for (const l of unique) emit({ status: 'Preparing', id: short(l.digest), layer: true });
    unique.forEach((l, i) => {
      if (i >= LIMITS.concurrentUploads) emit({ status: 'Waiting', id: short(l.digest), layer: true });
    });
    const limiter = new Limiter(LIMITS.concurrentUploads);
    const failed = new AbortController();
    const all = signal ? AbortSignal.any([signal, failed.signal]) : failed.signal;
    const jobs = unique.map((l) =>
      limiter
        .run(() => this.pushLayer(w, ref, l, sources.get(l.digest) ?? [], emit, all), all)
        .catch((e: unknown) => {
          failed.abort(e);
          throw e;
        }),
    );
    const outcomes = await Promise.allSettled(jobs);
    signal?.throwIfAborted();
    const first = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected');
    if (first) throw failed.signal.aborted ? failed.signal.reason : first.reason;
  }

  private async pushLayer(
    w: RepositoryWriter,
    ref: Reference,
    l: BlobDescriptor,
    sources: string[],
    emit: (e: PushEvent) => void,
    signal: AbortSignal,
  ): Promise<void> {
    const id = short(l.digest);
    const onRetry = (seconds: number) =>
      emit({ status: `Retrying in ${seconds} second${seconds === 1 ? '' : 's'}`, id, layer: true });
    await retrying(
      async () => {
        if (await blobExists(w, ref, l.digest)) {
          emit({ status: 'Layer already exists', id, layer: true });
          return;
        }
        let location: string | undefined;
        for (const from of sources) {
          const mounted = await mountBlob(w, ref, l.digest, from).catch(() => undefined);
          if (mounted === 'mounted') {
            emit({ status: `Mounted from ${from}`, id, layer: true });
            return;
          }
          if (mounted) {
            location = mounted.location;
            break;
          }
        }
        const report = (n: number) => emit({ status: 'Pushing', id, layer: true, current: n, total: l.size });
        await uploadBlob(w, ref, l, (start, end) => this.counted(l.digest, start, end, report), location);
        emit({ status: 'Pushed', id, layer: true });
      },
      signal,
      onRetry,
    );
  }

  /** Bytes [start, end) of a blob, with their progress (counted from the blob's start). */
  private counted(digest: string, start: number, end: number, report: (n: number) => void) {
    const counter = new Counter((n) => report(start + n));
    const source = this.deps.content.read(digest, { start, end });
    source.on('error', (e) => counter.destroy(e));
    return source.pipe(counter);
  }

  private async pushConfig(
    w: RepositoryWriter,
    ref: Reference,
    config: BlobDescriptor,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    await retrying(async () => {
      if (await blobExists(w, ref, config.digest)) return;
      await uploadBlob(w, ref, config, (start, end) => this.deps.content.read(config.digest, { start, end }));
    }, signal);
  }

  /**
   * The repositories of the same registry the blob is known in (the images
   * that have it, by their repo digests), the target's own excepted, nearest
   * path first (dockerd's likeness order).
   */
  private mountSources(target: Reference, digest: string): string[] {
    const paths = new Set<string>();
    for (const d of this.deps.repo.blobSources(digest)) {
      const source = parseReference(d);
      if (source.domain === target.domain && source.path !== target.path) paths.add(source.path);
    }
    const common = (p: string) => {
      const a = p.split('/');
      const b = target.path.split('/');
      let i = 0;
      while (i < a.length && i < b.length && a[i] === b[i]) i++;
      return i;
    };
    return [...paths].sort((a, b) => common(b) - common(a)).slice(0, LIMITS.mountCandidates);
  }

  // ---- what to push ---------------------------------------------------------------

  /** The stored manifest when the image has one with every blob, else a schema 2 manifest made for it. */
  private async plan(imageId: string): Promise<PushPlan> {
    const stored = await this.storedManifest(imageId);
    if (stored) return stored;
    return this.madeManifest(imageId);
  }

  private async storedManifest(imageId: string): Promise<PushPlan | undefined> {
    const { repo, content } = this.deps;
    const layerBlobs = new Set(repo.layersOf(imageId).flatMap((l) => (l.blob ? [l.blob] : [])));
    for (const digest of repo.blobsOf(imageId)) {
      if (digest === imageId || layerBlobs.has(digest)) continue;
      let bytes: Buffer;
      let doc: ManifestShape;
      try {
        bytes = await content.readBuffer(digest, 4 << 20);
        doc = JSON.parse(bytes.toString('utf8')) as ManifestShape;
      } catch {
        continue;
      }
      const layers = doc.layers;
      if (doc.config?.digest !== imageId || !Array.isArray(layers)) continue;
      const present = await Promise.all(layers.map((l) => content.has(l.digest)));
      if (!present.every(Boolean)) continue;
      const mediaType = doc.mediaType ?? MediaTypes.ociManifest;
      return { config: doc.config as BlobDescriptor, layers, manifest: { mediaType, bytes, digest } };
    }
    return undefined;
  }

  /** A Docker schema 2 manifest for an image berth made (commit): its layer blobs as stored. */
  private async madeManifest(imageId: string): Promise<PushPlan> {
    const { repo, content } = this.deps;
    const config = { mediaType: MediaTypes.dockerConfig, size: await content.size(imageId), digest: imageId };
    const layers: BlobDescriptor[] = [];
    for (const l of repo.layersOf(imageId)) {
      if (!l.blob || !(await content.has(l.blob))) {
        throw systemError(`layer ${l.diff_id} of image ${imageId} has no stored blob to push`);
      }
      layers.push({
        mediaType: dockerLayerType(await content.readHead(l.blob, 4)),
        size: await content.size(l.blob),
        digest: l.blob,
      });
    }
    const doc = { schemaVersion: 2, mediaType: MediaTypes.dockerManifest, config, layers };
    // Indented with three spaces, as distribution's schema2 builder writes it.
    const bytes = Buffer.from(JSON.stringify(doc, null, 3));
    return { config, layers, manifest: { mediaType: MediaTypes.dockerManifest, bytes, digest: computeDigest(bytes) } };
  }
}

/** A layer blob's Docker media type, from its first bytes (zstd has only an OCI one). */
function dockerLayerType(head: Buffer): string {
  const sniffed = sniffMediaType(head);
  if (sniffed.endsWith('+gzip')) return DOCKER_LAYER_GZIP;
  if (sniffed.endsWith('+zstd')) return sniffed;
  return DOCKER_LAYER;
}

/** Runs `fn` until it succeeds, retrying what is worth it after a doubling back-off. */
async function retrying<T>(
  fn: () => Promise<T>,
  signal: AbortSignal | undefined,
  onRetry?: (seconds: number) => void,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      if (signal?.aborted || attempt >= LIMITS.attempts || !retryable(e)) throw e;
      const delay = LIMITS.firstBackoffMs * 2 ** (attempt - 1);
      onRetry?.(Math.max(1, Math.round(delay / 1000)));
      await sleep(delay, undefined, signal ? { signal } : {});
    }
  }
}
