// fsutil's Packet protocol (docs/buildkit/protocol.md §4), the way a client's
// directory crosses a FileSync/DiffCopy call: the sender lists every entry as a
// STAT in walk order and ends the list with an empty STAT; the receiver asks
// for the regular files it wants with REQ{id} (id = the index of that STAT
// among all of them), the sender answers each with DATA packets and an empty
// DATA; the receiver's FIN ends it and the sender's FIN answers.
//
// berthd receives (a build's context and its Dockerfile) and turns what it gets
// into a tar stream in walk order, the classic builder's context. The sender is
// the client, hostile input: paths are checked (relative, clean, each under a
// directory listed before it, in strictly increasing walk order), ids and sizes
// too, and any fault ends the call with an error. Nothing is written to disk
// here: the tar goes to the build, which keeps it in its own index.
import { lstat, readdir, readlink } from 'node:fs/promises';
import path from 'node:path';
import { Readable, type Writable } from 'node:stream';
import tar from 'tar-stream';
import type { TreeEntry } from '../../engine/index.js';
import { invalidParameter, messageOf } from '../../errors.js';
import type { ClientCall } from './grpc-client.js';
import { GrpcCode, GrpcError } from './grpc.js';
import { PacketType } from './proto/messages.js';
import type { Msg } from './proto/wire.js';

/** Go's os.FileMode type and special bits (fsutil's Stat.mode is one). */
const MODE = {
  dir: 1 << 31,
  symlink: 1 << 27,
  device: 1 << 26,
  namedPipe: 1 << 25,
  socket: 1 << 24,
  setuid: 1 << 23,
  setgid: 1 << 22,
  charDevice: 1 << 21,
  sticky: 1 << 20,
  irregular: 1 << 19,
} as const;
const TYPE_BITS =
  MODE.dir | MODE.symlink | MODE.device | MODE.namedPipe | MODE.socket | MODE.charDevice | MODE.irregular;

/** Entries and path lengths a context may have; far beyond any real one. */
const MAX_ENTRIES = 1 << 20;
const MAX_PATH = 4096;
/** Files asked for ahead of their turn, and the bytes they may hold in memory (a larger file waits for its turn). */
const AHEAD_FILES = 64;
const AHEAD_BYTES = 4 << 20;
/** A file's size must fit a tar header's and a JS number's. */
const MAX_FILE = 2 ** 52;

export interface FileStat {
  path: string;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  /** Unix nanoseconds. */
  modTime: bigint;
  linkname: string;
}

const fault = (what: string) => invalidParameter(`invalid file sync from the client: ${what}`);

/** Go's FileMode → a Unix mode's permission and special bits. */
export function unixPermissions(mode: number): number {
  let m = mode & 0o777;
  if (mode & MODE.setuid) m |= 0o4000;
  if (mode & MODE.setgid) m |= 0o2000;
  if (mode & MODE.sticky) m |= 0o1000;
  return m;
}

/** Compares two slash-separated paths as fsutil's walk orders them: component by component. */
function comparePaths(a: string, b: string): number {
  const pa = a.split('/');
  const pb = b.split('/');
  for (let i = 0; i < Math.min(pa.length, pb.length); i++) {
    if (pa[i] !== pb[i]) return pa[i]! < pb[i]! ? -1 : 1;
  }
  return pa.length - pb.length;
}

