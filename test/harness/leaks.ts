// What a berthd holds on the machine, counted from outside: its descriptors,
// the mounts under its roots, the conmon monitors of its containers, the temp
// files of its stores, the blobs and layer trees no image records, runc's
// state, and the size of its database. The fault tests take a snapshot before
// a fault and after recovery and compare: nothing may be left behind.
import { existsSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import path from 'node:path';
import Database from '../../src/engine/store/sqlite.js';
import { afterAll, beforeAll } from 'vitest';
import type { Daemon } from './daemon.js';

export interface Holdings {
  /** berthd's open descriptors, as their targets (sockets and pipes by kind only, TCP ones by peer). */
  fds: string[];
  /** berthd's threads (a worker thread holds descriptors of its own event loop). */
  threads: number;
  /** Mount points under the data root or the exec root. */
  mounts: string[];
  /** conmon processes whose command line names this daemon's exec root. */
  conmons: number[];
  /** Entries in the stores' temp directories (ingests, staged layers, deletions under way, containers being deleted). */
  temps: string[];
  /** Blob files no record holds (no image, and no layer made from it: berthd's own rule). */
  orphanBlobs: string[];
  /** Layer directories no layer row names. */
  orphanLayers: string[];
  /** runc state directories. */
  runcStates: string[];
  /** Container directories under the data root. */
  containerDirs: string[];
  /** Size of berth.db plus its WAL, in bytes. */
  dbBytes: number;
}

const list = (dir: string): string[] => (existsSync(dir) ? readdirSync(dir) : []);

/**
 * berthd's TCP connections (a registry client's), socket inode → `tcp:->ip:port`
 * of the peer, from /proc/<pid>/net/tcp (IPv4, as the tests' registries listen).
 */
function tcpPeers(pid: number): Map<string, string> {
  const out = new Map<string, string>();
  let text = '';
  try {
    text = readFileSync(`/proc/${pid}/net/tcp`, 'utf8');
  } catch {
    return out;
  }
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    const [addr, port] = (f[2] ?? '').split(':');
    if (!addr || !port || !f[9]) continue;
    const ip = [3, 2, 1, 0].map((i) => parseInt(addr.slice(i * 2, i * 2 + 2), 16)).join('.');
    out.set(f[9], `tcp:->${ip}:${parseInt(port, 16)}`);
  }
  return out;
}

/** The kind of a descriptor's target, with unstable inode numbers left out (a TCP socket: its peer). */
function fdTarget(pid: number, fd: string, tcp: Map<string, string>): string | null {
  try {
    const t = readlinkSync(`/proc/${pid}/fd/${fd}`);
    const peer = /^socket:\[(\d+)\]$/.exec(t)?.[1];
    if (peer && tcp.has(peer)) return tcp.get(peer)!;
    return /^(socket|pipe|anon_inode):/.test(t) ? t.replace(/\[\d+\]$/, '') : t;
  } catch {
    return null; // closed while we looked
  }
}

/** Every process whose command line starts with conmon and mentions `needle`. */
export function conmonsFor(needle: string): number[] {
  const out: number[] = [];
  for (const name of list('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const argv = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
      if (path.basename(argv[0] ?? '') === 'conmon' && argv.some((a) => a.includes(needle))) out.push(Number(name));
    } catch {
      // gone
    }
  }
  return out.sort((a, b) => a - b);
}

/** Mount points (from our own mountinfo: berthd shares the host's mount namespace) under the given roots. */
export function mountsUnder(...roots: string[]): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => roots.some((r) => m === r || m.startsWith(`${r}/`)))
    .sort();
}

/** What berthd records, read from its database (read-only; berthd may be running). */
function recorded(dataRoot: string): { blobs: Set<string>; layerDirs: Set<string> } {
  const file = path.join(dataRoot, 'berth.db');
  if (!existsSync(file)) return { blobs: new Set(), layerDirs: new Set() };
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    const held = 'SELECT digest FROM image_blobs UNION SELECT blob FROM layers WHERE blob IS NOT NULL';
    const blobs = new Set((db.prepare(held).all() as { digest: string }[]).map((r) => r.digest));
    const layerDirs = new Set((db.prepare('SELECT dir FROM layers').all() as { dir: string }[]).map((r) => r.dir));
    return { blobs, layerDirs };
  } finally {
    db.close();
  }
}

