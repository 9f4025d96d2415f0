// Mounting and unmounting, on top of the native mount(2)/umount2(2).
//
// Overlay's options travel in one page (4096 bytes) of mount data, which 100+
// lower layers with absolute paths overflow (each ~100 bytes under a data root).
// Instead of dockerd's short-symlink directory plus chdir (the cwd is process-
// wide, and this process is a daemon), long or unusual layer lists name each
// lower through an open descriptor, `/proc/self/fd/N` (~18 bytes each): the
// kernel resolves the magic link to the directory at mount time, and the fds
// are closed right after. That fits 200+ layers (dockerd caps images at 128),
// and sidesteps escaping ',' and ':' in paths.
import { closeSync, constants as fsc, existsSync, openSync, readFileSync, realpathSync } from 'node:fs';
import { systemError } from '../../errors.js';
import { MNT_DETACH, MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_RDONLY, native } from './native.js';

const PAGE = 4096;

export interface OverlayOptions {
  /** Layer directories, topmost first. */
  lowerDirs: string[];
  /** Without upperDir and workDir the overlay is read-only, the layers only (at least two). */
  upperDir?: string;
  workDir?: string;
  target: string;
}

/** Paths overlay's option parser takes literally: no option or layer separators, escapes or whitespace. */
const isPlain = (p: string) => p.startsWith('/') && !/[,:\\\s]/.test(p);

/** index=off where the kernel knows the option: a reused upper dir must never fail on a stale index (as dockerd). */
let indexOffCached: string | undefined;
function indexOff(): string {
  indexOffCached ??= existsSync('/sys/module/overlay/parameters/index') ? ',index=off' : '';
  return indexOffCached;
}

function overlayData(lowers: string[], upper: string | undefined, work: string | undefined): string {
  if (upper === undefined || work === undefined) return `lowerdir=${lowers.join(':')}`;
  return `lowerdir=${lowers.join(':')},upperdir=${upper},workdir=${work}${indexOff()}`;
}

/** Runs fn with each path replaced by a /proc/self/fd/N name of an open descriptor, closed afterwards. */
function withDirFds<T>(paths: string[], fn: (names: string[]) => T): T {
  const fds: number[] = [];
  try {
    for (const p of paths) fds.push(openSync(p, fsc.O_RDONLY | fsc.O_DIRECTORY));
    return fn(fds.map((fd) => `/proc/self/fd/${fd}`));
  } finally {
    for (const fd of fds) closeSync(fd);
  }
}

function mountOverlayData(target: string, data: string, flags: number): void {
  if (Buffer.byteLength(data) >= PAGE) {
    throw systemError(
      `overlay mount options for ${target} exceed one page (${Buffer.byteLength(data)} bytes): too many layers`,
    );
  }
  native.mount('overlay', target, 'overlay', flags, data);
}

/**
 * Mounts an overlay at target. Plain paths are used as they are when the
 * options fit in a page; otherwise every lower (and any unusual upper/work
 * path) is named through an open descriptor.
 */
export function mountOverlay({ lowerDirs, upperDir, workDir, target }: OverlayOptions): void {
  if (lowerDirs.length === 0) throw systemError('overlay needs at least one lower directory');
  const flags = upperDir === undefined ? MS_RDONLY : 0;
  const literal = overlayData(lowerDirs, upperDir, workDir);
  const own = [upperDir, workDir].filter((p) => p !== undefined);
  if ([...lowerDirs, ...own].every(isPlain) && Buffer.byteLength(literal) < PAGE) {
    native.mount('overlay', target, 'overlay', flags, literal);
    return;
  }
  const indirect = own.filter((p) => !isPlain(p));
  withDirFds([...lowerDirs, ...indirect], (names) => {
    const lowers = names.slice(0, lowerDirs.length);
    const rest = names.slice(lowerDirs.length);
    const upper = upperDir === undefined || isPlain(upperDir) ? upperDir : rest.shift()!;
    const work = workDir === undefined || isPlain(workDir) ? workDir : rest.shift()!;
    mountOverlayData(target, overlayData(lowers, upper, work), flags);
  });
}

export function bindMount(source: string, target: string): void {
  native.mount(source, target, null, MS_BIND, null);
}

/** A /dev/shm-like tmpfs (nosuid, nodev, noexec, mode 1777) of `size` bytes at target. */
export function mountShm(target: string, size: number): void {
  native.mount('shm', target, 'tmpfs', MS_NOSUID | MS_NODEV | MS_NOEXEC, `mode=1777,size=${size}`);
}

/** A private tmpfs (nosuid, nodev, noexec, mode 0700) of `size` bytes at target: what is put there never touches a disk. */
export function mountPrivateTmpfs(target: string, size: number): void {
  native.mount('tmpfs', target, 'tmpfs', MS_NOSUID | MS_NODEV | MS_NOEXEC, `mode=0700,size=${size}`);
}

