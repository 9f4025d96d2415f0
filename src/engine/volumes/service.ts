// Docker's volumes, local driver only: a volume is a directory,
// <data-root>/volumes/<name>/_data, recorded in SQLite (store/volumes.ts) with
// its labels and driver options. A volume made with DriverOpts (type, device,
// o: a tmpfs, a bind of a host directory, ...) has that mounted on its _data
// while a container uses it, as dockerd's local driver does: at a container's
// start, not at create. Which containers use a volume is the store's
// container_mounts rows, so a volume in use is never removed, even after
// berthd restarts.
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { lazySchema } from '../../lazy-schema.js';
import { conflict, invalidParameter, messageOf, notFound, systemError } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { EventBus } from '../events.js';
import { boolFilter, checkFilters, type Filters, matchLabels } from '../filters.js';
import { duBytes } from '../os/dirs.js';
import { copyTree } from '../os/files.js';
import { isMountPoint, mountWithOptions, unmount } from '../os/mount.js';
import type { MountRow, VolumeRepository, VolumeRow } from '../store/volumes.js';
import { mountSubpath, unmountSubpaths } from './subpath.js';

/** dockerd's mark on a volume made for a container without a name (`-v /data`, an image's VOLUME). */
export const ANONYMOUS_LABEL = 'com.docker.volume.anonymous';

export const VolumeCreateSchema = lazySchema(() =>
  z.looseObject({
    Name: z.string().nullish(),
    Driver: z.string().nullish(),
    DriverOpts: z.record(z.string(), z.string()).nullish(),
    Labels: z.record(z.string(), z.string()).nullish(),
    ClusterVolumeSpec: z.unknown().nullish(),
  }),
);
export type VolumeCreate = z.output<typeof VolumeCreateSchema>;

export interface Volume {
  name: string;
  driver: string;
  labels: Record<string, string>;
  /** DriverOpts as given; null when none were. */
  options: Record<string, string> | null;
  /** Unix ms. */
  created: number;
  /** <data-root>/volumes/<name>/_data */
  mountpoint: string;
}

/** One of a container's mount points on a volume, or a bind it took from another (VolumesFrom). */
export interface MountPoint {
  type: 'volume' | 'bind';
  /** The volume's name; absent for a bind. */
  name?: string;
  /** The host path mounted: a volume's _data, or the bind's source. */
  source: string;
  destination: string;
  rw: boolean;
  /** As given in a Binds spec ('' otherwise). */
  mode: string;
  propagation: string;
  /** Fill an empty volume from the image's content at the destination, at the first start. */
  copy: boolean;
  /** VolumeOptions.Subpath: the part of the volume mounted. */
  subpath?: string;
  /** Where a subpath is bound while the container runs: what the runtime mounts (see subpath.ts). */
  bindSource?: string;
}

/** A mount point a new container asks for, its volume named (a new anonymous one has its generated name). */
export interface PlannedMount extends Omit<MountPoint, 'source'> {
  /** A volume to create with it, when none has the name (Mounts' VolumeOptions may give labels and options). */
  create?: { labels: Record<string, string>; options: Record<string, string> | null };
  /** A bind's host path. */
  source?: string;
}

const LOCAL = 'local';
const VALID_OPTIONS = ['type', 'o', 'device', 'size'];
const MANDATORY: Record<string, string[]> = { device: ['type'], type: ['device'], o: ['device', 'type'] };
const NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]+$/;

/** dockerd's local driver's check of a volume's name. */
export function checkVolumeName(name: string): void {
  if (name.length === 1) {
    throw invalidParameter('volume name is too short, names should be at least two alphanumeric characters');
  }
  if (!NAME.test(name)) {
    throw invalidParameter(
      `"${name}" includes invalid characters for a local volume name, only "[a-zA-Z0-9][a-zA-Z0-9_.-]" are allowed. If you intended to pass a host directory, use absolute path`,
    );
  }
}

/** A volume driver other than local: dockerd's answer when no plugin has the name. */
export function checkDriver(driver: string | null | undefined): void {
  if (driver && driver !== LOCAL) {
    throw notFound(`error looking up volume plugin ${driver}: plugin "${driver}" not found`);
  }
}

function checkOptions(opts: Record<string, string>): void {
  for (const k of Object.keys(opts)) {
    if (!VALID_OPTIONS.includes(k)) throw invalidParameter(`invalid option: "${k}"`);
  }
  // berth has no quotas, as dockerd on a filesystem without project quotas.
  if (opts.size !== undefined && opts.size !== '0') {
    throw invalidParameter('quota size requested but no quota support');
  }
  for (const [k, needs] of Object.entries(MANDATORY)) {
    if (!(k in opts)) continue;
    for (const n of needs) if (!(n in opts)) throw invalidParameter(`missing required option: "${n}"`);
  }
}

