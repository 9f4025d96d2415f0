// Attached clients of a container (or of an exec), behind one connection to
// conmon's attach socket per process: the "hub". conmon sends every read of
// the process's output to each connected socket and writes what a socket sends
// to the process's stdin; berth connects once and fans out itself, so that
// stdin follows dockerd's rules rather than conmon's (conmon would close a
// StdinOnce stdin when any connection closes, even an output-only one).
//
// dockerd's rules (container/stream/attach.go), per attached client:
//   - output: the streams it asked for, until the process's output ends;
//   - stdin only if it asked and the process has OpenStdin;
//   - when its input ends: without a TTY and with StdinOnce the process's stdin
//     is closed and output goes on; otherwise its attach ends (stdin stays open);
//   - with a TTY, the detach keys (default ctrl-p,ctrl-q) end its attach.
//
// A hub for a created container waits unconnected: the start connects it
// after `runc create` (the socket exists) and before `runc start` (nothing has
// been written yet), so an attach made before the start misses no output.
// Input sent before then is kept and delivered once connected.
import { Readable } from 'node:stream';
import { invalidParameter, messageOf } from '../../../errors.js';
import type { Logger } from '../../../log.js';
import { readPackets, SeqpacketSocket } from '../../os/seqpacket.js';
import { ATTACH_MAX_PACKET, ATTACH_STDERR } from '../../runtime/conmon.js';
import type { LogStream } from '../../runtime/logs.js';

/** A piece of output: `line` is whatever the process wrote in one go (a name shared with log entries). */
export interface OutputChunk {
  stream: LogStream;
  line: Buffer;
}

// ------------------------------------------------------------- detach keys

export const DEFAULT_DETACH_KEYS = 'ctrl-p,ctrl-q';

/** Docker's detach-key syntax: comma-separated single characters or ctrl-<a-z @ [ \ ] ^ _>. */
export function parseDetachKeys(spec: string): Buffer {
  const out: number[] = [];
  for (const key of spec.split(',')) {
    if (key.length === 1) out.push(key.charCodeAt(0));
    else if (/^ctrl-[a-z@[\\\]^_]$/.test(key)) {
      const c = key.charCodeAt(5);
      out.push(c >= 0x61 ? c - 0x60 : c - 0x40);
    } else throw invalidParameter(`Invalid detachKeys (${spec}) provided`);
  }
  return Buffer.from(out);
}

/**
 * Finds the detach sequence in input (moby/term's EscapeProxy): bytes that
 * may begin it are held back; a mismatch releases them.
 */
export class DetachScanner {
  private matched = 0;

  constructor(private readonly keys: Buffer) {}

  /** The bytes to pass on, and whether the sequence completed (bytes after it are dropped). */
  push(chunk: Buffer): { data: Buffer; detached: boolean } {
    const out: number[] = [];
    for (const b of chunk) {
      if (b === this.keys[this.matched]) {
        if (++this.matched === this.keys.length) return { data: Buffer.from(out), detached: true };
        continue;
      }
      for (let i = 0; i < this.matched; i++) out.push(this.keys[i]!);
      this.matched = b === this.keys[0] ? 1 : 0;
      if (this.matched === 0) out.push(b);
    }
    return { data: Buffer.from(out), detached: false };
  }
}

// --------------------------------------------------------------------- hub

/** An attach socket that could not be reached: gone only if the process has ended; else output is lost, which must not pass quietly. */
function logUnreachable(log: Logger, path: string, e: unknown): void {
  const code = (e as NodeJS.ErrnoException).code;
  const ended = code === 'ENOENT' || code === 'ECONNREFUSED';
  log[ended ? 'debug' : 'error']({ path, err: messageOf(e) }, 'attach socket unavailable');
}

/**
 * A process's output (stdout and stderr alike) straight to `output`, with no
 * hub and no client stream: for a reader that never holds back and gives no
 * input (a health check, every second per container). Resolves once the
 * output has ended; a socket that cannot be reached ends it at once, as it
 * ends a hub.
 */
export function readOutput(path: string, output: (data: Buffer) => void, log: Logger): Promise<void> {
  try {
    return readPackets(path, (packet) => {
      if (packet.length >= 2) output(packet.subarray(1));
    }).ended;
  } catch (e) {
    logUnreachable(log, path, e);
    return Promise.resolve();
  }
}

export interface ProcessIo {
  tty: boolean;
  /** The process has a stdin pipe (OpenStdin, or an exec's AttachStdin). */
  openStdin: boolean;
  /** The first attached client's end of input closes the process's stdin (without a TTY). */
  stdinOnce: boolean;
  /** Whether the process has ended (dead, or a zombie conmon has not reaped yet). */
  ended?: () => boolean;
}

/** Output chunks buffered per client before the hub stops reading (and conmon, then the process, waits). */
const CLIENT_HIGH_WATER = 64;
/** Input held for a process not started yet before the clients' input waits for the start. */
const PENDING_INPUT_MAX = 1024 * 1024;
/** How often a hub held back by a slow client checks whether its process has ended meanwhile. */
const STALL_CHECK_MS = 1000;