/** A STAT's stat checked: a clean relative path, under a listed directory, after the previous one. */
function checkStat(raw: Msg, dirs: Set<string>, previous: string | undefined): FileStat {
  const p = String(raw.path ?? '');
  if (!p) throw fault('an entry without a path');
  if (p.length > MAX_PATH) throw fault('a path is too long');
  if (p.startsWith('/') || p.includes('\0') || p.includes('\\'))
    throw fault(`path ${JSON.stringify(p)} is not a clean relative path`);
  const parts = p.split('/');
  if (parts.some((c) => c === '' || c === '.' || c === '..'))
    throw fault(`path ${JSON.stringify(p)} is not a clean relative path`);
  if (previous !== undefined && comparePaths(previous, p) >= 0)
    throw fault(`path ${JSON.stringify(p)} is out of order after ${JSON.stringify(previous)}`);
  const parent = parts.slice(0, -1).join('/');
  if (parent && !dirs.has(parent)) throw fault(`path ${JSON.stringify(p)} is not in a directory listed before it`);
  const size = BigInt((raw.size as bigint | undefined) ?? 0n);
  if (size < 0n || size > BigInt(MAX_FILE)) throw fault(`the size of ${JSON.stringify(p)} is out of range`);
  const stat: FileStat = {
    path: p,
    mode: Number(raw.mode ?? 0) >>> 0,
    uid: Number(raw.uid ?? 0),
    gid: Number(raw.gid ?? 0),
    size: Number(size),
    modTime: BigInt((raw.modTime as bigint | undefined) ?? 0n),
    linkname: String(raw.linkname ?? ''),
  };
  if (stat.mode & MODE.dir) dirs.add(p);
  return stat;
}

const isRegular = (s: FileStat) => (s.mode & TYPE_BITS) === 0 && !s.linkname;

/** A tar header for an entry; null for what a context does not carry (devices, pipes, sockets). */
type EntryHeader = Parameters<ReturnType<typeof tar.pack>['entry']>[0];

function tarHeader(s: FileStat): EntryHeader | null {
  const base = {
    mode: unixPermissions(s.mode),
    uid: s.uid,
    gid: s.gid,
    mtime: new Date(Number(s.modTime / 1_000_000n)),
  };
  if (s.mode & MODE.dir) return { ...base, name: `${s.path}/`, type: 'directory' };
  if (s.mode & MODE.symlink) return { ...base, name: s.path, type: 'symlink', linkname: s.linkname };
  if (s.mode & TYPE_BITS) return null;
  // A hard link: a regular file's second name, with the first name as its linkname.
  if (s.linkname) return { ...base, name: s.path, type: 'link', linkname: s.linkname };
  return { ...base, name: s.path, type: 'file', size: s.size };
}

/** Told the bytes received so far (stats and data), for "transferring context: NB". */
export type ReceiveProgress = (bytes: number) => void;

/** The next packet of the call; the sender's end or an ERR packet is an error here. */
async function nextPacket(call: ClientCall): Promise<Msg> {
  const p = await call.next();
  if (!p) {
    const s = await call.status;
    throw fault(s.message || 'the stream ended early');
  }
  if (Number(p.type ?? 0) === PacketType.ERR) throw fault(Buffer.from((p.data as Buffer) ?? []).toString('utf8'));
  return p;
}

/** A requested file's bytes, held until its turn in the tar comes. */
interface Incoming {
  stat: FileStat;
  chunks: Buffer[];
  got: number;
  ended: boolean;
}

/**
 * The files' bytes into the tar, in walk order. Asking for one file at a time
 * would cost a round trip through the client per file (a context of small files
 * took twice the classic builder's time): the next files are asked for ahead,
 * up to a bound of bytes held, and the sender (fsutil's, 4 workers) may answer
 * them interleaved; the file whose turn it is streams straight into the tar.
 */
