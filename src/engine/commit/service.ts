// `docker commit`, `docker diff` and `docker export`: a container's changes
// become a new image layer on top of its image.
//
// One pass over the container's upper directory makes the layer: its tar
// (diff.ts) goes through gzip into the content store, while the digests of
// both forms (diff id and blob digest) and the layer's size are computed on
// the way. The same bytes also fill the layer's tree on disk (on an extraction
// thread, extractor.ts), the overlay lowerdir that containers of the new image
// mount, through a buffer, so that the commit goes at the pace of reading and
// storing, not at that of creating thousands of files a second time. The image is recorded in one
// store transaction as soon as the blob is stored, and the answer goes back;
// the tree is installed when it is full, and whoever needs it first waits for
// it (ImageService.readyLayerDirs), or makes it from the blob if it is not
// there (after a crash). A crash before the record leaves temp files that the
// content and layer stores remove at the next start.
import { createHash } from 'node:crypto';
import { constants as C } from 'node:fs';
import { mkdir, mkdtemp, open, rmdir, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { PassThrough, type Readable } from 'node:stream';
import { hashSink } from '../os/sha256.js';
import { pipeline } from 'node:stream/promises';
import { VERSION } from '../../config.js';
import { conflict, invalidParameter, messageOf, systemError } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { Container } from '../containers/container.js';
import type { ContainerService } from '../containers/service.js';
import type { ContentStore } from '../content/store.js';
import type { EventBus } from '../events.js';
import { ParallelGzip } from '../layers/compress.js';
import { changes, diffLayer, mountPointStubs, type Change } from '../layers/diff.js';
import type { Extractor } from '../layers/extractor.js';
import { chainIds, discardWhenFilled, LayerStore, type StagedLayer } from '../layers/layer-store.js';
import { isMountPoint, mountOverlay, unmount } from '../os/mount.js';
import type { ImageRepository, ImageRow, LayerRow } from '../store/images.js';
import { goArch } from '../system.js';
import { type ContainerConfigFields, dockerConfig, type HistoryEntry, type ImageConfig } from '../images/config.js';
import { applyChanges, mergeConfig } from './instructions.js';
import { type ImportRequest, importImage } from './import.js';
import { parseReference, withTag, referenceString } from '../reference.js';
import { familiar, type ImageService } from '../images/service.js';

/** The diff id of an empty layer (a tar of two zero blocks): dockerd adds no layer for it. */
const EMPTY_LAYER_DIFF_ID = 'sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef';
const TAR_MEDIA_TYPE = 'application/vnd.oci.image.layer.v1.tar';
/** Fixed, so that the same changes always give the same blob. Speed over ratio: commit is interactive. */
const GZIP_LEVEL = 1;
/** How far filling the new layer's tree may lag behind storing its blob, in bytes of tar. */
const TREE_LAG = 32 << 20;
/**
 * Mount points the runtime creates in a container's rootfs when the image
 * lacks them. dockerd keeps them in an init layer below the container's own;
 * berth finds them in the upper dir and leaves them out of commit and diff.
 */
const RUNTIME_MOUNT_POINTS = [
  '.dockerenv',
  'dev',
  'dev/console',
  'dev/pts',
  'dev/shm',
  'etc/hostname',
  'etc/hosts',
  'etc/mtab',
  'etc/resolv.conf',
  'proc',
  'sys',
];

/** Each path (absolute) and its parents, relative, for mountPointStubs. */
function withParents(paths: readonly string[]): string[] {
  const out: string[] = [];
  for (const p of paths) {
    const parts = p.split('/').filter(Boolean);
    for (let i = parts.length; i > 0; i--) out.push(parts.slice(0, i).join('/'));
  }
  return out;
}

export interface CommitRequest {
  /** Id, id prefix or name. */
  container: string;
  repo?: string;
  tag?: string;
  comment?: string;
  author?: string;
  /** Freeze a running container while its changes are read (default true). */
  pause?: boolean;
  /** Dockerfile instructions (`--change`), one or more lines each. */
  changes?: string[];
  /** Replaces the container's config as the base of the new one (the request body). */
  config?: ContainerConfigFields;
}

export interface CommitDeps {
  containers: ContainerService;
  images: ImageService;
  repo: ImageRepository;
  layers: LayerStore;
  extractor: Extractor;
  content: ContentStore;
  events: EventBus;
  logger: Logger;
}

/** A layer made from a container's changes, not yet recorded. */
interface BuiltLayer {
  /** Its tree, still being filled when the blob is stored. */
  tree: { staged: StagedLayer; filling: Promise<unknown> };
  diffId: string;
  size: number;
  blob: { digest: string; size: number; created: boolean };
}

/**
 * The reference a commit tags, as dockerd's RepoTagReference: none without a
 * repo; `tag` (default `latest`) replaces any tag in `repo`; no digests.
 */
export function commitReference(repo: string | undefined, tag: string | undefined): string | undefined {
  if (!repo) return undefined;
  let ref = parseReference(repo, { defaultTag: false });
  if (ref.digest) throw invalidParameter('cannot commit to digest reference');
  if (tag) ref = withTag(ref, tag);
  else if (!ref.tag) ref = withTag(ref, 'latest');
  return referenceString(ref);
}

export class CommitService {
  private readonly log: Logger;
  /** Installing layers and recording images, one commit at a time (two may make the same layer). */
  private recording: Promise<unknown> = Promise.resolve();

  constructor(private readonly deps: CommitDeps) {
    this.log = deps.logger.child({ component: 'commit' });
  }

  /** `POST /images/create?fromSrc=` (docker import): see import.ts. Returns the new image's id. */
  importImage(req: Omit<ImportRequest, 'target'> & { repo?: string; tag?: string }): Promise<string> {
    // As a commit's reference (refused before any byte is read), in dockerd's words for import.
    if (req.repo && parseReference(req.repo, { defaultTag: false }).digest)
      throw invalidParameter('cannot import digest reference');
    const target = commitReference(req.repo, req.tag);
    return importImage(this.deps, { ...req, target });
  }

  /** `POST /commit`: returns the new image's id. */
  async commit(req: CommitRequest): Promise<string> {
    const { containers, repo } = this.deps;
    const target = commitReference(req.repo, req.tag); // refused before any work is done
    const c = containers.get(req.container);
    const id = c.id;
    if (c.status === 'dead') throw conflict(`You cannot commit container ${id} which is Dead`);
    if (c.status === 'removing') throw conflict(`You cannot commit container ${id} which is being removed`);
    const parent = repo.find(c.imageId);
    if (!parent) throw systemError(`image ${c.imageId} of container ${id} is not in the store`);
    const config = mergeConfig(applyChanges(req.config ?? c.config, req.changes ?? []), c.config);
    const parentLayers = repo.layersOf(parent.id);

    // As dockerd: a container that cannot be paused (it stopped meanwhile) is committed as it is.
    const freeze =
      req.pause !== false &&
      c.status === 'running' &&
      (await containers.freeze(id).then(
        () => true,
        () => false,
      ));
    // Thawed as soon as its changes have all been read, not once they are stored.
    let thawing: Promise<void> | undefined;
    const thaw = () =>
      (thawing ??= freeze
        ? containers.thaw(id).catch((err: unknown) => this.log.warn({ err, id }, 'unpause after commit failed'))
        : Promise.resolve());
    let layer: BuiltLayer | null;
    try {
      layer = await this.buildLayer(c, thaw);
    } finally {
      await thaw();
    }
    const imageId = await this.serially(() =>
      this.record({
        containerId: c.id,
        containerConfig: c.config,
        parent,
        parentLayers,
        layer,
        config,
        target,
        comment: req.comment ?? '',
        author: req.author ?? '',
      }),
    );
    if (target) this.deps.events.publish('image', 'tag', imageId, { name: familiar(target) });
    this.deps.events.publish('container', 'commit', id, {
      ...(c.config.Labels ?? {}),
      comment: req.comment ?? '',
      image: c.imageRef,
      imageID: imageId,
      imageRef: target ? familiar(target) : '',
      name: c.name,
    });
    return imageId;
  }

  /**
   * A build step's image: the container's changes (none for a step that only
   * changes the config) over `parent` (none: FROM scratch), with the configs
   * given as they are: the builder computes them, nothing is merged.
   */
  async commitStep(o: {
    container?: string;
    parent: string | null;
    config: ContainerConfigFields;
    containerConfig: ContainerConfigFields;
    author?: string;
    /** Mount points of the step's own mounts (absolute): left out of the layer when the runtime made them. */
    mountPoints?: readonly string[];
  }): Promise<string> {
    const { repo } = this.deps;
    const parent = o.parent ? repo.find(o.parent) : undefined;
    if (o.parent && !parent) throw systemError(`image ${o.parent} is not in the store`);
    const parentLayers = parent ? repo.layersOf(parent.id) : [];
    const c = o.container ? this.deps.containers.get(o.container) : undefined;
    const layer = c ? await this.buildLayer(c, () => undefined, o.mountPoints) : null;
    return this.serially(() =>
      this.record({
        containerId: c?.id ?? '',
        parent,
        parentLayers,
        layer,
        config: o.config,
        containerConfig: o.containerConfig,
        target: undefined,
        comment: '',
        author: o.author ?? '',
      }),
    );
  }

  /**
   * A build step that a cachefrom image made (dockerd's restoreCachedImage):
   * the parent's layers, plus the source's layer of that step unless it made
   * none, with the source's history up to it and the step's config.
   */
  async restoreStep(o: {
    parent: string;
    source: string;
    /** The step's index in the source's history. */
    index: number;
    config: ContainerConfigFields;
    containerConfig: ContainerConfigFields;
  }): Promise<string> {
    const { repo, content } = this.deps;
    const parent = repo.find(o.parent);
    const source = repo.find(o.source);
    if (!parent || !source) throw systemError('a cache source image is no longer in the store');
    const pc = JSON.parse(parent.config) as ImageConfig;
    const sc = JSON.parse(source.config) as ImageConfig;
    const history = (sc.history ?? []).slice(0, o.index + 1);
    const step = history[o.index];
    if (!step) throw systemError(`cache source ${source.id} has no history entry ${o.index}`);
    const parentLayers = repo.layersOf(parent.id);
    const added = step.empty_layer ? undefined : repo.layersOf(source.id)[parentLayers.length];
    if (!step.empty_layer && !added) throw systemError(`cache source ${source.id} lacks the layer of step ${o.index}`);
    const rows = added ? [...parentLayers, added] : parentLayers;
    const imageConfig: ImageConfig = {
      created: step.created ?? new Date().toISOString(),
      container_config: o.containerConfig,
      docker_version: VERSION,
      config: dockerConfig(o.config),
      architecture: pc.architecture || goArch(),
      ...(pc.variant ? { variant: pc.variant } : {}),
      os: pc.os || 'linux',
      rootfs: { type: 'layers', diff_ids: rows.map((l) => l.diff_id) },
      history,
    };
    const configBytes = Buffer.from(JSON.stringify(imageConfig));
    const imageId = `sha256:${createHash('sha256').update(configBytes).digest('hex')}`;
    if (repo.find(imageId)) return imageId;
    return this.serially(async () => {
      await content.put(imageId, configBytes, { what: 'image config' });
      repo.add({
        image: {
          id: imageId,
          parent: parent.id,
          config: configBytes.toString('utf8'),
          size: rows.reduce((a, l) => a + l.size, 0),
          created: imageConfig.created!,
          added_at: Date.now(),
        },
        layers: rows,
        blobs: [imageId, ...(added?.blob ? [added.blob] : [])],
        tags: [],
        repoDigests: [],
      });
      return imageId;
    });
  }

  /** `GET /containers/{id}/changes`: null when nothing changed, as dockerd answers. */
  async changes(ref: string): Promise<Change[] | null> {
    const c = this.deps.containers.get(ref);
    const upper = await this.upperDir(c);
    const lowers = await this.deps.images.readyLayerDirs(c.imageId);
    const list = await changes(upper, lowers, { exclude: await mountPointStubs(upper, lowers, RUNTIME_MOUNT_POINTS) });
    return list.length ? list : null;
  }

  /**
   * `GET /containers/{id}/export`: the container's whole filesystem as a tar.
   * A running container's rootfs is read where it is mounted; a stopped one's
   * is mounted read-only (its upper dir as the top layer), opened, and
   * detached at once, so that nothing stays mounted whatever happens next.
   */
  async export(ref: string): Promise<Readable> {
    const c = this.deps.containers.get(ref);
    const root = isMountPoint(c.rootfs) ? await openDir(c.rootfs) : await this.mountReadOnly(c);
    const tar = diffLayer(`/proc/self/fd/${root.fd}`);
    tar.once('close', () => void root.close().catch(() => undefined));
    return tar;
  }

  // ---------------------------------------------------------------- the layer

  /**
   * The container's changes as a stored blob and a tree being filled; null
   * when there are none. `read` is called once the upper dir has been read.
   */
  private async buildLayer(
    c: Container,
    read: () => void,
    mountPoints: readonly string[] = [],
  ): Promise<BuiltLayer | null> {
    const upper = await this.upperDir(c);
    const lowers = await this.deps.images.readyLayerDirs(c.imageId);
    const exclude = await mountPointStubs(upper, lowers, [...RUNTIME_MOUNT_POINTS, ...withParents(mountPoints)]);
    const staged = await this.deps.layers.stage('commit');
    // From here on, nothing awaits until every consumer of the tar is attached.
    const stats = { size: 0 };
    const tar = diffLayer(upper, { exclude, stats });
    tar.once('end', read);
    const diffHash = hashSink();
    tar.pipe(diffHash);
    const gzip = new ParallelGzip({ level: GZIP_LEVEL });
    const lag = new PassThrough({ highWaterMark: TREE_LAG });
    const extraction = this.deps.extractor.extract(staged.diffDir, { mediaType: TAR_MEDIA_TYPE });
    const tree = { staged, filling: extraction.done };
    tree.filling.catch(() => tar.unpipe(lag)); // a failed tree is made again from the blob; the commit goes on
    tar.pipe(lag);
    pipeline(lag, extraction.input).catch(() => undefined); // its failure is the tree's: `filling` rejects
    const jobs = [pipeline(tar, gzip), this.deps.content.create(gzip)] as const;
    let blob: Awaited<(typeof jobs)[1]>;
    try {
      [, blob] = await Promise.all(jobs);
    } catch (e) {
      for (const s of [tar, gzip, lag]) s.destroy();
      // The store's own error says most (a full disk, worded for the user); the tar's side only saw gzip destroyed with it.
      let storeError: unknown;
      const stored = await jobs[1].catch((err: unknown) => {
        storeError = err;
      });
      if (stored?.created) await this.deps.content.delete(stored.digest);
      await dropTree(tree);
      throw storeError ?? e;
    }
    const diffId = await diffHash.digest();
    if (diffId === EMPTY_LAYER_DIFF_ID) {
      if (blob.created) await this.deps.content.delete(blob.digest);
      await dropTree(tree);
      return null;
    }
    return { tree, diffId, size: stats.size, blob };
  }

  /** Installs the layer (or finds it stored already) and records the image, all or nothing. */
  private async record(o: {
    containerId: string;
    parent: ImageRow | undefined;
    parentLayers: LayerRow[];
    layer: BuiltLayer | null;
    config: ContainerConfigFields;
    /** What the image says made it: the container's config, or a build step's. */
    containerConfig: ContainerConfigFields;
    target: string | undefined;
    comment: string;
    author: string;
  }): Promise<string> {
    const { repo, content, layers } = this.deps;
    const { layer, parentLayers } = o;
    const created = new Date().toISOString();
    const parentConfig = o.parent ? (JSON.parse(o.parent.config) as ImageConfig) : ({} as ImageConfig);
    const imageConfig = childConfig(parentConfig, {
      created,
      author: o.author,
      comment: o.comment,
      containerId: o.containerId,
      containerConfig: o.containerConfig,
      config: o.config,
      diffId: layer?.diffId,
    });
    const configBytes = Buffer.from(JSON.stringify(imageConfig));
    const imageId = `sha256:${createHash('sha256').update(configBytes).digest('hex')}`;

    let rows = parentLayers;
    let added: LayerRow | undefined;
    try {
      if (layer) {
        const chainId = chainIds([...parentLayers.map((l) => l.diff_id), layer.diffId]).at(-1)!;
        // The same changes committed before give the same layer: it is shared.
        const stored = repo.layer(chainId);
        added = stored
          ? undefined
          : {
              chain_id: chainId,
              diff_id: layer.diffId,
              parent: parentLayers.at(-1)?.chain_id ?? null,
              dir: LayerStore.dirName(chainId),
              size: layer.size,
              blob: layer.blob.digest,
            };
        rows = [...parentLayers, stored ?? added!];
      }
      await content.put(imageId, configBytes, { what: 'image config' });
      repo.add({
        image: {
          id: imageId,
          parent: o.parent?.id ?? '',
          config: configBytes.toString('utf8'),
          size: rows.reduce((a, l) => a + l.size, 0),
          created,
          added_at: Date.now(),
        },
        layers: rows,
        blobs: [imageId, ...(layer ? [layer.blob.digest] : [])],
        tags: o.target ? [o.target] : [],
        repoDigests: [],
      });
    } catch (e) {
      if (layer) void dropTree(layer.tree);
      if (!repo.find(imageId)) {
        if (layer?.blob.created) await content.delete(layer.blob.digest).catch(() => undefined);
        await content.delete(imageId).catch(() => undefined);
      }
      throw e;
    }
    if (added) {
      const chainId = added.chain_id;
      void layers
        .adopt(chainId, layer!.tree.staged, layer!.tree.filling)
        .catch((err: unknown) =>
          this.log.warn(
            { err, chainId },
            "filling the committed layer's tree failed; it is made from the blob when first used",
          ),
        );
    } else if (layer) void dropTree(layer.tree); // the layer was there already
    this.log.debug({ container: o.containerId, image: imageId, diffId: layer?.diffId ?? null }, 'committed');
    return imageId;
  }

  private serially<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.recording.then(fn, fn);
    this.recording = run.catch(() => undefined);
    return run;
  }

  // ---------------------------------------------------------------- where things are

  /** The container's writable layer; a container never started gets its (empty) one now, as start would. */
  private async upperDir(c: Container): Promise<string> {
    const upper = path.join(c.bundleDir, 'upper');
    await mkdir(upper, { mode: 0o755 }).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'EEXIST') throw systemError(`container ${c.id} has no filesystem: ${messageOf(e)}`, e);
    });
    return upper;
  }

  private async mountReadOnly(c: Container): Promise<FileHandle> {
    const layers = [await this.upperDir(c), ...(await this.deps.images.readyLayerDirs(c.imageId))];
    if (layers.length === 1) return openDir(layers[0]!);
    const target = await mkdtemp(path.join(c.bundleDir, 'export-'));
    try {
      mountOverlay({ lowerDirs: layers, target });
      try {
        return await openDir(target);
      } finally {
        unmount(target);
      }
    } finally {
      await rmdir(target);
    }
  }
}

