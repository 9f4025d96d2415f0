// The server side of RFC 6455, as much as attach over a WebSocket needs: the
// opening handshake, frames in (masked, fragmented or not, pings answered,
// the closing handshake) and frames out (one per write, unmasked). Written
// here rather than taken from a package: berth needs neither extensions nor a
// server of its own, only a Duplex over the socket Fastify hands over, and
// this is all of it. dockerd does the same with golang.org/x/net/websocket.
import type { FastifyRequest } from 'fastify';
import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import { PassThrough, Writable } from 'node:stream';
import type { AttachSession } from '../../engine/index.js';
import { invalidParameter, messageOf } from '../../errors.js';
import { writeOutput } from './output.js';

/** The GUID RFC 6455 appends to the client's key to prove the server speaks WebSocket. */
const ACCEPT_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

const OP_CONTINUATION = 0x0;
export const OP_TEXT = 0x1;
export const OP_BINARY = 0x2;
const OP_CLOSE = 0x8;
const OP_PING = 0x9;
const OP_PONG = 0xa;

/** Close codes (RFC 6455 7.4.1). */
const NORMAL = 1000;
const PROTOCOL_ERROR = 1002;

/** How long a client has to end its side once the closing frame is sent, before the connection is cut. */
const CLOSE_WAIT_MS = 5_000;

/** Input frames are passed on as they come; the socket is paused while the reader has this much unread. */
const INPUT_HIGH_WATER = 64 * 1024;

/**
 * Checks the client's opening handshake as dockerd's x/net/websocket does
 * (refused with its words, before anything is hijacked) and returns the
 * answer's head to write once the connection is taken over.
 */
export function acceptHead(req: FastifyRequest): string {
  const h = req.headers;
  const connection = String(h.connection ?? '').toLowerCase();
  if (String(h.upgrade ?? '').toLowerCase() !== 'websocket' || !connection.includes('upgrade')) {
    throw invalidParameter('not websocket protocol');
  }
  const key = String(h['sec-websocket-key'] ?? '');
  if (key === '') throw invalidParameter('mismatch challenge/response');
  if (h['sec-websocket-version'] !== '13') throw invalidParameter('missing or bad WebSocket Version');
  const protocols = String(h['sec-websocket-protocol'] ?? '')
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean);
  // With no way to choose among several, x/net's server takes one offered protocol or none.
  if (protocols.length > 1) throw invalidParameter('missing or bad WebSocket-Protocol');
  const accept = createHash('sha1')
    .update(key + ACCEPT_GUID)
    .digest('base64');
  return (
    'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
    `Sec-WebSocket-Accept: ${accept}\r\n` +
    (protocols.length ? `Sec-WebSocket-Protocol: ${protocols[0]}\r\n` : '') +
    '\r\n'
  );
}

/** One frame from the server: FIN set, never masked. */
export function encodeFrame(opcode: number, payload: Buffer): Buffer {
  const n = payload.length;
  const head = n < 126 ? 2 : n < 0x10000 ? 4 : 10;
  const out = Buffer.allocUnsafe(head + n);
  out[0] = 0x80 | opcode;
  if (n < 126) out[1] = n;
  else if (n < 0x10000) {
    out[1] = 126;
    out.writeUInt16BE(n, 2);
  } else {
    out[1] = 127;
    out.writeBigUInt64BE(BigInt(n), 2);
  }
  payload.copy(out, head);
  return out;
}

const closePayload = (code: number) => {
  const b = Buffer.allocUnsafe(2);
  b.writeUInt16BE(code, 0);
  return b;
};

/** A WebSocket over a taken-over socket: what the client sends, and a writer of frames to it. */
export interface WebSocketStreams {
  /** The payloads of the client's data frames, in order; ends with its close frame or its connection. */
  input: PassThrough;
  /** Each write goes out as one data frame of `opcode`; end() sends the closing frame and ends the connection. */
  output: Writable;
}

/**
 * Speaks WebSocket on `sock`, whose handshake has been answered. Payloads are
 * unmasked as they arrive, never held whole: a frame may be of any size.
 */
export function webSocketStreams(sock: Socket, opcode: number): WebSocketStreams {
  const input = new PassThrough({ highWaterMark: INPUT_HIGH_WATER });
  let closeSent = false;
  const sendClose = (code: number) => {
    if (closeSent || sock.destroyed) return;
    closeSent = true;
    sock.end(encodeFrame(OP_CLOSE, closePayload(code)));
    // The client should end its side in answer; one that does not is not waited for.
    setTimeout(() => sock.destroy(), CLOSE_WAIT_MS).unref();
  };

  const output = new Writable({
    write(chunk: Buffer, _enc, done) {
      if (closeSent || sock.destroyed) return done();
      if (sock.write(encodeFrame(opcode, chunk))) done();
      else sock.once('drain', () => done());
    },
    final(done) {
      sendClose(NORMAL);
      done();
    },
  });
  sock.once('close', () => {
    input.end();
    output.destroy();
  });

  const parser = new FrameParser({
    data: (payload) => {
      if (!input.write(payload)) {
        sock.pause();
        input.once('drain', () => sock.resume());
      }
    },
    control: (op, payload) => {
      if (op === OP_PING && !closeSent) sock.write(encodeFrame(OP_PONG, payload));
      else if (op === OP_CLOSE) {
        input.end();
        // The closing handshake: the client's code echoed (RFC 6455 5.5.1), then the connection ends.
        sendClose(payload.length >= 2 ? payload.readUInt16BE(0) : NORMAL);
      }
    },
    fail: () => {
      input.end();
      sendClose(PROTOCOL_ERROR);
    },
  });
  sock.on('data', (chunk: Buffer) => parser.push(chunk));
  // A client that stops sending without a closing frame has gone: nothing more will come.
  sock.removeAllListeners('end');
  sock.once('end', () => {
    input.end();
    if (!closeSent) sock.destroy();
  });
  return { input, output };
}

