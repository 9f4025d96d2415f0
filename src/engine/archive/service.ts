// `docker cp`: HEAD, GET and PUT /containers/{id}/archive, as dockerd's
// daemon/archive*.go answers them.
//
// Every path is resolved inside the container's view (containers/rootview.ts:
// its rootfs with its mounts over it, out of the host's sight) by the
// kernel, with openat2(RESOLVE_IN_ROOT), and then only used through the
// descriptors that came out: a directory is read through held descriptors
// (layers/walk.ts), a file opened with O_NOFOLLOW from its held parent, and a
// tar is extracted through descriptors too (layers/rooted-tree.ts). So no
// symlink, however and whenever the container plants or swaps it, takes a
// copy outside its root (CVE-2018-15664).
import { closeSync, constants as C, fstatSync, lstatSync, openSync, type BigIntStats } from 'node:fs';
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { invalidParameter, messageOf, notFound, systemError } from '../../errors.js';
import type { Container } from '../containers/container.js';
import type { ContainerService } from '../containers/service.js';
import { resolveUser } from '../containers/spec/user.js';
import { entryTar, treeTar } from '../layers/diff.js';
import type { Extractor } from '../layers/extractor.js';
import { sniffMediaType } from '../layers/unpack.js';
import { O_PATH, openDirInRoot, openInRoot, type RootView, type ViewMount } from '../os/rooted.js';
import { followInScope, type PathStat, pathStat } from './pathstat.js';

export type { PathStat } from './pathstat.js';

export interface ArchiveDeps {
  containers: ContainerService;
  extractor: Extractor;
}

export interface PutOptions {
  /** Refuse to replace a directory with a non-directory or the reverse. */
  noOverwriteDirNonDir: boolean;
  /** Files owned by the container's user (Config.User) rather than as the archive says. */
  copyUIDGID: boolean;
}

const fdPath = (fd: number) => `/proc/self/fd/${fd}`;

/** A path found in the view: its stats, a name for it that follows no link, and the descriptors that name holds. */
interface Found {
  st: BigIntStats;
  path: string;
  /** Whether `path` is a held descriptor of the thing itself (a followed path), not its parent and name. */
  followed: boolean;
  fds: number[];
}

export class ArchiveService {
  constructor(private readonly deps: ArchiveDeps) {}

  /** HEAD: the stat of the path, not following a final symlink (unless the path ends in `/` or `/.`). */
  async stat(ref: string, path: string): Promise<PathStat> {
    return this.inView(ref, async (_c, view) => {
      const found = locate(view.rootFd, ref, path);
      try {
        return statOf(view.rootFd, path, found);
      } finally {
        closeAll(found.fds);
      }
    });
  }

  /** GET: the path's stat and a tar of it (a directory's named by its base name); the view lasts as long as the tar. */
  async get(ref: string, path: string): Promise<{ stat: PathStat; tar: Readable }> {
    const { c, view } = await this.deps.containers.openView(ref);
    const fds = [view.rootFd, view.nsFd];
    try {
      const found = locate(view.rootFd, ref, path);
      fds.push(...found.fds);
      const stat = statOf(view.rootFd, path, found);
      const tar = found.st.isDirectory()
        ? this.dirTar(found, rebaseName(path), fds, ref, path)
        : entryTar(found.path, posix.basename(absolute(path)), found.st);
      tar.once('close', () => closeAll(fds));
      this.deps.containers.publish(c, 'archive-path');
      return { stat, tar };
    } catch (e) {
      closeAll(fds);
      throw e;
    }
  }

  /** PUT: extracts `body` (a tar, or a gzipped one) into the directory at `path`. */
  async put(ref: string, path: string, body: Readable, opts: PutOptions): Promise<void> {
    await this.inView(ref, async (c, view, mounts) => {
      const abs = absolute(path);
      let dirFd: number;
      try {
        dirFd = openInRoot(view.rootFd, abs, O_PATH); // every symlink followed, the last too: a link to a directory is one
      } catch (e) {
        throw pathError(e, ref, path, abs);
      }
      try {
        if (!fstatSync(dirFd).isDirectory()) throw invalidParameter('extraction point is not a directory');
        const real = followInScope(view.rootFd, abs);
        checkWritable(c, mounts, real);
        const chown = opts.copyUIDGID && c.config.User ? await containerUser(c) : undefined;
        await this.extract(body, {
          dirFd,
          name: real,
          noOverwriteDirNonDir: opts.noOverwriteDirNonDir,
          ...(chown ? { chown } : {}),
        });
      } finally {
        closeSync(dirFd);
      }
      this.deps.containers.publish(c, 'extract-to-dir');
    });
  }

  private async inView<T>(
    ref: string,
    fn: (c: Container, view: RootView, mounts: ViewMount[]) => Promise<T>,
  ): Promise<T> {
    const { c, view, mounts } = await this.deps.containers.openView(ref);
    try {
      return await fn(c, view, mounts);
    } finally {
      closeAll([view.rootFd, view.nsFd]);
    }
  }

  private dirTar(found: Found, name: string, fds: number[], ref: string, path: string): Readable {
    // A held parent and a name: opened without following, so a swap since the lstat is refused, not followed.
    let fd: number;
    try {
      fd = openSync(found.path, C.O_RDONLY | C.O_DIRECTORY | (found.followed ? 0 : C.O_NOFOLLOW));
    } catch (e) {
      // Gone, or swapped for a link, since it was found: what was asked for is not there any more.
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ELOOP' || code === 'ENOTDIR')
        throw notFound(`Could not find the file ${path} in container ${ref}`);
      throw e;
    }
    fds.push(fd);
    return treeTar(fdPath(fd), name, found.st);
  }