const openDir = (dir: string) => open(dir, C.O_RDONLY | C.O_DIRECTORY);

/** Removes a tree that will not be installed, once nothing writes to it any more. */
const dropTree = (tree: BuiltLayer['tree']) => discardWhenFilled(tree.staged, tree.filling);

/**
 * The new image's config, as dockerd's NewChildImage: the parent's platform,
 * history and diff ids, extended by this commit.
 */
function childConfig(
  parent: ImageConfig,
  o: {
    created: string;
    author: string;
    comment: string;
    containerId: string;
    containerConfig: ContainerConfigFields;
    config: ContainerConfigFields;
    diffId: string | undefined;
  },
): ImageConfig {
  const createdBy = (o.containerConfig.Cmd ?? []).join(' ');
  const entry: HistoryEntry = {
    created: o.created,
    ...(o.author ? { author: o.author } : {}),
    ...(createdBy ? { created_by: createdBy } : {}),
    ...(o.comment ? { comment: o.comment } : {}),
    ...(o.diffId ? {} : { empty_layer: true }),
  };
  return {
    ...(o.comment ? { comment: o.comment } : {}),
    created: o.created,
    container: o.containerId,
    container_config: o.containerConfig,
    docker_version: VERSION,
    ...(o.author ? { author: o.author } : {}),
    config: dockerConfig(o.config),
    architecture: parent.architecture || goArch(),
    ...(parent.variant ? { variant: parent.variant } : {}),
    os: parent.os || 'linux',
    rootfs: { type: 'layers', diff_ids: [...(parent.rootfs?.diff_ids ?? []), ...(o.diffId ? [o.diffId] : [])] },
    history: [...(parent.history ?? []), entry],
    ...(parent['os.version'] ? { 'os.version': parent['os.version'] } : {}),
    ...(parent['os.features'] ? { 'os.features': parent['os.features'] } : {}),
  };
}