const needsMount = (v: Volume) => !!(v.options?.type || v.options?.device);

export interface VolumeDeps {
  repo: VolumeRepository;
  /** <data-root>/volumes */
  root: string;
  events: EventBus;
  logger: Logger;
  /** Where subpaths of volumes are bound for containers (under the exec root: gone at a reboot, as the binds). */
  subpathRoot: string;
}

export class VolumeService {
  /** The containers running on each volume now: a volume with DriverOpts stays mounted while there are some. */
  private readonly active = new Map<string, Set<string>>();

  constructor(private readonly deps: VolumeDeps) {}

  private view(row: VolumeRow): Volume {
    return {
      name: row.name,
      driver: row.driver,
      labels: JSON.parse(row.labels),
      options: JSON.parse(row.options),
      created: row.created,
      mountpoint: this.dataDir(row.name),
    };
  }

  private dataDir(name: string): string {
    return path.join(this.deps.root, name, '_data');
  }

  // ------------------------------------------------------------------ the API's verbs

  /** `POST /volumes/create`: a name already taken answers that volume, as dockerd does; no name, an anonymous one. */
  async create(req: VolumeCreate): Promise<Volume> {
    checkDriver(req.Driver);
    if (req.ClusterVolumeSpec) throw invalidParameter('cluster volumes are not supported by berth');
    const name = req.Name || randomBytes(32).toString('hex');
    checkVolumeName(name);
    checkOptions(req.DriverOpts ?? {});
    const existing = this.deps.repo.find(name);
    if (existing) return this.view(existing);
    // A volume made without a name is anonymous, as dockerd marks it: `volume prune` (API 1.42+) takes it.
    const labels = req.Name ? (req.Labels ?? {}) : { ...req.Labels, [ANONYMOUS_LABEL]: '' };
    const row = this.newRow(name, labels, req.DriverOpts ?? null);
    await mkdir(this.dataDir(name), { recursive: true, mode: 0o755 });
    try {
      this.deps.repo.insert(row);
    } catch (e) {
      const taken = this.deps.repo.find(name);
      if (taken) return this.view(taken);
      throw e;
    }
    this.published('create', name);
    return this.view(row);
  }

  private newRow(name: string, labels: Record<string, string>, options: Record<string, string> | null): VolumeRow {
    return {
      name,
      driver: LOCAL,
      labels: JSON.stringify(labels),
      options: JSON.stringify(options),
      created: Date.now(),
    };
  }

  private published(action: string, name: string, extra: Record<string, string> = {}): void {
    this.deps.events.publish('volume', action, name, { driver: LOCAL, ...extra });
  }

  /** `GET /volumes/{name}`. */
  inspect(name: string): Volume {
    const row = this.deps.repo.find(name);
    if (!row) throw notFound(`get ${name}: no such volume`);
    return this.view(row);
  }

  /** `GET /volumes`, with Docker's filters: dangling, name, label, driver. */
  list(filters: Filters = {}): Volume[] {
    checkFilters(filters, ['dangling', 'name', 'label', 'driver']);
    const dangling = boolFilter(filters, 'dangling');
    const used = dangling === undefined ? new Set<string>() : this.deps.repo.used();
    return this.deps.repo
      .list()
      .map((r) => this.view(r))
      .filter(
        (v) =>
          (dangling === undefined || dangling !== used.has(v.name)) &&
          (filters.name ?? []).every((n) => new RegExp(n).test(v.name)) &&
          (filters.driver ?? []).every((d) => d === v.driver) &&
          matchLabels(filters, v.labels),
      );
  }

  /** Size of a volume's content and how many containers use it (Docker's UsageData). */
  async usage(name: string): Promise<{ Size: number; RefCount: number }> {
    this.inspect(name);
    return { Size: await duBytes(this.dataDir(name)), RefCount: this.deps.repo.users(name).length };
  }

  /** `DELETE /volumes/{name}`: force only ignores a missing volume; one in use is never removed. */
  async remove(name: string, opts: { force?: boolean } = {}): Promise<void> {
    const row = this.deps.repo.find(name);
    if (!row) {
      if (opts.force) return;
      throw notFound(`get ${name}: no such volume`);
    }
    const users = this.deps.repo.users(name);
    if (users.length) throw conflict(`remove ${name}: volume is in use - [${users.join(', ')}]`);
    const dir = path.dirname(this.dataDir(name));
    // A volume's mount (DriverOpts) is gone before its directory: what a bind shows is the host's own.
    if (isMountPoint(this.dataDir(name)) && !unmount(this.dataDir(name))) {
      throw systemError(`remove ${name}: volume is still mounted`);
    }
    this.deps.repo.remove(name);
    await rm(dir, { recursive: true, force: true }).catch((err) =>
      this.deps.logger.warn({ err, name }, "deleting a removed volume's directory failed"),
    );
    this.published('destroy', name);
  }

