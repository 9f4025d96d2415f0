// Reading files inside a container's rootfs as the container would see them
// (chroot semantics, by hand): symlinks are re-rooted, `..` never leaves the
// root, and the final open refuses to follow a link. Used only to *read*
// small text files (/etc/passwd, /etc/group); nothing from the rootfs is run.
import { constants } from 'node:fs';
import { type FileHandle, lstat, open, readlink } from 'node:fs/promises';
import path from 'node:path';

const MAX_HOPS = 40;

/** Resolves `p` inside `root`; the result is a host path under `root` with no symlink in it. */
async function resolveInRoot(root: string, p: string): Promise<string> {
  let pending = p.split('/').filter(Boolean);
  const done: string[] = [];
  let hops = 0;
  while (pending.length) {
    const c = pending.shift()!;
    if (c === '.') continue;
    if (c === '..') {
      done.pop();
      continue;
    }
    const host = path.join(root, ...done, c);
    const st = await lstat(host).catch(() => null);
    if (st?.isSymbolicLink()) {
      if (++hops > MAX_HOPS)
        throw Object.assign(new Error(`too many levels of symbolic links: ${p}`), { code: 'ELOOP' });
      const target = await readlink(host);
      if (target.startsWith('/')) done.length = 0;
      pending = [...target.split('/').filter(Boolean), ...pending];
      continue;
    }
    done.push(c);
  }
  return path.join(root, ...done);
}

/** Reads a small file inside `root`, or null when it does not exist. */
export async function readFileInRoot(root: string, p: string, maxBytes = 4 << 20): Promise<string | null> {
  const host = await resolveInRoot(root, p);
  let fh: FileHandle;
  try {
    fh = await open(host, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ELOOP' || code === 'ENOTDIR') return null;
    throw e;
  }
  try {
    const st = await fh.stat();
    if (!st.isFile()) return null;
    const buf = Buffer.alloc(Math.min(st.size, maxBytes));
    const { bytesRead } = await fh.read(buf, 0, buf.length, 0);
    return buf.subarray(0, bytesRead).toString('utf8');
  } finally {
    await fh.close();
  }
}

/** The directory `p` of a rootfs resolved inside it (resolveInRoot), or null when there is no directory there. */
export async function dirInRoot(root: string, p: string): Promise<string | null> {
  const host = await resolveInRoot(root, p).catch(() => null);
  if (host === null) return null;
  return (await lstat(host).catch(() => null))?.isDirectory() ? host : null;
}
