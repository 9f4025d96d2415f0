// What a container mounts besides its rootfs, as dockerd plans it at create
// (daemon/volumes.go registerMountPoints): the mount points of the containers
// named in VolumesFrom, then its Binds and Mounts (a later one at the same
// destination wins over an inherited one), then an anonymous volume for each
// of Config.Volumes (the image's VOLUMEs and `-v /path`) not mounted
// otherwise. Host binds stay in the HostConfig (create.ts bindMounts); volumes
// and inherited binds are recorded by the volume service; tmpfs mounts are
// built from the HostConfig at each start.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { invalidParameter, isEngineError, systemError } from '../../../errors.js';
import {
  ANONYMOUS_LABEL,
  checkDriver,
  checkVolumeName,
  type MountPoint,
  type PlannedMount,
} from '../../volumes/service.js';
import { sourceMount } from '../../os/mount.js';
import { isLocalPath } from '../../volumes/subpath.js';
import type { HostConfig, Mount } from '../config.js';
import { bindMounts, parseBindSpec, TARGET_IS_ROOT } from './create.js';
import type { BindMount, Propagation, TmpfsMount } from '../spec/spec.js';

/** A container's mount as inspect's `Mounts` lists it: a volume, a bind or a tmpfs ('' its source), with its host path. */
export type ContainerMount = Omit<MountPoint, 'type' | 'copy'> & { type: MountPoint['type'] | 'tmpfs' };

const clean = (p: string) => path.posix.normalize(p).replace(/(.)\/+$/, '$1');

/**
 * dockerd's check of a mount's target: not the root, and absolute. A Mounts
 * entry's error names its type; HostConfig.Tmpfs's is bare, as dockerd's
 * ValidateTmpfsMountDestination answers.
 */
function checkTarget(type: string | undefined, target: string | null | undefined): string {
  const bad = (why: string) => invalidParameter(type ? `invalid mount config for type "${type}": ${why}` : why);
  if (!target) throw bad('field Target must not be empty');
  if (clean(target) === '/') throw bad(TARGET_IS_ROOT);
  if (!target.startsWith('/')) throw bad(`invalid mount path: '${target}' mount path must be absolute`);
  return clean(target);
}

/** A container VolumesFrom names: one missing is the request's fault (dockerd's 400, its words). */
function donorMounts(donor: DonorMounts, ref: string): ContainerMount[] {
  try {
    return donor(ref);
  } catch (e) {
    if (isEngineError(e, 'not-found')) throw invalidParameter(e.message);
    throw e;
  }
}

/** A Mounts entry of type volume, checked as dockerd checks it. */
function volumeMount(m: Mount): PlannedMount {
  if (m.BindOptions) throw invalidParameter('BindOptions must not be specified on mount type "volume"');
  if (m.TmpfsOptions) throw invalidParameter('TmpfsOptions must not be specified on mount type "volume"');
  const destination = checkTarget('volume', m.Target);
  const o = m.VolumeOptions;
  checkDriver(o?.DriverConfig?.Name);
  const anonymous = !m.Source;
  if (o?.Subpath) {
    const bad = (why: string) => invalidParameter(`invalid mount config for type "volume": ${why}`);
    if (anonymous) throw bad('must not set Subpath when using anonymous volumes');
    if (!isLocalPath(o.Subpath)) throw bad('subpath must be a relative path within the volume');
  }
  if (!anonymous) checkVolumeName(m.Source!);
  const labels = { ...(o?.Labels ?? {}), ...(anonymous ? { [ANONYMOUS_LABEL]: '' } : {}) };
  const options = o?.DriverConfig?.Options ?? null;
  return {
    type: 'volume',
    name: m.Source || anonymousName(),
    destination,
    rw: !m.ReadOnly,
    mode: '',
    propagation: '',
    copy: !o?.NoCopy,
    ...(o?.Subpath ? { subpath: o.Subpath } : {}),
    create: { labels, options: options && Object.keys(options).length ? options : null },
  };
}

