// Starting the conmon processes (one per container start and per exec).
//
// child_process.spawn forks berthd, copying its page tables (a cost that
// grows with the daemon; docs/decisions/containers.md) before the exec. The native
// spawnDetached clones as posix_spawn does, without that copy (and without
// posix_spawn's stack mapped and unmapped at each spawn), and reaps the
// child through a pidfd on the loop. The child gets a session of its own (a
// signal to berthd's process group does not reach it), /dev/null where no pipe
// is asked for, and nothing else open.
import { closeSync } from 'node:fs';
import net from 'node:net';
import { native } from './native.js';

export interface PipeSpec {
  /** The child's fd number. */
  fd: number;
  /** More fd numbers in the child for the same end (one pipe that it knows by two names). */
  also?: number[];
  /** `from-child`: berthd reads what the child writes; `to-child`: the other way. */
  direction: 'from-child' | 'to-child';
  /**
   * berthd's end as a bare descriptor (in `fds`, closed by the caller) rather
   * than a stream: for a few bytes written, or read only if something failed
   * (non-blocking then), a stream's set-up on the loop costs more than its use.
   */
  bare?: boolean;
  /**
   * A SOCK_SEQPACKET socket pair in place of the pipe, berthd's end bare (for
   * os/seqpacket.ts's readers): each of the child's writes one packet.
   */
  packets?: boolean;
}

export interface ExitStatus {
  code: number | null;
  signal: number | null;
}

export interface Spawned {
  pid: number;
  /** berthd's ends of the pipes, by the child's fd number. */
  pipes: Map<number, net.Socket>;
  /** berthd's ends of the bare pipes, by the child's fd number: the caller closes them. */
  fds: Map<number, number>;
  /** Once it has ended; the status is also in `exit`. */
  exited: Promise<ExitStatus>;
  exit: ExitStatus | null;
}

export function spawnDetached(
  file: string,
  args: string[],
  o: { cwd: string; env: Record<string, string>; pipes: PipeSpec[] },
): Spawned {
  const childFds: number[] = new Array(
    Math.max(3, ...o.pipes.flatMap((p) => [p.fd, ...(p.also ?? [])].map((n) => n + 1))),
  ).fill(-1);
  const ours: [PipeSpec, number][] = [];
  const theirs: number[] = [];
  let pid: number;
  let done!: (s: ExitStatus) => void;
  const exited = new Promise<ExitStatus>((resolve) => (done = resolve));
  try {
    for (const p of o.pipes) {
      const [r, w] = p.packets ? native.seqpacketPair() : native.pipe(p.bare && p.direction === 'from-child');
      const [mine, child] = p.direction === 'from-child' || p.packets ? [r, w] : [w, r];
      ours.push([p, mine]);
      theirs.push(child);
      for (const n of [p.fd, ...(p.also ?? [])]) childFds[n] = child;
    }
    const env = Object.entries(o.env).map(([k, v]) => `${k}=${v}`);
    pid = native.spawnDetached(file, [file, ...args], env, o.cwd, childFds, (code, signal) => {
      spawned.exit = { code, signal };
      done(spawned.exit);
    });
  } catch (e) {
    for (const [, fd] of ours) closeSync(fd);
    throw e;
  } finally {
    for (const fd of theirs) closeSync(fd);
  }
  const bare = (p: PipeSpec) => p.bare || p.packets;
  const fds = new Map(ours.filter(([p]) => bare(p)).map(([p, fd]) => [p.fd, fd] as const));
  const pipes = new Map(
    ours
      .filter(([p]) => !bare(p))
      .map(([p, fd]) => {
        const sock = new net.Socket({
          fd,
          readable: p.direction === 'from-child',
          writable: p.direction === 'to-child',
        });
        // A child that dies closes its ends: readers see the end, writers' callbacks the EPIPE.
        // The event itself must never go unheard (it would throw in berthd).
        sock.on('error', () => undefined);
        return [p.fd, sock] as const;
      }),
  );
  const spawned: Spawned = { pid, pipes, fds, exited, exit: null };
  return spawned;
}

/**
 * Sends `signal` to pid if it is the process that started at `startTicks`
 * (clock ticks after boot, /proc/<pid>/stat's 22nd field), through a pidfd of
 * the process checked, so a pid reused meanwhile cannot get it. false when
 * that process has ended (a zombie included).
 */
export function signalProcess(pid: number, startTicks: number, signal: number): boolean {
  return native.signalProcess(pid, startTicks, signal);
}