const NOT_MOUNTED = new Set(['EINVAL', 'ENOENT']);

/**
 * Unmounts target lazily (MNT_DETACH, as dockerd does: a process still holding
 * a file there must not make removal fail). Returns false when nothing was
 * mounted there or the path does not exist.
 */
export function unmount(target: string): boolean {
  try {
    native.umount2(target, MNT_DETACH);
    return true;
  } catch (e) {
    return notMounted(e);
  }
}

/** unmount() off the event loop: an overlay's unmount syncs its upper filesystem. */
export function unmountAsync(target: string): Promise<boolean> {
  return native.umount2Async(target, MNT_DETACH).then(() => true, notMounted);
}

/** false for an error that says nothing was mounted there; rethrows any other. */
function notMounted(e: unknown): false {
  if (NOT_MOUNTED.has((e as NodeJS.ErrnoException).code ?? '')) return false;
  throw e;
}

/** mountinfo escapes space, tab, newline and backslash as \ooo. */
const unescapeMountinfo = (s: string) =>
  s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));

/**
 * Whether path (symlinks resolved) is the mount point of some mount in this
 * namespace. statx answers in microseconds; reading /proc/self/mountinfo
 * (the fallback on kernels before 5.8) costs more with every container that
 * has its rootfs mounted.
 */
export function isMountPoint(path: string): boolean {
  let real: string;
  try {
    real = realpathSync(path);
  } catch {
    return false;
  }
  const root = native.isMountRoot(real);
  if (root !== null) return root;
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((line) => line !== '' && unescapeMountinfo(line.split(' ')[4] ?? '') === real);
}

/**
 * The mount that holds `path` (symlinks resolved): its mount point, the
 * longest one above the path, and its optional fields (`shared:N`,
 * `master:N`: its propagation), as dockerd's getSourceMount reads them.
 */
export function sourceMount(path: string): { mountPoint: string; optional: string[] } {
  let real: string;
  try {
    real = realpathSync(path);
  } catch (e) {
    throw systemError(
      `lstat ${path}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file or directory' : String(e)}`,
    );
  }
  let best = { mountPoint: '', optional: [] as string[] };
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const fields = line.split(' ');
    const point = unescapeMountinfo(fields[4] ?? '');
    if (!point || point.length <= best.mountPoint.length) continue;
    if (real !== point && !real.startsWith(point === '/' ? '/' : `${point}/`)) continue;
    best = { mountPoint: point, optional: fields.slice(6, fields.indexOf('-')) };
  }
  return best;
}

/** mount(8)'s flag options (as moby/sys/mount parses them): [set, clear] bits; anything else is filesystem data. */
const FLAG_OPTIONS: Record<string, [number, number]> = {
  defaults: [0, 0],
  ro: [MS_RDONLY, 0],
  rw: [0, MS_RDONLY],
  nosuid: [MS_NOSUID, 0],
  suid: [0, MS_NOSUID],
  nodev: [MS_NODEV, 0],
  dev: [0, MS_NODEV],
  noexec: [MS_NOEXEC, 0],
  exec: [0, MS_NOEXEC],
  sync: [16, 0],
  async: [0, 16],
  dirsync: [128, 0],
  noatime: [1024, 0],
  atime: [0, 1024],
  nodiratime: [2048, 0],
  diratime: [0, 2048],
  bind: [MS_BIND, 0],
  rbind: [MS_BIND | 16384, 0],
  relatime: [1 << 21, 0],
  norelatime: [0, 1 << 21],
  strictatime: [1 << 24, 0],
  nostrictatime: [0, 1 << 24],
};

/**
 * `mount -t type -o options device target`, as the local volume driver mounts
 * a volume made with DriverOpts (a tmpfs, a bind of a host directory, ...).
 */
export function mountWithOptions(device: string, target: string, type: string, options: string): void {
  let flags = 0;
  const data: string[] = [];
  for (const o of options.split(',').filter(Boolean)) {
    const f = FLAG_OPTIONS[o];
    if (f) flags = (flags | f[0]) & ~f[1];
    else data.push(o);
  }
  const fstype = (flags & MS_BIND) !== 0 || type === '' ? null : type;
  native.mount(device, target, fstype, flags, data.length ? data.join(',') : null);
  // A bind takes its read-only flag only from a remount.
  const MS_REMOUNT = 32;
  if ((flags & MS_BIND) !== 0 && (flags & MS_RDONLY) !== 0) {
    native.mount(null, target, null, MS_REMOUNT | MS_BIND | MS_RDONLY, null);
  }
}