async function receiveFiles(
  call: ClientCall,
  pack: ReturnType<typeof tar.pack>,
  stats: FileStat[],
  count: (n: number) => void,
): Promise<void> {
  const pending = new Map<number, Incoming>();
  const wanted = [...stats.keys()].filter((id) => isRegular(stats[id]!) && tarHeader(stats[id]!));
  let asked = 0; // into `wanted`
  let reserved = 0; // bytes of the files asked for ahead of their turn
  let out = 0; // the next entry of the tar
  let current: { id: number; entry: Writable } | undefined;
  const write = async (entry: Writable, data: Buffer) => {
    if (!entry.write(data)) await new Promise((resolve) => entry.once('drain', resolve));
  };
  const ask = () => {
    while (asked < wanted.length) {
      const id = wanted[asked]!;
      const size = stats[id]!.size;
      if (pending.size && (reserved + size > AHEAD_BYTES || pending.size >= AHEAD_FILES)) return;
      call.send({ type: PacketType.REQ, ID: id });
      pending.set(id, { stat: stats[id]!, chunks: [], got: 0, ended: false });
      reserved += size;
      asked++;
    }
  };
  /** Writes every entry whose turn it is and that is whole (or starts streaming the file whose turn it is). */
  const advance = async () => {
    while (out < stats.length) {
      const s = stats[out]!;
      const header = tarHeader(s);
      if (!header || !isRegular(s)) {
        if (header) pack.entry(header);
        out++;
        continue;
      }
      let f = pending.get(out);
      if (!f) {
        // Not asked for yet: then nothing is pending (asks go in walk order), and this one is asked now.
        ask();
        f = pending.get(out);
        if (!f) break;
      }
      if (!current) {
        const entry = pack.entry(header) as unknown as Writable;
        entry.on('error', () => undefined); // a fault destroys the pack, and its open entry with it
        current = { id: out, entry };
        reserved -= s.size;
        for (const c of f.chunks.splice(0)) await write(entry, c);
      }
      if (!f.ended) break;
      current.entry.end();
      current = undefined;
      pending.delete(out);
      out++;
    }
    ask();
  };
  await advance();
  while (out < stats.length) {
    const d = await nextPacket(call);
    const id = Number(d.ID ?? 0);
    const f = Number(d.type ?? 0) === PacketType.DATA ? pending.get(id) : undefined;
    if (!f || f.ended) throw fault(`a packet for a file not asked for (id ${id})`);
    const data = (d.data as Buffer | undefined) ?? Buffer.alloc(0);
    if (!data.length) {
      if (f.got !== f.stat.size) throw fault(`${JSON.stringify(f.stat.path)} is shorter than its ${f.stat.size} bytes`);
      f.ended = true;
      await advance();
      continue;
    }
    f.got += data.length;
    if (f.got > f.stat.size) throw fault(`${JSON.stringify(f.stat.path)} is longer than its ${f.stat.size} bytes`);
    count(data.length);
    if (current?.id === id) await write(current.entry, data);
    else f.chunks.push(data);
  }
}

/**
 * Receives a directory over a started DiffCopy call as a tar stream in walk
 * order, the regular files asked for as receiveFiles says. The stream errors on any fault
 * of the sender's.
 */
export function receiveTar(call: ClientCall, progress?: ReceiveProgress): Readable {
  const pack = tar.pack();
  // The fault reaches the reader through the iterator below, not as an event nobody may be listening to yet.
  pack.on('error', () => undefined);
  let failure: unknown;
  void (async () => {
    let bytes = 0;
    const count = (n: number) => {
      bytes += n;
      progress?.(bytes);
    };
    const stats: FileStat[] = [];
    const files = new Set<string>(); // regular files listed so far: what a hard link may name
    const dirs = new Set<string>();
    for (;;) {
      const p = await nextPacket(call);
      if (Number(p.type ?? 0) !== PacketType.STAT) throw fault('a packet other than STAT before the end of the list');
      if (!p.stat) break;
      if (stats.length >= MAX_ENTRIES) throw fault('too many entries');
      const s = checkStat(p.stat as Msg, dirs, stats.at(-1)?.path);
      if (s.linkname && !(s.mode & TYPE_BITS)) {
        // A hard link names an earlier regular file.
        if (!files.has(s.linkname)) throw fault(`hard link ${JSON.stringify(s.path)} to no earlier file`);
      }
      if (isRegular(s)) files.add(s.path);
      stats.push(s);
      count(s.path.length + 16);
    }
    await receiveFiles(call, pack, stats, count);
    call.send({ type: PacketType.FIN });
    const fin = await nextPacket(call);
    if (Number(fin.type ?? 0) !== PacketType.FIN) throw fault('no FIN after the last file');
    call.end();
    const s = await call.status;
    if (s.code !== 0) throw fault(s.message);
    pack.finalize();
  })().catch((e: unknown) => {
    failure = e;
    call.cancel();
    pack.destroy(e as Error);
  });
  // Read through an iterator: a fault that comes before the build reads (the first
  // packet's) still reaches it, where a stream errored before it is piped would not.
  async function* iterate(): AsyncGenerator<Buffer> {
    try {
      for await (const chunk of pack) yield chunk as Buffer;
    } catch (e) {
      throw failure ?? e;
    }
    if (failure) throw failure;
  }
  return Readable.from(iterate());
}