const anonymousName = () => randomBytes(32).toString('hex');
const anonymous = (destination: string): PlannedMount => ({
  type: 'volume',
  name: anonymousName(),
  destination,
  rw: true,
  mode: '',
  propagation: '',
  copy: true,
  create: { labels: { [ANONYMOUS_LABEL]: '' }, options: null },
});

/** `id[:ro|rw]` of VolumesFrom: the donor, and whether its mounts are forced read-only or read-write. */
function parseVolumesFrom(spec: string): { ref: string; rw?: boolean } {
  if (!spec) throw invalidParameter('volumes-from specification cannot be an empty string');
  const [ref = '', mode] = spec.split(/:(.*)/s);
  if (mode === undefined || mode === '') return { ref };
  if (mode !== 'ro' && mode !== 'rw') throw invalidParameter(`invalid mode: ${mode}`);
  return { ref, rw: mode === 'rw' };
}

const MOUNT_TYPES = ['bind', 'volume', 'tmpfs'];

/** What the plan needs of a donor of VolumesFrom: all it mounts (tmpfs aside). */
export type DonorMounts = (ref: string) => ContainerMount[];

/**
 * The volumes and inherited binds a new container records (the volume
 * service creates the volumes missing, anonymous ones included); throws
 * dockerd's errors for a bad spec before anything is written.
 */
export function planMounts(
  h: HostConfig,
  configVolumes: Record<string, unknown> | null | undefined,
  donor: DonorMounts,
): PlannedMount[] {
  const plan = new Map<string, PlannedMount>();
  for (const spec of h.VolumesFrom ?? []) {
    const { ref, rw } = parseVolumesFrom(spec);
    for (const m of donorMounts(donor, ref)) {
      if (m.type === 'tmpfs') continue;
      const inherited: PlannedMount = {
        type: m.type,
        ...(m.name ? { name: m.name } : { source: m.source }),
        destination: m.destination,
        rw: rw ?? m.rw,
        mode: m.mode,
        propagation: m.propagation,
        copy: false,
        ...(m.subpath ? { subpath: m.subpath } : {}),
      };
      plan.set(m.destination, inherited);
    }
  }
  // Host binds and tmpfs mounts are the HostConfig's: they take their destinations from what is inherited.
  const own = new Set<string>();
  const taken = (destination: string) => {
    if (own.has(destination)) throw invalidParameter(`Duplicate mount point: ${destination}`);
    own.add(destination);
    plan.delete(destination);
  };
  for (const b of bindMounts(h, false)) taken(clean(b.destination));
  for (const t of tmpfsMounts(h)) taken(t.destination);
  for (const spec of h.Binds ?? []) {
    const v = parseBindSpec(spec);
    if (v.kind !== 'volume') continue;
    checkDriver(h.VolumeDriver);
    taken(v.destination);
    plan.set(
      v.destination,
      v.name === undefined
        ? { ...anonymous(v.destination), rw: v.rw, mode: v.mode }
        : {
            type: 'volume',
            name: v.name,
            destination: v.destination,
            rw: v.rw,
            mode: v.mode,
            propagation: '',
            copy: v.copy,
          },
    );
  }
  for (const m of h.Mounts ?? []) {
    // dockerd's words: npipe is Windows', cluster swarm's; neither is a mount here.
    if (!MOUNT_TYPES.includes(m.Type ?? 'bind')) {
      throw invalidParameter(`invalid mount config for type "${m.Type}": mount type unknown`);
    }
    if (m.Type !== 'volume') continue;
    const v = volumeMount(m);
    taken(v.destination);
    plan.set(v.destination, v);
  }
  for (const d of Object.keys(configVolumes ?? {})) {
    const destination = clean(d);
    if (plan.has(destination) || own.has(destination)) continue;
    checkDriver(h.VolumeDriver);
    plan.set(destination, anonymous(destination));
  }
  return [...plan.values()];
}

// ------------------------------------------------------------------ bind sources

const makesMountpoint = (m: Mount) => (m.Type ?? 'bind') === 'bind' && !!m.BindOptions?.CreateMountpoint;