export function holdings(d: Daemon): Holdings {
  const pid = d.proc.exitCode === null && d.proc.signalCode === null ? d.proc.pid : undefined;
  const tcp = pid ? tcpPeers(pid) : new Map<string, string>();
  const fds = pid
    ? list(`/proc/${pid}/fd`)
        .map((fd) => fdTarget(pid, fd, tcp))
        .filter((t): t is string => t !== null)
        .sort()
    : [];
  const threads = pid ? list(`/proc/${pid}/task`).length : 0;
  const { blobs, layerDirs } = recorded(d.dataRoot);
  const blobDir = path.join(d.dataRoot, 'content/blobs/sha256');
  const size = (f: string) => (existsSync(f) ? statSync(f).size : 0);
  return {
    fds,
    threads,
    mounts: mountsUnder(d.dataRoot, d.execRoot),
    conmons: conmonsFor(d.execRoot),
    temps: [
      ...list(path.join(d.dataRoot, 'content/ingest')).map((n) => `content/ingest/${n}`),
      ...list(path.join(d.dataRoot, 'layers/tmp')).map((n) => `layers/tmp/${n}`),
      ...list(path.join(d.dataRoot, 'containers'))
        .filter((n) => n.startsWith('.removing-'))
        .map((n) => `containers/${n}`),
    ].sort(),
    orphanBlobs: list(blobDir)
      .filter((h) => !blobs.has(`sha256:${h}`))
      .sort(),
    orphanLayers: list(path.join(d.dataRoot, 'layers'))
      .filter((n) => n !== 'tmp' && n !== 'l' && !layerDirs.has(n))
      .sort(),
    runcStates: list(path.join(d.execRoot, 'runc')).sort(),
    containerDirs: list(path.join(d.dataRoot, 'containers'))
      .filter((n) => /^[0-9a-f]{64}$/.test(n))
      .sort(),
    dbBytes: size(path.join(d.dataRoot, 'berth.db')) + size(path.join(d.dataRoot, 'berth.db-wal')),
  };
}

/** `before` plus what an operation that completed legitimately holds. */
export function allowing(before: Holdings, extra: Partial<Holdings>): Holdings {
  const out = { ...before };
  for (const [k, v] of Object.entries(extra) as [keyof Holdings, unknown][]) {
    if (Array.isArray(v)) (out as Record<string, unknown>)[k] = [...(before[k] as unknown[]), ...v];
  }
  return out;
}

/**
 * The idle keep-alive connections a registry client may pool with one
 * registry (`host` as 127.0.0.1:PORT): one per download at once
 * (max-concurrent-downloads, 3 by default) and one for the manifest. They
 * are a pool, not a leak; more than that would be.
 */
export const registryPool = (host: string, downloads = 3): Partial<Holdings> => ({
  fds: Array.from({ length: downloads + 1 }, () => `tcp:->${host}`),
});

/** What `b` has that `a` has not, counting repeats. */
function extra<T>(a: readonly T[], b: readonly T[]): T[] {
  const left = [...a];
  return b.filter((x) => {
    const i = left.indexOf(x);
    if (i === -1) return true;
    left.splice(i, 1);
    return false;
  });
}

/**
 * The descriptors of a worker thread's own event loop. berthd's extraction
 * threads come with work and go after a while idle, so a daemon that pulled
 * a moment ago holds these once per thread more than one that did not (or a
 * restarted one): they are forgiven once per extra thread, and nothing else is.
 */
const THREAD_LOOP = ['anon_inode:[eventfd]', 'anon_inode:[eventpoll]', 'pipe:', 'pipe:'];
/** On Node 24 (its libuv), each event loop also holds an io_uring where the kernel has them. */
const THREAD_RING = 'anon_inode:[io_uring]';

/**
 * The differences between two snapshots that mean something leaked: more
 * descriptors, mounts, monitors, temp files, orphans, runc states or container
 * directories than before. An empty list means nothing did.
 */
export function leaked(before: Holdings, after: Holdings): string[] {
  const out: string[] = [];
  let fds = extra(before.fds, after.fds);
  for (let t = after.threads - before.threads; t > 0 && THREAD_LOOP.every((x) => fds.includes(x)); t--) {
    fds = extra(THREAD_LOOP, fds);
    if (fds.includes(THREAD_RING)) fds = extra([THREAD_RING], fds);
  }
  if (fds.length) out.push(`fds: ${fds.slice(0, 10).join(', ')}${fds.length > 10 ? ` (+${fds.length - 10})` : ''}`);
  for (const key of [
    'mounts',
    'conmons',
    'temps',
    'orphanBlobs',
    'orphanLayers',
    'runcStates',
    'containerDirs',
  ] as const) {
    const more = extra<string | number>(before[key], after[key]);
    if (more.length)
      out.push(`${key}: ${more.slice(0, 10).join(', ')}${more.length > 10 ? ` (+${more.length - 10})` : ''}`);
  }
  return out;
}

/**
 * Waits until nothing in `before`'s terms has leaked (background deletions and
 * exits settle a moment after the answers), failing with what is still held.
 */
export async function expectNoLeaks(d: Daemon, before: Holdings, timeoutMs = 10_000): Promise<Holdings> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const now = holdings(d);
    const left = leaked(before, now);
    if (left.length === 0) return now;
    if (Date.now() > deadline) throw new Error(`berthd still holds what it held not before:\n  ${left.join('\n  ')}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * In a describe: what the daemon holds when its tests begin is all it holds
 * once they have ended (given `timeoutMs` to let go of it).
 */
export function expectNoLeaksAcross(daemon: () => Daemon, timeoutMs?: number): void {
  let held: Holdings;
  beforeAll(() => {
    held = holdings(daemon());
  });
  afterAll(async () => {
    await expectNoLeaks(daemon(), held, timeoutMs);
  });
}