  /**
   * `POST /volumes/prune`: volumes no container uses; from API 1.42 only
   * anonymous ones unless `all=true`. Labels filter as elsewhere.
   */
  async prune(
    filters: Filters,
    anonymousOnly: boolean,
  ): Promise<{ VolumesDeleted: string[] | null; SpaceReclaimed: number }> {
    checkFilters(filters, ['label', 'label!', 'all']);
    const all = boolFilter(filters, 'all') ?? !anonymousOnly;
    const used = this.deps.repo.used();
    const deleted: string[] = [];
    let reclaimed = 0;
    for (const v of this.deps.repo.list().map((r) => this.view(r))) {
      if (used.has(v.name)) continue;
      if (!all && !(ANONYMOUS_LABEL in v.labels)) continue;
      if (!matchLabels(filters, v.labels)) continue;
      if ((filters['label!'] ?? []).length && matchesAnyLabel(filters['label!'] ?? [], v.labels)) continue;
      const size = await duBytes(v.mountpoint);
      try {
        await this.remove(v.name);
      } catch (err) {
        this.deps.logger.warn({ err, name: v.name }, 'pruning a volume failed');
        continue;
      }
      deleted.push(v.name);
      reclaimed += size;
    }
    this.deps.events.publish('volume', 'prune', '', { reclaimed: String(reclaimed) });
    return { VolumesDeleted: deleted.length ? deleted : null, SpaceReclaimed: reclaimed };
  }

  // ------------------------------------------------------------------ containers' mount points

  /**
   * Records a new container's mount points, creating the volumes they name
   * that do not exist yet (named ones at first use, anonymous ones), as dockerd
   * does at create. Checks the names and options first.
   */
  async recordMounts(containerId: string, planned: PlannedMount[]): Promise<void> {
    const created: VolumeRow[] = [];
    for (const p of planned) {
      if (p.type !== 'volume' || !p.name || this.deps.repo.find(p.name)) continue;
      if (created.some((r) => r.name === p.name)) continue;
      checkVolumeName(p.name);
      checkOptions(p.create?.options ?? {});
      created.push(this.newRow(p.name, p.create?.labels ?? {}, p.create?.options ?? null));
    }
    for (const r of created) await mkdir(this.dataDir(r.name), { recursive: true, mode: 0o755 });
    const rows: MountRow[] = planned.map((p) => ({
      container_id: containerId,
      destination: p.destination,
      volume: p.type === 'volume' ? (p.name ?? null) : null,
      source: p.type === 'bind' ? (p.source ?? '') : '',
      rw: p.rw ? 1 : 0,
      mode: p.mode,
      copy: p.copy ? 1 : 0,
      propagation: p.propagation,
      subpath: p.subpath ?? '',
    }));
    const inserted = this.deps.repo.recordMounts(created, rows);
    for (const name of inserted) this.published('create', name);
  }

  /** A container's mount points on volumes, and the binds it took by VolumesFrom, with their host paths. */
  mountsOf(containerId: string): MountPoint[] {
    return this.deps.repo.mountsOf(containerId).map((r) => this.mountPoint(r));
  }

  /** mountsOf for many containers (a list's) in one query; each has an entry, maybe empty. */
  mountsOfMany(containerIds: string[]): Map<string, MountPoint[]> {
    const out = new Map(containerIds.map((id): [string, MountPoint[]] => [id, []]));
    for (const r of this.deps.repo.mountsOfContainers(containerIds)) out.get(r.container_id)?.push(this.mountPoint(r));
    return out;
  }

  private mountPoint(r: MountRow): MountPoint {
    return {
      type: r.volume === null ? 'bind' : 'volume',
      ...(r.volume === null ? {} : { name: r.volume }),
      source: r.volume === null ? r.source : this.dataDir(r.volume),
      destination: r.destination,
      rw: r.rw === 1,
      mode: r.mode,
      propagation: r.propagation,
      copy: r.copy === 1,
      ...(r.subpath ? { subpath: r.subpath, bindSource: this.subpathTarget(r.container_id, r.destination) } : {}),
    };
  }

  private subpathDir(containerId: string): string {
    return path.join(this.deps.subpathRoot, containerId);
  }