  /** The extraction runs on an extraction thread (layers/extractor.ts), through the descriptors it is given. */
  private async extract(body: Readable, copy: Parameters<Extractor['extract']>[1]['copy']): Promise<void> {
    const mediaType = sniffMediaType(await peek(body));
    // An HTTP body's chunks are the body's alone: large ones go to the thread without a copy.
    const job = this.deps.extractor.extract('', { mediaType, ownsChunks: true, ...(copy ? { copy } : {}) });
    try {
      await Promise.all([pipeline(body, job.input), job.done]);
    } catch (e) {
      body.destroy();
      job.input.destroy();
      const error = await job.done.then(
        () => e,
        (err: unknown) => err,
      ); // nothing writes in the container any more
      throw error;
    }
  }
}

/** The path as dockerd cleans it, keeping a trailing `/` or `/.` (PreserveTrailingDotOrSeparator). */
function absolute(path: string): string {
  let abs = posix.normalize(`/${path}`);
  if (abs.length > 1 && abs.endsWith('/')) abs = abs.slice(0, -1);
  if (abs !== '/' && /(^|\/)\.$/.test(path)) return `${abs}/.`;
  if (abs !== '/' && path.endsWith('/')) return `${abs}/`;
  return abs;
}

/** The name a directory's tar is rebased to: its base name; `.` for `dir/.`; '' for `/`, whose entries are `/...`. */
function rebaseName(path: string): string {
  const abs = absolute(path);
  if (abs === '/') return '';
  if (abs.endsWith('/.')) return '.';
  return posix.basename(abs);
}

/**
 * Finds `path` in the view as os.Lstat would in the container: the last
 * component not followed, unless the path ends in `/` or `/.` (or is `/`).
 */
function locate(rootFd: number, ref: string, path: string): Found {
  const abs = absolute(path);
  try {
    if (abs === '/' || abs.endsWith('/') || abs.endsWith('/.')) {
      const fd = openInRoot(rootFd, abs, O_PATH);
      return { st: fstatSafe(fd), path: fdPath(fd), followed: true, fds: [fd] };
    }
    const dirFd = openDirInRoot(rootFd, posix.dirname(abs));
    const entry = `${fdPath(dirFd)}/${posix.basename(abs)}`;
    try {
      return { st: lstatSync(entry, { bigint: true }), path: entry, followed: false, fds: [dirFd] };
    } catch (e) {
      closeSync(dirFd);
      throw e;
    }
  } catch (e) {
    throw pathError(e, ref, path, abs);
  }
}

function fstatSafe(fd: number): BigIntStats {
  try {
    return fstatSync(fd, { bigint: true });
  } catch (e) {
    closeSync(fd);
    throw e;
  }
}

function statOf(rootFd: number, path: string, found: Found): PathStat {
  const abs = absolute(path);
  const linkTarget = found.st.isSymbolicLink() ? followInScope(rootFd, abs) : '';
  return pathStat(abs === '/' ? '/' : posix.basename(abs), found.st, linkTarget);
}

/** dockerd's words: a missing path is a 404 naming the container as the client named it; anything else as Go's lstat says it. */
function pathError(e: unknown, ref: string, path: string, abs: string): Error {
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'ENOENT') return notFound(`Could not find the file ${path} in container ${ref}`);
  const reason =
    code === 'ENOTDIR' ? 'not a directory' : code === 'ELOOP' ? 'too many levels of symbolic links' : messageOf(e);
  return systemError(`lstat ${abs}: ${reason}`, e);
}

/** dockerd's checkWritablePath: a read-only mount, or a read-only rootfs outside any mount, refuses a copy in. */
function checkWritable(c: Container, mounts: readonly ViewMount[], real: string): void {
  const under = (m: { destination: string }) =>
    real === m.destination || real.startsWith(m.destination.endsWith('/') ? m.destination : `${m.destination}/`);
  const mount = mounts.filter(under).sort((a, b) => b.destination.length - a.destination.length)[0];
  if (mount) {
    if (mount.readonly) throw invalidParameter('mounted volume is marked read-only');
    return;
  }
  if (c.hostConfig.ReadonlyRootfs) throw invalidParameter('container rootfs is marked read-only');
}

async function containerUser(c: Container): Promise<{ uid: number; gid: number }> {
  try {
    const u = await resolveUser(c.rootfs, c.config.User ?? '');
    return { uid: u.uid, gid: u.gid };
  } catch (e) {
    throw invalidParameter(messageOf(e), e);
  }
}

/**
 * The body's first bytes, put back at once (in the same turn: a body read to
 * its end would otherwise emit 'end' first): enough to tell gzip from a tar.
 */
function peek(body: Readable): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const done = (v: Buffer) => {
      body.off('readable', onReadable);
      body.off('end', onEnd);
      body.off('error', reject);
      resolve(v);
    };
    const onReadable = () => {
      const first = body.read() as Buffer | null;
      if (first === null) return; // 'end' follows
      body.unshift(first);
      done(first);
    };
    const onEnd = () => done(Buffer.alloc(0));
    body.on('readable', onReadable);
    body.once('end', onEnd);
    body.once('error', reject);
  });
}

function closeAll(fds: number[]): void {
  for (const fd of fds.splice(0)) {
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
  }
}