/** What a sender lists of a directory; the client's FileSync (the tests' stand-in for buildx) and FileSend outputs. */
export async function walk(root: string, exclude?: (rel: string) => boolean): Promise<FileStat[]> {
  const out: FileStat[] = [];
  const seen = new Map<string, string>(); // dev:ino of regular files → their first path (hard links)
  const visit = async (rel: string): Promise<void> => {
    const names = (await readdir(path.join(root, rel))).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    for (const name of names) {
      const p = rel ? `${rel}/${name}` : name;
      if (exclude?.(p)) continue;
      const st = await lstat(path.join(root, p), { bigint: true });
      let mode = Number(st.mode & 0o777n);
      if (st.mode & 0o4000n) mode |= MODE.setuid;
      if (st.mode & 0o2000n) mode |= MODE.setgid;
      if (st.mode & 0o1000n) mode |= MODE.sticky;
      let linkname = '';
      if (st.isDirectory()) mode |= MODE.dir;
      else if (st.isSymbolicLink()) {
        mode |= MODE.symlink;
        linkname = await readlink(path.join(root, p));
      } else if (!st.isFile()) continue;
      else if (st.nlink > 1n) {
        const key = `${st.dev}:${st.ino}`;
        const first = seen.get(key);
        if (first) linkname = first;
        else seen.set(key, p);
      }
      out.push({
        path: p,
        mode: mode >>> 0,
        uid: 0,
        gid: 0,
        size: st.isFile() && !linkname ? Number(st.size) : 0,
        modTime: st.mtimeNs,
        linkname,
      });
      if (st.isDirectory()) await visit(p);
    }
  };
  await visit('');
  return out;
}

/** A stat as a Packet's `stat` (zero values left out, as the encoder does). */
export const statMessage = (s: FileStat): Msg => ({
  path: s.path,
  mode: s.mode,
  uid: s.uid,
  gid: s.gid,
  size: BigInt(s.size),
  modTime: s.modTime,
  linkname: s.linkname,
});

/** An entry of a tree berthd sends: the engine's. */
export type SentEntry = TreeEntry;

/** Go's FileMode of an entry berthd sends: its kind's type bits and its Unix permission bits. */
export function goMode(e: SentEntry): number {
  let mode = e.mode & 0o777;
  if (e.mode & 0o4000) mode |= MODE.setuid;
  if (e.mode & 0o2000) mode |= MODE.setgid;
  if (e.mode & 0o1000) mode |= MODE.sticky;
  if (e.kind === 'dir') mode |= MODE.dir;
  else if (e.kind === 'symlink') mode |= MODE.symlink;
  else if (e.kind === 'fifo') mode |= MODE.namedPipe;
  else if (e.kind === 'char') mode |= MODE.device | MODE.charDevice;
  else if (e.kind === 'block') mode |= MODE.device;
  return mode >>> 0;
}

/**
 * A sent entry's Stat, as fsutil's sender fills it from lstat: a symlink's size
 * is its target's length (recording 05), a hard link's is 0 with the first
 * name as linkname.
 */