  /** A stable name for a mount point's bind, whatever its destination's characters. */
  private subpathTarget(containerId: string, destination: string): string {
    return path.join(this.subpathDir(containerId), createHash('sha256').update(destination).digest('hex').slice(0, 16));
  }

  /** The containers whose mount points name a volume (the `volume` filter of the container list). */
  usersOf(name: string): string[] {
    return this.deps.repo.users(name);
  }

  /**
   * Before a container's process starts: each of its volumes mounted when it
   * has DriverOpts, and an empty one filled from the image's content at its
   * destination (unless nocopy); dockerd's `mount` event for each.
   * `imagePath` resolves a destination inside the container's rootfs (null: nothing there).
   */
  async activate(containerId: string, imagePath: (destination: string) => Promise<string | null>): Promise<void> {
    for (const m of this.mountsOf(containerId)) {
      if (m.type !== 'volume' || !m.name) continue;
      const v = this.inspect(m.name);
      this.mountIfNeeded(v);
      this.activeSet(v.name).add(containerId);
      if (m.subpath && m.bindSource) mountSubpath(v.mountpoint, m.subpath, m.bindSource);
      if (m.copy) await this.copyUp(m.bindSource ?? v.mountpoint, await imagePath(m.destination));
      this.published('mount', v.name, {
        container: containerId,
        destination: m.destination,
        propagation: m.propagation,
        'read/write': String(m.rw),
      });
    }
  }

  /** berthd restarted with the container running: its volumes count as in use again (no event). */
  stillActive(containerId: string): void {
    for (const m of this.mountsOf(containerId)) if (m.name) this.activeSet(m.name).add(containerId);
  }

  /** After a container's process ended (or its start failed): `unmount` events; a DriverOpts mount no one uses goes. */
  deactivate(containerId: string): void {
    const mounts = this.mountsOf(containerId);
    const binds = mounts.flatMap((m) => (m.bindSource ? [m.bindSource] : []));
    if (binds.length) {
      try {
        unmountSubpaths(this.subpathDir(containerId), binds);
      } catch (err) {
        this.deps.logger.warn({ err, containerId }, "unbinding a container's volume subpaths failed");
      }
    }
    for (const m of mounts) {
      if (!m.name) continue;
      const set = this.active.get(m.name);
      if (!set?.delete(containerId)) continue;
      this.published('unmount', m.name, { container: containerId });
      if (set.size > 0) continue;
      this.active.delete(m.name);
      const v = this.deps.repo.find(m.name);
      if (!v || !needsMount(this.view(v))) continue;
      // A failure is logged, not thrown into the exit being recorded; remove() unmounts again before deleting.
      try {
        unmount(this.dataDir(m.name));
      } catch (err) {
        this.deps.logger.warn({ err, name: m.name }, "unmounting a volume's DriverOpts mount failed");
      }
    }
  }

  /**
   * After a container's removal (its mount points went with it): its
   * anonymous volumes no other container uses, when `removeAnonymous`
   * (`rm -v`, --rm). Named volumes are never removed with a container.
   */
  async removed(mounts: MountPoint[], removeAnonymous: boolean): Promise<void> {
    if (!removeAnonymous) return;
    for (const m of mounts) {
      if (!m.name) continue;
      const row = this.deps.repo.find(m.name);
      if (!row || !(ANONYMOUS_LABEL in JSON.parse(row.labels))) continue;
      if (this.deps.repo.users(m.name).length) continue;
      await this.remove(m.name).catch((err) =>
        this.deps.logger.warn({ err, name: m.name }, "removing a container's anonymous volume failed"),
      );
    }
  }

  private activeSet(name: string): Set<string> {
    let set = this.active.get(name);
    if (!set) {
      set = new Set();
      this.active.set(name, set);
    }
    return set;
  }

  private mountIfNeeded(v: Volume): void {
    if (!needsMount(v) || isMountPoint(v.mountpoint)) return;
    try {
      mountWithOptions(v.options?.device ?? '', v.mountpoint, v.options?.type ?? '', v.options?.o ?? '');
    } catch (e) {
      throw systemError(
        `error while mounting volume '${v.mountpoint}': failed to mount local volume: ${messageOf(e)}`,
        e,
      );
    }
  }

  /** dockerd's copy-up: an empty volume (or subpath of one) takes the image's content (ownership and modes kept). */
  private async copyUp(target: string, source: string | null): Promise<void> {
    if (source === null) return;
    const present = await readdir(target).catch(() => ['?']);
    if (present.length) return;
    await copyTree(source, target);
  }
}

function matchesAnyLabel(wants: string[], labels: Record<string, string>): boolean {
  return wants.some((w) => matchLabels({ label: [w] }, labels));
}