class Hub {
  private socket: SeqpacketSocket | undefined;
  private readonly sessions = new Set<AttachSession>();
  /** Input that arrived before the connection. */
  private pendingInput: Buffer[] = [];
  private pendingBytes = 0;
  /** Clients' input paused until the connection takes what is pending. */
  private inputWaiting: (() => void)[] = [];
  private stdinClosing = false;
  private finished = false;
  private stallTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly io: ProcessIo,
    private readonly log: Logger,
    private readonly gone: (hub: Hub) => void,
  ) {}

  get done(): boolean {
    return this.finished;
  }

  connect(path: string): void {
    if (this.socket || this.finished) return;
    let socket: SeqpacketSocket;
    try {
      socket = new SeqpacketSocket(path, { maxPacket: ATTACH_MAX_PACKET, highWaterMark: CLIENT_HIGH_WATER });
    } catch (e) {
      logUnreachable(this.log, path, e);
      this.finish();
      return;
    }
    this.socket = socket;
    socket.on('data', (packet: Buffer) => this.deliver(packet));
    socket.on('end', () => this.finish());
    socket.on('close', () => this.finish());
    socket.on('error', (e) => {
      this.log.debug({ err: messageOf(e) }, 'attach socket failed');
      this.finish();
    });
    let room = true;
    for (const chunk of this.pendingInput) room = socket.write(chunk);
    this.pendingInput = [];
    this.pendingBytes = 0;
    if (room) this.releaseInput();
    else socket.once('drain', () => this.releaseInput());
    if (this.stdinClosing) socket.end();
  }

  add(s: AttachSession): void {
    this.sessions.add(s);
  }

  remove(s: AttachSession): void {
    if (!this.sessions.delete(s) || this.finished) return;
    if (this.sessions.size) {
      this.maybeResume();
      return;
    }
    // No one left. A StdinOnce stdin that is still open must stay so: closing
    // the connection would make conmon close it. Output goes to no one meanwhile.
    if (this.io.openStdin && this.io.stdinOnce && !this.io.tty && !this.stdinClosing) {
      this.resume();
      return;
    }
    this.finish();
  }

  /** Writes to the process's stdin; false when the caller should wait for drain(). */
  writeStdin(data: Buffer): boolean {
    if (this.stdinClosing || this.finished) return true;
    if (!this.socket) {
      this.pendingInput.push(data);
      this.pendingBytes += data.length;
      return this.pendingBytes < PENDING_INPUT_MAX;
    }
    return this.socket.write(data);
  }

  drained(cb: () => void): void {
    if (this.finished) cb();
    else if (!this.socket) this.inputWaiting.push(cb);
    else this.socket.once('drain', cb);
  }

  private releaseInput(): void {
    for (const cb of this.inputWaiting.splice(0)) cb();
  }

  /** Closes the process's stdin (conmon does when our write side shuts down). */
  closeStdin(): void {
    if (this.stdinClosing) return;
    this.stdinClosing = true;
    this.socket?.end();
  }

  /** A client has room again: read on if every client has. */
  maybeResume(): void {
    if (!this.socket?.isPaused()) return;
    for (const s of this.sessions) if (!s.hasRoom()) return;
    this.resume();
  }

  private resume(): void {
    clearInterval(this.stallTimer);
    this.stallTimer = undefined;
    this.socket?.resume();
  }

  /**
   * A client has no room: conmon waits, and the process with it, as under
   * dockerd. But conmon also reports the process's exit, which it cannot do
   * while stuck writing to us: a client that stopped reading (a CLI suspended
   * with ctrl-z) would make stop, kill and rm -f wait for ever. So while
   * paused, the hub looks whether the process has ended; if it has, the
   * clients holding it back lose the rest of its output and conmon goes on.
   */
  private pause(): void {
    this.socket?.pause();
    if (this.stallTimer || !this.io.ended) return;
    this.stallTimer = setInterval(() => {
      if (!this.io.ended!()) return;
      this.log.debug("process ended while a client held its output back; ending that client's attach");
      for (const s of [...this.sessions]) if (!s.hasRoom()) s.endOutput();
      if (!this.finished) this.resume();
    }, STALL_CHECK_MS);
  }

  /** The output has ended (the process exited), or the start failed: every client's attach ends. */
  finish(): void {
    if (this.finished) return;
    this.finished = true;
    clearInterval(this.stallTimer);
    this.socket?.destroy();
    this.pendingInput = [];
    this.releaseInput();
    for (const s of this.sessions) s.endOutput();
    this.sessions.clear();
    this.gone(this);
  }

  private deliver(packet: Buffer): void {
    if (packet.length < 2) return;
    const chunk: OutputChunk = { stream: packet[0] === ATTACH_STDERR ? 'stderr' : 'stdout', line: packet.subarray(1) };
    let full = false;
    for (const s of this.sessions) if (!s.offer(chunk)) full = true;
    if (full) this.pause();
  }
}