interface FrameHandlers {
  data(payload: Buffer): void;
  control(opcode: number, payload: Buffer): void;
  /** The client broke the protocol (an unmasked frame, a bad opcode, a fragmented control frame). */
  fail(): void;
}

/** Reads frames from a byte stream in any pieces; data payloads are handed on piece by piece. */
class FrameParser {
  private head = Buffer.alloc(0);
  /** In a data frame's payload: bytes still to come, and where in the mask they start. */
  private left = 0;
  private maskAt = 0;
  private mask = Buffer.alloc(4);
  private control: { opcode: number; parts: Buffer[] } | null = null;
  private failed = false;

  constructor(private readonly on: FrameHandlers) {}

  push(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length && !this.failed) {
      if (this.left > 0) at = this.payload(chunk, at);
      else at = this.header(chunk, at);
    }
  }

  /** Takes header bytes from `chunk` at `at`; when the header is whole, starts its payload. */
  private header(chunk: Buffer, at: number): number {
    const need = (h: Buffer) => {
      if (h.length < 2) return 2;
      const len7 = h[1]! & 0x7f;
      return 2 + (len7 === 126 ? 2 : len7 === 127 ? 8 : 0) + (h[1]! & 0x80 ? 4 : 0);
    };
    // The header is at most 14 bytes: gathered a byte at a time until its length is known.
    while (at < chunk.length) {
      this.head = Buffer.concat([this.head, chunk.subarray(at, at + 1)]);
      at++;
      if (this.head.length >= 2 && this.head.length === need(this.head)) break;
    }
    if (this.head.length < 2 || this.head.length < need(this.head)) return at;
    const h = this.head;
    this.head = Buffer.alloc(0);
    const fin = (h[0]! & 0x80) !== 0;
    const opcode = h[0]! & 0x0f;
    const masked = (h[1]! & 0x80) !== 0;
    const len7 = h[1]! & 0x7f;
    let len = len7;
    let off = 2;
    if (len7 === 126) {
      len = h.readUInt16BE(2);
      off = 4;
    } else if (len7 === 127) {
      const big = h.readBigUInt64BE(2);
      if (big > BigInt(Number.MAX_SAFE_INTEGER)) return this.fail(chunk);
      len = Number(big);
      off = 10;
    }
    const isControl = opcode >= 0x8;
    const known = [OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG].includes(opcode);
    // A client must mask every frame (RFC 6455 5.1); control frames are short and whole.
    if (!masked || !known || (h[0]! & 0x70) !== 0 || (isControl && (!fin || len > 125))) return this.fail(chunk);
    h.copy(this.mask, 0, off, off + 4);
    this.maskAt = 0;
    this.left = len;
    this.control = isControl ? { opcode, parts: [] } : null;
    if (len === 0) this.frameDone();
    return at;
  }

  private payload(chunk: Buffer, at: number): number {
    const n = Math.min(this.left, chunk.length - at);
    const out = Buffer.allocUnsafe(n);
    for (let i = 0; i < n; i++) out[i] = chunk[at + i]! ^ this.mask[(this.maskAt + i) & 3]!;
    this.maskAt = (this.maskAt + n) & 3;
    this.left -= n;
    if (this.control) this.control.parts.push(out);
    else if (n > 0) this.on.data(out);
    if (this.left === 0) this.frameDone();
    return at + n;
  }

  private frameDone(): void {
    if (!this.control) return;
    const { opcode, parts } = this.control;
    this.control = null;
    this.on.control(opcode, Buffer.concat(parts));
  }

  private fail(chunk: Buffer): number {
    this.failed = true;
    this.on.fail();
    return chunk.length;
  }
}

/**
 * Runs an attach over a WebSocket, as dockerd's wsContainersAttach: the
 * client's data frames to the process's stdin, its output back raw (no
 * multiplexing: stdout and stderr alike, one frame per write), until the
 * output ends; then the closing frame. A client that goes ends its attach.
 */
export async function runWebSocketSession(
  req: FastifyRequest,
  sock: Socket,
  session: AttachSession,
  opcode: number,
): Promise<void> {
  const ws = webSocketStreams(sock, opcode);
  sock.once('close', () => session.close());
  sock.on('error', () => sock.destroy());
  session.attachInput(ws.input);
  try {
    await writeOutput(ws.output, session.output(), { tty: true, end: true });
  } catch (e) {
    req.log.warn({ err: e, msg: messageOf(e) }, 'websocket attach stream failed');
    sock.destroy();
  }
}