/**
 * At create, as dockerd's parser checks a Mounts bind: its source exists,
 * unless BindOptions.CreateMountpoint asks for it to be made at start.
 */
export function checkBindSources(h: HostConfig): void {
  for (const m of h.Mounts ?? []) {
    if ((m.Type ?? 'bind') !== 'bind' || makesMountpoint(m) || !m.Source || existsSync(m.Source)) continue;
    throw invalidParameter(`invalid mount config for type "bind": bind source path does not exist: ${m.Source}`);
  }
}

/** Before each start: the sources of the binds that ask for it, made as directories (dockerd makes them 0755). */
/**
 * dockerd's check, at each start, of a bind that propagates: a shared one
 * needs its source on a shared mount, a slave one on a shared or slave mount
 * (kubelet's Bidirectional and HostToContainer). Otherwise nothing would
 * propagate, and the start fails in dockerd's words rather than run without;
 * an rslave nobody asked for (near the data root) falls back to rprivate, as
 * in dockerd. The binds as the spec takes them.
 */
export function propagatingBinds(binds: readonly BindMount[]): BindMount[] {
  return binds.map((b) => {
    const p = b.propagation ?? 'rprivate';
    if (p === 'private' || p === 'rprivate') return b;
    const { mountPoint, optional } = sourceMount(b.source);
    const shared = optional.some((o) => o.startsWith('shared:'));
    const slave = optional.some((o) => o.startsWith('master:'));
    if ((p === 'shared' || p === 'rshared') && !shared) {
      throw systemError(`path ${b.source} is mounted on ${mountPoint} but it is not a shared mount`);
    }
    if (shared || slave) return b;
    if (b.slaveOfDataRoot) return { ...b, propagation: 'rprivate' };
    throw systemError(`path ${b.source} is mounted on ${mountPoint} but it is not a shared or slave mount`);
  });
}

export async function createMountpoints(h: HostConfig): Promise<void> {
  for (const m of h.Mounts ?? []) {
    if (makesMountpoint(m) && m.Source) await mkdir(m.Source, { recursive: true, mode: 0o755 });
  }
}

// ------------------------------------------------------------------ tmpfs

const TMPFS_DEFAULTS = ['noexec', 'nosuid', 'nodev', 'rprivate'];
const FLAG_PAIRS: Record<string, string> = { exec: 'noexec', suid: 'nosuid', dev: 'nodev', rw: 'ro' };
const OPPOSITE = Object.fromEntries(
  Object.entries(FLAG_PAIRS).flatMap(([a, b]) => [
    [a, b],
    [b, a],
  ]),
);

/** dockerd's MergeTmpfsOptions: a later flag replaces its opposite, a later key=value its earlier value. */
function mergeTmpfsOptions(options: string[]): string[] {
  const out: string[] = [];
  for (const o of options) {
    const key = o.split('=', 1)[0]!;
    const idx = out.findIndex((x) => x === OPPOSITE[o] || x === o || (o.includes('=') && x.startsWith(`${key}=`)));
    if (idx >= 0) out.splice(idx, 1);
    out.push(o);
  }
  return out;
}

/** TmpfsOptions as dockerd turns them into mount options (ConvertTmpfsOptions). */
function tmpfsOptionsOf(m: Mount): string[] {
  const o = m.TmpfsOptions as { SizeBytes?: number | null; Mode?: number | null; Options?: string[][] | null } | null;
  const out: string[] = m.ReadOnly ? ['ro'] : [];
  if (o?.Mode) out.push(`mode=${o.Mode.toString(8)}`);
  if (o?.SizeBytes) {
    if (o.SizeBytes < 0) throw invalidParameter('invalid mount config for type "tmpfs": invalid size');
    const unit = [
      ['g', 1 << 30],
      ['m', 1 << 20],
      ['k', 1 << 10],
    ].find(([, d]) => o.SizeBytes! % (d as number) === 0) as [string, number] | undefined;
    out.push(unit ? `size=${o.SizeBytes / unit[1]}${unit[0]}` : `size=${o.SizeBytes}`);
  }
  for (const opt of o?.Options ?? []) {
    if (opt.length < 1 || opt.length > 2) throw invalidParameter('invalid option array length');
    if (opt[0] !== 'exec' && opt[0] !== 'noexec') throw invalidParameter(`invalid option: ${opt[0]}`);
    out.push(opt.join('='));
  }
  return out;
}

