// Typed access to the N-API addon in src/native: the syscalls Node lacks.
import { createRequire } from 'node:module';
import path from 'node:path';
import { packageRoot } from '../../paths.js';

export interface Native {
  mount(source: string | null, target: string, fstype: string | null, flags: number, data: string | null): void;
  umount2(target: string, flags: number): void;
  /** umount2 on a thread of its own (see src/native/mounts.c). */
  umount2Async(target: string, flags: number): Promise<void>;
  mknod(path: string, mode: number, major: number, minor: number): void;
  /** A new file in a held directory, written, owned, moded and timed in one call. See src/native/files.c. */
  createFileAt(
    dirFd: number,
    name: string,
    chunks: readonly Uint8Array[],
    uid: number,
    gid: number,
    mode: number,
    mtime: number,
  ): number;
  lsetxattr(path: string, name: string, value: Buffer): void;
  /** The attribute's value, or null when the file has no such attribute. */
  lgetxattr(path: string, name: string): Buffer | null;
  llistxattr(path: string): string[];
  flock(fd: number, operation: number): void;
  /**
   * The regular files among `names` in the directory `dirFd`: stats (READ_FILES_FIELDS
   * per name: ino dev mode nlink uid gid rdev size mtime-s mtime-ns; mode 0 when not
   * read), content when at most `limit` bytes, and xattrs. See src/native/files.c.
   */
  readFiles(
    dirFd: number,
    names: string[],
    limit: number,
  ): [BigInt64Array, Array<Buffer | null>, Array<Array<[string, Buffer]> | null>];
  /** Fields per name in readFiles' stats. */
  readonly READ_FILES_FIELDS: number;
  /** Whether the path (not followed) is the root of a mount; null where the kernel cannot tell (statx). */
  isMountRoot(path: string): boolean | null;
  /** A close-on-exec memfd holding the file's bytes, sealed against any change. See src/native/spawn.c. */
  sealedCopy(path: string): number;
  /** Whether this kernel runs x32 system calls (false off x86-64). See src/native/spawn.c. */
  x32Abi(): boolean;
  /** A sha256 digest in progress (see os/sha256.ts). */
  sha256New(): Sha256Handle;
  /** Hashes the buffers, in order, on a thread-pool thread; one update at a time per handle. */
  sha256Update(handle: Sha256Handle, buffers: Buffer[]): Promise<void>;
  /** The hex digest of all updates (none may be running); the handle starts over. */
  sha256Digest(handle: Sha256Handle): string;
  /** Bytes sent on a connected socket that its peer has not read yet (SIOCOUTQ). */
  unreadBytes(fd: number): number;
  /** Whether a connected socket's peer has closed it (POLLHUP), not only shut its sending side. */
  peerClosed(fd: number): boolean;
  setSendBuffer(fd: number, bytes: number): void;
  /** A close-on-exec pipe: [read end, write end]; the read end non-blocking when asked. */
  pipe(nonBlockingRead?: boolean): [number, number];
  /** posix_spawn in a new session; fds[i] becomes the child's fd i (-1: /dev/null). See os/spawn.ts. */
  spawnDetached(
    file: string,
    argv: string[],
    envp: string[],
    cwd: string,
    fds: number[],
    onExit: (code: number | null, signal: number | null) => void,
  ): number;
  /** openat2(2): a close-on-exec fd; `resolve` is RESOLVE_* bits. See src/native/rooted.c. */
  openat2(dirFd: number, path: string, flags: number, mode: number, resolve: number): number;
  /** readlinkat(2); name '' reads the symlink an O_PATH|O_NOFOLLOW fd holds. */
  readlinkAt(dirFd: number, name: string): string;
  /** rootfs with the mounts bound over it, in a mount namespace of its own: [rootfs fd (O_PATH), namespace fd]. */
  rootView(
    rootfs: string,
    sources: string[],
    targets: string[],
    readonly: boolean[],
    namespace: boolean,
  ): [number, number];
  /** ORs flags into a directory's inode flags (chattr); false where the filesystem has none. */
  addInodeFlags(dir: string, flags: number): boolean;
  /** A SOCK_SEQPACKET unix socket client on Node's loop (see seqpacket.ts). */
  seqpacketConnect(path: string, onEvent: (type: number, value?: Buffer | string) => void): SeqpacketHandle;
  /** A connected SOCK_SEQPACKET pair, both close-on-exec: [ours (for seqpacketOpen), a child's]. */
  seqpacketPair(): [number, number];
  /** A handle for a connected seqpacket socket (seqpacketPair's); it owns the descriptor. */
  seqpacketOpen(fd: number, onEvent: (type: number, value?: Buffer | string) => void): SeqpacketHandle;
  seqpacketSetReading(handle: SeqpacketHandle, on: boolean): void;
  /** One packet; false when the socket is full (a writable event follows). */
  seqpacketWrite(handle: SeqpacketHandle, packet: Buffer): boolean;
  seqpacketShutdown(handle: SeqpacketHandle): void;
  seqpacketClose(handle: SeqpacketHandle): void;
  /** A close-on-exec NETLINK_ROUTE socket in the network namespace at nsPath, or berthd's own (null). See os/netlink.ts. */
  netlinkOpen(nsPath: string | null): number;
  /** One request, on a thread of its own: the reply messages, without the closing ack. Rejects with errno errors. */
  netlinkRequest(fd: number, message: Buffer): Promise<Buffer[]>;
  /** A write-only descriptor of `path` opened inside the network namespace at nsPath (its /proc/sys/net is that namespace's). */
  netnsOpenWrite(nsPath: string, path: string): number;
  /**
   * Sends `signal` to pid if it is the process that started at `startTicks` (clock ticks after boot),
   * through a pidfd, so a pid reused since cannot get it; false when that process is gone or a zombie.
   */
  signalProcess(pid: number, startTicks: number, signal: number): boolean;
  /** Returns the C heap's free pages, in every arena, to the kernel (malloc_trim, on a thread of its own); false when none were. */
  mallocTrimAsync(): Promise<boolean>;
  /** mallopt's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD, in bytes; false when not taken (not glibc). */
  mallocThresholds(mmapBytes: number, trimBytes: number): boolean;
  /**
   * Unmaps the resident pages of private read-only file mappings that hold no page of their own (code, read-only
   * data); they stay in the page cache. The KiB that were resident, or -1 when /proc/self/smaps cannot be read.
   */
  releaseFileMappedPages(): number;
}

declare const seqpacketBrand: unique symbol;
declare const sha256Brand: unique symbol;
export type Sha256Handle = { readonly [sha256Brand]: true };
export type SeqpacketHandle = { readonly [seqpacketBrand]: true };

const require = createRequire(import.meta.url);
export const native: Native = require(path.join(packageRoot, 'src/native/build/Release/berth_native.node'));

// Flags from <sys/mount.h>.
export const MS_RDONLY = 1;
export const MS_NOSUID = 2;
export const MS_NODEV = 4;
export const MS_NOEXEC = 8;
export const MS_BIND = 4096;
export const MNT_DETACH = 2;
export const LOCK_EX = 2;
export const LOCK_NB = 4;
/** <linux/fs.h> FS_TOPDIR_FL: `chattr +T`. */
export const FS_TOPDIR_FL = 0x00020000;