function sentStat(e: SentEntry): Msg {
  return {
    path: e.rel,
    mode: goMode(e),
    uid: e.uid,
    gid: e.gid,
    size: BigInt(e.kind === 'symlink' ? Buffer.byteLength(e.linkname ?? '') : e.size),
    modTime: e.mtimeNs,
    linkname: e.linkname ?? '',
    devmajor: BigInt(e.devMajor ?? 0),
    devminor: BigInt(e.devMinor ?? 0),
  };
}

/** How long a receiver told of an error has to end its side before the call is reset. */
const ERR_GRACE_MS = 2_000;

/** fsutil's sender's DATA chunks (32 KiB). */
const CHUNK = 32 << 10;

/**
 * Sends a tree over a started FileSend/DiffCopy call (`--output type=local`):
 * every entry's STAT in walk order and the empty STAT, then each regular file
 * the receiver asks for (REQ{id}, id = the index of its STAT) as DATA packets and
 * an empty DATA, until the receiver's FIN, answered with FIN. The receiver is
 * the client: a REQ for an id out of range, for what is not a regular file, or
 * for a file already sent, and any packet but REQ and FIN, end the call with an
 * ERR. `sent` is told the bytes sent so far.
 */
export async function sendTree(
  call: ClientCall,
  entries: readonly SentEntry[],
  read: (e: SentEntry) => Promise<AsyncIterable<unknown> | Iterable<unknown>>,
  sent: (bytes: number) => void = () => undefined,
): Promise<void> {
  let bytes = 0;
  const send = async (p: Msg, n: number) => {
    call.send(p);
    bytes += n;
    sent(bytes);
    await call.drained();
  };
  try {
    for (const e of entries) await send({ type: PacketType.STAT, stat: sentStat(e) }, e.rel.length + 16);
    await send({ type: PacketType.STAT }, 0);
    const done = new Set<number>();
    for (;;) {
      const p = await call.next();
      if (!p) {
        const s = await call.status;
        if (s.code === GrpcCode.CANCELLED || s.code === GrpcCode.UNAVAILABLE)
          throw new GrpcError(GrpcCode.CANCELLED, `the client went away during the export: ${s.message}`);
        throw fault(s.message || 'the receiver ended the stream before its FIN');
      }
      const type = Number(p.type ?? 0);
      if (type === PacketType.FIN) break;
      if (type === PacketType.ERR) throw fault(Buffer.from((p.data as Buffer) ?? []).toString('utf8'));
      if (type !== PacketType.REQ) throw fault(`a packet of type ${type} from the receiver`);
      const id = Number(p.ID ?? 0);
      const e = entries[id];
      if (e?.kind !== 'file') throw fault(`a request for id ${id}, which is not a regular file sent`);
      if (done.has(id)) throw fault(`a second request for id ${id}`);
      done.add(id);
      let got = 0;
      for await (const chunk of await read(e)) {
        const data = chunk as Buffer;
        for (let at = 0; at < data.length; at += CHUNK) {
          const part = data.subarray(at, at + CHUNK);
          got += part.length;
          await send({ type: PacketType.DATA, ID: id, data: part }, part.length);
        }
      }
      if (got !== e.size) throw fault(`${JSON.stringify(e.rel)} changed size while it was sent`);
      await send({ type: PacketType.DATA, ID: id }, 0);
    }
    call.send({ type: PacketType.FIN });
    call.end();
    const s = await call.status;
    if (s.code !== 0) throw fault(s.message || `the receiver ended with status ${s.code}`);
  } catch (e) {
    // As fsutil's sender: the receiver is told why (its error ends its side), then the call goes.
    call.send({ type: PacketType.ERR, data: Buffer.from(messageOf(e)) });
    call.end();
    await Promise.race([call.status, new Promise((resolve) => setTimeout(resolve, ERR_GRACE_MS).unref())]);
    call.cancel();
    throw e;
  }
}
