// File system calls Node lacks, other than mounts and xattrs: device nodes,
// an advisory lock, sealed in-memory copies, and reading a directory's small
// files in one call; and a tree copy with every attribute kept.
import { execFile } from 'node:child_process';
import { unlink } from 'node:fs/promises';
import { LOCK_EX, LOCK_NB, native } from './native.js';

/**
 * Removes a file (or a symlink, not what it names); one that is not there is
 * fine. One unlink, where fs.rm's `force` looks before it removes.
 */
export async function removeFile(path: string): Promise<void> {
  await unlink(path).catch((e: NodeJS.ErrnoException) => {
    if (e.code !== 'ENOENT') throw e;
  });
}

/** mknod(2): a device node or fifo (`mode` carries the type bits). */
export function mknod(path: string, mode: number, major: number, minor: number): void {
  native.mknod(path, mode, major, minor);
}

/**
 * A new regular file `name` (one component) in the directory `dirFd`, as an
 * extraction makes one: created with O_EXCL|O_NOFOLLOW (EEXIST when anything is
 * there: nothing is followed or opened), `chunks` written, then owner, mode
 * (permission bits) and both times (seconds) set through its descriptor.
 * Returns the bytes written. See src/native/files.c.
 */
export function createFileAt(
  dirFd: number,
  name: string,
  chunks: readonly Uint8Array[],
  owner: { uid: number; gid: number },
  mode: number,
  mtime: number,
): number {
  return native.createFileAt(dirFd, name, chunks, owner.uid, owner.gid, mode, mtime);
}

/** Takes an exclusive flock on `fd` without waiting; throws EWOULDBLOCK when another process holds one. */
export function lockExclusive(fd: number): void {
  native.flock(fd, LOCK_EX | LOCK_NB);
}

/** A close-on-exec memfd holding the file's bytes, sealed against any change. See src/native/files.c. */
export function sealedCopy(path: string): number {
  return native.sealedCopy(path);
}

/** Fields per name in readFiles' stats. */
export const READ_FILES_FIELDS = native.READ_FILES_FIELDS;

/**
 * The regular files among `names` in the directory `dirFd`: stats (READ_FILES_FIELDS
 * per name: ino dev mode nlink uid gid rdev size mtime-s mtime-ns; mode 0 when not
 * read), content when at most `limit` bytes, and xattrs. See src/native/files.c.
 */
export function readFiles(
  dirFd: number,
  names: string[],
  limit: number,
): [BigInt64Array, Array<Buffer | null>, Array<Array<[string, Buffer]> | null>] {
  return native.readFiles(dirFd, names, limit);
}

/**
 * Copies a directory's content into another, ownership, modes, times and
 * extended attributes kept, and the target directory's own attributes taken
 * from the source's (`cp -a src/. dst`).
 */
export async function copyTree(source: string, target: string): Promise<void> {
  await new Promise<void>((resolve, reject) =>
    execFile('cp', ['-a', '--', `${source}/.`, target], (err, _out, stderr) =>
      err ? reject(new Error(`copying ${source} into ${target}: ${stderr.trim() || err.message}`)) : resolve(),
    ),
  );
}