// ----------------------------------------------------------------- session

export interface SessionOptions {
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  /** For a TTY: the detach sequence (parseDetachKeys). */
  detachKeys: Buffer;
  /** Output that comes before the live stream (the log, for attach with logs=1). */
  history?: () => AsyncIterable<OutputChunk>;
  /** No live output: only the history. */
  noStream?: boolean;
  /** Awaited after the live output ends (not after a detach), before the output iterable ends. */
  after?: () => Promise<unknown>;
}

/** One attached client. */
export class AttachSession {
  readonly tty: boolean;
  /** Whether the client's input goes to the process's stdin. */
  readonly stdin: boolean;
  private readonly live: Readable;
  private detachedFlag = false;
  private outputEnded = false;

  constructor(
    private readonly hub: Hub,
    private readonly o: SessionOptions,
  ) {
    this.tty = hub.io.tty;
    this.stdin = o.stdin && hub.io.openStdin;
    // Readable asks for more (read()) before it takes the chunk out of a full buffer:
    // looked at then, the buffer still seems full, the hub stayed paused and, as
    // nothing was pushed, nothing asked again (a slow client's stream froze for good).
    this.live = new Readable({
      objectMode: true,
      highWaterMark: CLIENT_HIGH_WATER,
      read: () => queueMicrotask(() => hub.maybeResume()),
    });
    if (o.noStream) this.live.push(null);
    else hub.add(this);
  }

  /** True once the client detached (its attach ended; the process runs on). */
  get detached(): boolean {
    return this.detachedFlag;
  }

  /** The output for this client: history, then live output until it ends. */
  async *output(): AsyncGenerator<OutputChunk> {
    if (this.o.history) yield* this.o.history();
    for await (const chunk of this.live) yield chunk as OutputChunk;
    if (!this.detachedFlag) await this.o.after?.();
  }

  /** Feeds the client's input to the process (or drops it, when stdin is not attached). */
  attachInput(input: Readable): void {
    if (!this.stdin) {
      input.on('data', () => undefined);
      return;
    }
    const scanner = this.tty ? new DetachScanner(this.o.detachKeys) : null;
    input.on('data', (chunk: Buffer) => {
      if (this.detachedFlag) return;
      let data = chunk;
      let detach = false;
      if (scanner) ({ data, detached: detach } = scanner.push(chunk));
      if (data.length && !this.hub.writeStdin(data)) {
        input.pause();
        this.hub.drained(() => input.resume());
      }
      if (detach) {
        this.detachedFlag = true;
        this.endOutput();
      }
    });
    input.once('end', () => this.inputEnded());
    input.once('close', () => this.inputEnded());
  }

  /** The client went away. */
  close(): void {
    if (this.stdin) this.inputEnded();
    this.endOutput();
  }

  // For the hub.

  offer(chunk: OutputChunk): boolean {
    if (this.outputEnded || this.live.destroyed) return true;
    if (chunk.stream === 'stdout' ? !this.o.stdout : !this.o.stderr) return true;
    return this.live.push(chunk);
  }

  hasRoom(): boolean {
    return this.outputEnded || this.live.destroyed || this.live.readableLength < CLIENT_HIGH_WATER;
  }

  endOutput(): void {
    if (this.outputEnded) return;
    this.outputEnded = true;
    this.hub.remove(this);
    this.live.push(null);
  }

  private closesStdin(): boolean {
    return this.hub.io.stdinOnce && !this.tty;
  }

  private inputEnded(): void {
    if (this.detachedFlag) return;
    if (this.closesStdin()) this.hub.closeStdin();
    else this.endOutput();
  }
}

// --------------------------------------------------------------- registry

/** The hubs of one kind of process (containers, or execs), by id. */
export class Attachments {
  private readonly hubs = new Map<string, Hub>();

  constructor(private readonly log: Logger) {}

  /** A new client of process `id` (its hub made on first use). */
  open(id: string, io: ProcessIo, o: SessionOptions): AttachSession {
    // History only: no hub to join, none to leave behind.
    if (o.noStream) return new AttachSession(new Hub(io, this.log, () => undefined), o);
    let hub = this.hubs.get(id);
    if (!hub || hub.done) {
      const fresh = new Hub(io, this.log.child({ attach: id }), (h) => {
        if (this.hubs.get(id) === h) this.hubs.delete(id);
      });
      this.hubs.set(id, fresh);
      hub = fresh;
    }
    return new AttachSession(hub, o);
  }

  /** Connects process `id`'s hub, if it has one, to its attach socket. */
  connect(id: string, socketPath: string): void {
    this.hubs.get(id)?.connect(socketPath);
  }

  /** Ends every client of process `id` (its start failed). */
  fail(id: string): void {
    this.hubs.get(id)?.finish();
  }
}
