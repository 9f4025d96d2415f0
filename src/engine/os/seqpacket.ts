// A SOCK_SEQPACKET unix socket client as a Node Duplex (conmon's attach
// sockets are seqpacket, which Node's net cannot open). The readable side is
// in object mode: each chunk is one packet, boundaries kept. Written bytes are
// sent in packets of at most `maxPacket` bytes; end() shuts the write side
// down (the peer reads end-of-file) while reading goes on. Backed by
// src/native: a uv_poll_t on Node's loop, no polling.
//
// A unix socket's path is limited to 108 bytes (sun_path), and conmon's
// sockets sit deep under the exec root (<exec-root>/conmon/<64-hex id>/attach).
// So the connect never names the socket by its full path: the directory is
// opened and the socket reached as /proc/self/fd/<n>/<name>, which is short
// whatever the exec root (conmon binds its sockets the same way).
import { closeSync, constants, openSync } from 'node:fs';
import path from 'node:path';
import { Duplex } from 'node:stream';
import { native, type SeqpacketHandle } from './native.js';

const DATA = 0;
const END = 1;
const WRITABLE = 2;
const ERROR = 3;

export interface SeqpacketOptions {
  /** The largest packet to send; longer writes are split. */
  maxPacket?: number;
  /** Packets buffered before reading pauses. */
  highWaterMark?: number;
}

/** Connects to the socket at `socketPath` through a descriptor of its directory (see above). */
function connectShort(
  socketPath: string,
  onEvent: (type: number, value: Buffer | string | undefined) => void,
): SeqpacketHandle {
  const dir = openSync(path.dirname(socketPath), constants.O_RDONLY | constants.O_DIRECTORY); // libuv opens with O_CLOEXEC
  try {
    return native.seqpacketConnect(`/proc/self/fd/${dir}/${path.basename(socketPath)}`, onEvent);
  } finally {
    closeSync(dir);
  }
}

export class SeqpacketSocket extends Duplex {
  private readonly handle: SeqpacketHandle;
  private readonly maxPacket: number;
  private onWritable: (() => void) | undefined;

  /** Connects at once (a unix connect never waits); throws with an errno `code` (ENOENT, ECONNREFUSED…). */
  constructor(socketPath: string, o: SeqpacketOptions = {}) {
    super({ readableObjectMode: true, readableHighWaterMark: o.highWaterMark ?? 64, allowHalfOpen: true });
    this.maxPacket = o.maxPacket ?? 32 * 1024;
    this.handle = connectShort(socketPath, (type, value) => this.onEvent(type, value));
  }

  private onEvent(type: number, value: Buffer | string | undefined): void {
    if (type === DATA) {
      if (!this.push(value)) native.seqpacketSetReading(this.handle, false);
    } else if (type === END) {
      this.push(null);
    } else if (type === WRITABLE) {
      const resume = this.onWritable;
      this.onWritable = undefined;
      resume?.();
    } else if (type === ERROR) {
      const err = Object.assign(new Error(`seqpacket: ${String(value)}`), { code: value });
      this.destroy(err);
    }
  }

  override _read(): void {
    native.seqpacketSetReading(this.handle, true);
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    let off = 0;
    const next = (): void => {
      try {
        while (off < chunk.length) {
          const end = Math.min(chunk.length, off + this.maxPacket);
          if (!native.seqpacketWrite(this.handle, chunk.subarray(off, end))) {
            this.onWritable = next;
            return;
          }
          off = end;
        }
      } catch (e) {
        cb(e as Error);
        return;
      }
      cb();
    };
    next();
  }

  override _final(cb: (err?: Error | null) => void): void {
    try {
      native.seqpacketShutdown(this.handle);
      cb();
    } catch (e) {
      cb(e as Error);
    }
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.onWritable = undefined;
    native.seqpacketClose(this.handle);
    cb(err);
  }
}

/** Packets being read to their end (PacketReader). */
export interface PacketReader {
  /** Settles at the end of the packets, or at an error. */
  ended: Promise<void>;
  /** Stops reading and closes the socket; `ended` settles. */
  close(): void;
}

/**
 * Reads a socket to its end, each packet to `onPacket`, without a stream's
 * machinery: for a reader that never holds back, set up at every exec (a
 * health check's output, conmon's reports).
 */
function readAll(
  open: (onEvent: (type: number, value?: Buffer | string) => void) => SeqpacketHandle,
  onPacket: (packet: Buffer) => void,
): PacketReader {
  let done!: () => void;
  const ended = new Promise<void>((resolve) => (done = resolve));
  const close = () => {
    native.seqpacketClose(handle);
    done();
  };
  const handle = open((type, value) => {
    if (type === DATA) onPacket(value as Buffer);
    else if (type === END || type === ERROR) close();
  });
  native.seqpacketSetReading(handle, true);
  return { ended, close };
}

/** Reads the socket at `socketPath` (see readAll); throws as SeqpacketSocket does when it cannot connect. */
export function readPackets(socketPath: string, onPacket: (packet: Buffer) => void): PacketReader {
  return readAll((onEvent) => connectShort(socketPath, onEvent), onPacket);
}

/** Reads the connected socket `fd` (native.seqpacketPair's; the reader owns it from here on), see readAll. */
export function readPacketsFrom(fd: number, onPacket: (packet: Buffer) => void): PacketReader {
  return readAll((onEvent) => native.seqpacketOpen(fd, onEvent), onPacket);
}
