// What a client reads of a container, and its terminal: logs, attach, resize,
// top, stats and sizes.
import path from 'node:path';
import { conflict, notImplemented } from '../../../errors.js';
import type { ImageService } from '../../images/service.js';
import { duBytes } from '../../os/dirs.js';
import { readLog, readLogBatches, type LogEntry, type ReadLogOptions } from '../../runtime/logs.js';
import { processEnded } from '../../runtime/proc.js';
import type { Runtime } from '../../runtime/runtime.js';
import { type Container, isActive, isRunning } from '../container.js';
import { logDriver } from '../create/logconfig.js';
import type { ContainerLookup } from '../lookup.js';
import { cgroupsPath } from '../spec/cgroups.js';
import type { Waits } from '../waits.js';
import { type Attachments, DEFAULT_DETACH_KEYS, parseDetachKeys, type AttachSession } from './attach.js';
import { cgroupStats, type NetworkStats, networkStats, top } from './stats.js';

/** What a client's reads are given. */
export interface IoDeps {
  lookup: Pick<ContainerLookup, 'find' | 'byId'>;
  waits: Pick<Waits, 'add'>;
  /** Clients attached to containers' stdio (attach.ts). */
  attachments: Pick<Attachments, 'open' | 'connect'>;
  runtime: Pick<Runtime, 'attachSocket' | 'resize'>;
  images: Pick<ImageService, 'layersOf'>;
  /** The daemon's parent cgroup of containers (--cgroup-parent). */
  cgroupParent?: string;
  /** The start of a container under way, if any (run/lifecycle.ts, above this module). */
  startOf(id: string): Promise<unknown> | undefined;
}

export interface AttachOptions {
  logs: boolean;
  stream: boolean;
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  detachKeys?: string;
}

export class ContainerIo {
  constructor(private readonly deps: IoDeps) {}

  /**
   * The container's output from its log file. With follow, it goes on until the
   * container stops (or `signal` aborts).
   */
  logs(ref: string, o: Omit<ReadLogOptions, 'signal'> & { signal?: AbortSignal }): AsyncGenerator<LogEntry> {
    return flatten(this.logBatches(ref, o));
  }

  /** logs' entries in batches, as they are read (a reader that writes many at once, the API's). */
  logBatches(
    ref: string | Container,
    o: Omit<ReadLogOptions, 'signal'> & { signal?: AbortSignal },
  ): AsyncGenerator<LogEntry[]> {
    const c = typeof ref === 'string' ? this.deps.lookup.find(ref) : ref;
    // Refused before anything is streamed, as dockerd (501).
    if (logDriver(c) === 'none') throw notImplemented('configured logging driver does not support reading');
    return this.readLogs(c, o);
  }

  private async *readLogs(
    c: Container,
    o: Omit<ReadLogOptions, 'signal'> & { signal?: AbortSignal },
  ): AsyncGenerator<LogEntry[]> {
    // Without follow the read ends at the log's end, and nothing is stopped by a signal.
    if (!o.follow) {
      yield* readLogBatches(c.logPath, o);
      return;
    }
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    o.signal?.addEventListener('abort', onAbort, { once: true });
    if (!isActive(c) && !this.deps.startOf(c.id)) stop.abort();
    // Ends the follow at the exit; forgotten (stop aborts it) if the reader ends first.
    else this.deps.waits.add(c.id, 'next-exit', stop.signal).then(onAbort, () => undefined);
    try {
      yield* readLogBatches(c.logPath, { ...o, signal: stop.signal });
    } finally {
      o.signal?.removeEventListener('abort', onAbort);
      stop.abort();
    }
  }

  /**
   * Attaches a client to the container's stdio (attach.ts): the log so far
   * with `logs`, then with `stream` the live output until the process ends,
   * and its input to the process's stdin with `stdin` (and OpenStdin). A
   * created container may be attached before it starts: the start then waits
   * for the attach to be connected, so no output is missed. One that has
   * ended gives what dockerd gives: its log with `logs`, and a stream that
   * ends at once (a client that attaches right after a start may come late
   * for a quick command: docker-compose's `run --rm`).
   */
  attach(ref: string, o: AttachOptions): AttachSession {
    const { lookup, attachments, runtime } = this.deps;
    const c = lookup.find(ref);
    const ended = c.status === 'exited' || c.status === 'dead';
    if (c.status === 'paused') throw conflict(`You cannot attach to a paused container, unpause it first`);
    const detachKeys = parseDetachKeys(o.detachKeys || DEFAULT_DETACH_KEYS);
    const io = {
      tty: c.config.Tty,
      openStdin: c.config.OpenStdin,
      stdinOnce: c.config.StdinOnce,
      ended: () => processEnded(lookup.byId(c.id)?.pid),
    };
    const session = attachments.open(c.id, io, {
      stdin: o.stdin,
      stdout: o.stdout,
      stderr: o.stderr,
      detachKeys,
      noStream: !o.stream || ended,
      ...(o.logs ? { history: () => readLog(c.logPath, { stdout: o.stdout, stderr: o.stderr }) } : {}),
    });
    if (o.stream && isRunning(c)) attachments.connect(c.id, runtime.attachSocket(c.id));
    return session;
  }

  /** `POST /containers/{id}/resize`: the terminal's size, through conmon. */
  async resize(ref: string, height: number, width: number): Promise<void> {
    const c = this.deps.lookup.find(ref);
    if (!isRunning(c)) throw conflict(`Container ${c.id} is not running`);
    if (!c.config.Tty) return;
    await this.deps.runtime.resize(c.bundleDir, height, width);
  }

  /** Bytes in the container's writable layer (SizeRw), and with its image's (SizeRootFs). */
  async sizes(c: Container): Promise<{ SizeRw: number; SizeRootFs: number }> {
    const rw = await duBytes(path.join(c.bundleDir, 'upper'));
    const image = this.deps.images.layersOf(c.imageId).reduce((a, l) => a + l.size, 0);
    return { SizeRw: rw, SizeRootFs: rw + image };
  }

  /** `GET /containers/{id}/stats?stream=0`. */
  async stats(ref: string) {
    const c = this.deps.lookup.find(ref);
    const stats = await cgroupStats(cgroupsPath(c, this.deps.cgroupParent), c.id, c.name);
    const networks = await this.networksOf(c);
    // dockerd leaves the key out when there is no interface (network none, host, a stopped container).
    return Object.keys(networks).length ? { ...stats, networks } : stats;
  }

  /**
   * The counters of the interfaces in the container's network namespace (its
   * own, or the one it joined with container:<id>); none in the host's, which
   * are not the container's.
   */
  private async networksOf(c: Container): Promise<Record<string, NetworkStats>> {
    if (!isRunning(c) || !c.pid) return {};
    let owner = c;
    for (let hops = 0; owner.hostConfig.NetworkMode.startsWith('container:') && hops < 10; hops++) {
      const donor = owner.hostConfig.NetworkMode.slice('container:'.length);
      try {
        owner = this.deps.lookup.find(donor);
      } catch {
        return {};
      }
    }
    if (owner.hostConfig.NetworkMode === 'host') return {};
    return networkStats(c.pid);
  }

  /** `GET /containers/{id}/top`. */
  async top(ref: string, psArgs?: string) {
    const c = this.deps.lookup.find(ref);
    if (!isRunning(c)) throw conflict(`Container ${c.id} is not running`);
    return top(cgroupsPath(c, this.deps.cgroupParent), psArgs || '-ef');
  }
}

async function* flatten<T>(batches: AsyncIterable<T[]>): AsyncGenerator<T> {
  for await (const batch of batches) yield* batch;
}