/** The container's tmpfs mounts: HostConfig.Tmpfs, then Mounts of type tmpfs. */
export function tmpfsMounts(h: HostConfig): TmpfsMount[] {
  const fromMap = Object.entries(h.Tmpfs ?? {}).map(([target, data]) => ({
    destination: checkTarget(undefined, target),
    options: mergeTmpfsOptions([...TMPFS_DEFAULTS, ...data.split(',').filter(Boolean)]),
  }));
  const fromMounts = (h.Mounts ?? [])
    .filter((m) => m.Type === 'tmpfs')
    .map((m) => {
      if (m.Source) throw invalidParameter('invalid mount config for type "tmpfs": field Source must not be specified');
      if (m.BindOptions) throw invalidParameter('BindOptions must not be specified on mount type "tmpfs"');
      if (m.VolumeOptions) throw invalidParameter('VolumeOptions must not be specified on mount type "tmpfs"');
      return {
        destination: checkTarget('tmpfs', m.Target),
        options: mergeTmpfsOptions([...TMPFS_DEFAULTS, ...tmpfsOptionsOf(m)]),
      };
    });
  return [...fromMap, ...fromMounts];
}

// ------------------------------------------------------------------ at start, and inspect

const PROPAGATIONS: readonly string[] = ['private', 'rprivate', 'shared', 'rshared', 'slave', 'rslave'];

/** A recorded mount point as the spec binds it (a volume's propagation is the default, rprivate). */
export function asBind(m: MountPoint): BindMount {
  const propagation = (PROPAGATIONS.includes(m.propagation) ? m.propagation : 'rprivate') as Propagation;
  return { source: m.bindSource ?? m.source, destination: m.destination, readonly: !m.rw, propagation };
}

/**
 * Everything a container mounts, with host paths: its recorded volumes and
 * inherited binds, its own binds, its tmpfs mounts (Mounts of type tmpfs; the
 * HostConfig.Tmpfs map is not listed, as with dockerd). What inspect's `Mounts`
 * shows, and where a path in the container lives on the host.
 */
export function containerMounts(h: HostConfig, recorded: MountPoint[], dataRoot = ''): ContainerMount[] {
  const binds = bindMounts(h, false, dataRoot);
  const own = new Set(binds.map((b) => clean(b.destination)));
  const modes = new Map(
    (h.Binds ?? [])
      .map((s) => parseBindSpec(s))
      .filter((b) => b.kind === 'bind')
      .map((b) => [b.destination, b.mode] as const),
  );
  return [
    ...recorded
      .filter((m) => !own.has(m.destination))
      .map((m) => ({
        type: m.type,
        ...(m.name ? { name: m.name } : {}),
        source: m.source,
        destination: m.destination,
        rw: m.rw,
        mode: m.mode,
        propagation: m.propagation,
        ...(m.subpath ? { subpath: m.subpath } : {}),
        ...(m.bindSource ? { bindSource: m.bindSource } : {}),
      })),
    ...binds.map((b) => ({
      type: 'bind' as const,
      source: b.source,
      destination: b.destination,
      rw: !b.readonly,
      mode: modes.get(clean(b.destination)) ?? '',
      propagation: b.propagation ?? 'rprivate',
    })),
    ...(h.Mounts ?? [])
      .filter((m) => m.Type === 'tmpfs')
      .map((m) => ({
        type: 'tmpfs' as const,
        source: '',
        destination: clean(m.Target ?? ''),
        rw: !m.ReadOnly,
        mode: '',
        propagation: '',
      })),
  ];
}
