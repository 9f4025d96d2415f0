// What the fault tests look at from outside berthd besides test/harness/leaks.ts:
// its memory, its inotify watches, what /info reports it is waiting on, and a
// raw HTTP client that can stop reading or vanish at any point.
import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import type { Daemon } from '../harness/daemon.js';
import { waitFor } from '../harness/daemon.js';

/** berthd's resident memory in bytes (/proc/<pid>/status). */
export function rssBytes(d: Daemon): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${d.proc.pid}/status`, 'utf8'));
  return Number(m![1]) * 1024;
}

/** The inotify watches berthd holds (every `inotify wd:` line of its descriptors' fdinfo). */
export function inotifyWatches(d: Daemon): number {
  let n = 0;
  for (const fd of readdirSync(`/proc/${d.proc.pid}/fdinfo`)) {
    try {
      n += readFileSync(`/proc/${d.proc.pid}/fdinfo/${fd}`, 'utf8')
        .split('\n')
        .filter((l) => l.startsWith('inotify wd:')).length;
    } catch {
      // closed meanwhile
    }
  }
  return n;
}

export interface Activity {
  /** Handles, requests and pending waits berthd reports (/info NGoroutines). */
  tasks: number;
  /** Event streams open (/info NEventsListener). */
  listeners: number;
  /** inotify watches. */
  watches: number;
}

export async function activity(d: Daemon): Promise<Activity> {
  const r = await d.request('GET', '/info');
  return { tasks: r.json.NGoroutines, listeners: r.json.NEventsListener, watches: inotifyWatches(d) };
}

/**
 * Drops the test process's idle keep-alive connections, which berthd would
 * otherwise count among its descriptors and tasks for a few seconds.
 */
export function dropIdleConnections(): void {
  http.globalAgent.destroy();
}

/** Waits until berthd waits on no more than it did at `before` (a settled baseline). */
export async function expectActivityBack(d: Daemon, before: Activity, timeoutMs = 15_000): Promise<Activity> {
  let last: Activity | undefined;
  try {
    return await waitFor(
      async () => {
        dropIdleConnections();
        last = await activity(d);
        return (
          last.tasks <= before.tasks && last.listeners <= before.listeners && last.watches <= before.watches && last
        );
      },
      'berthd to let go of what it held for the client',
      timeoutMs,
      50,
    );
  } catch (e) {
    throw new Error(`${(e as Error).message}: before ${JSON.stringify(before)}, now ${JSON.stringify(last)}`);
  }
}

/**
 * A settled baseline: berthd's activity once the same value has been read a
 * few times in a row (timers of earlier requests run out meanwhile).
 */
export async function settledActivity(d: Daemon): Promise<Activity> {
  let prev = '';
  let same = 0;
  return waitFor(
    async () => {
      dropIdleConnections();
      const a = await activity(d);
      const key = JSON.stringify(a);
      same = key === prev ? same + 1 : 0;
      prev = key;
      return same >= 4 && a;
    },
    'berthd to settle',
    20_000,
    100,
  );
}

/** A raw HTTP/1.1 exchange over berthd's socket, for clients that stop reading or vanish. */
export interface RawStream {
  sock: net.Socket;
  /** The response head (status line and headers). */
  head: string;
  status: number;
  /** The bytes after the head as they came. */
  raw(): Buffer;
  /** The body received so far (while the socket is read), chunked transfer coding removed. */
  received(): Buffer;
  /** Whether the whole response came (its last chunk, or the end of the connection). */
  complete(): boolean;
  /** Resolves once at least n bytes after the head were received. */
  waitBytes(n: number, timeoutMs?: number): Promise<Buffer>;
}

export function openStream(
  d: Daemon,
  method: string,
  urlPath: string,
  o: { headers?: Record<string, string>; body?: string | Buffer } = {},
): Promise<RawStream> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(d.socket);
    const headers: Record<string, string> = { Host: 'localhost', ...o.headers };
    if (o.body !== undefined) headers['Content-Length'] = String(Buffer.byteLength(o.body));
    sock.on('error', reject);
    sock.write(
      `${method} ${urlPath} HTTP/1.1\r\n${Object.entries(headers)
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join('')}\r\n`,
    );
    if (o.body !== undefined) sock.write(o.body);
    let buf = Buffer.alloc(0);
    let head: string | undefined;
    let chunked = false;
    let after: Buffer[] = [];
    const stream: RawStream = {
      sock,
      head: '',
      status: 0,
      received: () => (chunked ? dechunk(Buffer.concat(after)) : Buffer.concat(after)),
      raw: () => Buffer.concat(after),
      complete: () =>
        sock.readableEnded ||
        (chunked && /(^|\r\n)0\r\n\r\n$/.test(Buffer.concat(after).subarray(-7).toString('latin1'))),
      waitBytes: (n, timeoutMs = 20_000) =>
        waitFor(
          () => {
            const got = stream.received();
            return got.length >= n && got;
          },
          `${n} bytes of ${urlPath}`,
          timeoutMs,
        ),
    };
    sock.on('data', (c: Buffer) => {
      if (head !== undefined) {
        after.push(c);
        return;
      }
      buf = Buffer.concat([buf, c]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      head = buf.subarray(0, end).toString('latin1');
      after = [buf.subarray(end + 4)];
      stream.head = head;
      stream.status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0);
      chunked = /^transfer-encoding:\s*chunked/im.test(head);
      sock.off('error', reject);
      sock.on('error', () => undefined);
      resolve(stream);
    });
    sock.once(
      'close',
      () => head === undefined && reject(new Error(`connection closed before a response to ${method} ${urlPath}`)),
    );
  });
}

/** The data of a chunked body received so far (a chunk cut short counts as far as it came). */
function dechunk(buf: Buffer): Buffer {
  const out: Buffer[] = [];
  let i = 0;
  for (;;) {
    const eol = buf.indexOf('\r\n', i);
    if (eol < 0) break;
    const size = parseInt(buf.subarray(i, eol).toString('latin1'), 16);
    if (!(size > 0)) break;
    out.push(buf.subarray(eol + 2, Math.min(buf.length, eol + 2 + size)));
    i = eol + 2 + size + 2;
    if (i > buf.length) break;
  }
  return Buffer.concat(out);
}
