// The system calls an entry ends in: its body read or written in batches, a
// mode set never through a link, its xattrs applied.
import { chmodSync, closeSync, constants as C, fstatSync, openSync, writeSync, writevSync } from 'node:fs';
import { invalidParameter } from '../../errors.js';
import { O_PATH } from '../os/rooted.js';
import { lsetxattr } from '../os/xattrs.js';
import { type EntryBody, entryXattrs, type TarHeader } from './tar-reader.js';

/** Writes are gathered up to this size before one writev: fewer system calls, bounded memory. */
const WRITE_BATCH = 1 << 20;

/** Reads a small body into memory (tar-stream yields exactly the header's size). */
export async function readSmallBody(body: EntryBody): Promise<Buffer[]> {
  const chunks: Buffer[] = [];
  for await (const data of body) chunks.push(data as Buffer);
  return chunks;
}

/** Writes an entry's body to `fd`, gathering chunks into batches; returns the bytes written. */
export async function writeBody(fd: number, body: AsyncIterable<unknown> | Iterable<unknown>): Promise<number> {
  let total = 0;
  let batch: Buffer[] = [];
  let batched = 0;
  for await (const data of body) {
    const chunk = data as Buffer;
    batch.push(chunk);
    batched += chunk.length;
    if (batched >= WRITE_BATCH) {
      total += writeAll(fd, batch, batched);
      batch = [];
      batched = 0;
    }
  }
  if (batched > 0) total += writeAll(fd, batch, batched);
  return total;
}

/** writev until every byte is down: the kernel may write less than asked. */
function writeAll(fd: number, bufs: Buffer[], length: number): number {
  const written = writevSync(fd, bufs);
  if (written === length) return length;
  const all = Buffer.concat(bufs, length);
  for (let done = written; done < length; ) done += writeSync(fd, all, done);
  return length;
}

/** chmod of the file at `path` itself, never of what it links to: through an O_PATH descriptor of it. */
export function chmodNoFollow(path: string, mode: number): void {
  const fd = openSync(path, O_PATH | C.O_NOFOLLOW);
  try {
    if (!fstatSync(fd).isSymbolicLink()) chmodSync(`/proc/self/fd/${fd}`, mode);
  } finally {
    closeSync(fd);
  }
}

/** Applies the entry's `SCHILY.xattr.*` records, minus the ones a tar must never set. */
export function setXattrs(path: string, h: TarHeader): void {
  for (const [name, value] of entryXattrs(h)) {
    try {
      lsetxattr(path, name, value);
    } catch (e) {
      // Like dockerd: a filesystem or namespace that refuses xattrs (user.* on a symlink, no xattr support) is not fatal.
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'EPERM' || code === 'ENOTSUP') continue;
      if (code === 'EINVAL' || code === 'ERANGE' || code === 'E2BIG') {
        throw invalidParameter(
          `layer archive entry ${JSON.stringify(h.name)} has an invalid xattr ${JSON.stringify(name)}`,
        );
      }
      throw e;
    }
  }
}
