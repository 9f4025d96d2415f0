// gRPC over an HTTP/2 session, by hand (docs/buildkit/plan.md, "gRPC framing by
// hand"): each message is a 5-byte prefix (a compressed flag, never set here, and
// a big-endian length) and its protobuf bytes; an answer is the HEADERS
// `:status 200` + `content-type: application/grpc`, its messages, and trailers
// carrying `grpc-status` (and a percent-encoded `grpc-message` on errors).
// berthd serves BuildKit's Control API this way on `/grpc`; the same framing
// serves a client of it (the tests').
import type { IncomingHttpHeaders, ServerHttp2Session, ServerHttp2Stream } from 'node:http2';
import { type EngineError, isEngineError, messageOf } from '../../errors.js';
import { decode, encode, type MessageType, type Msg } from './proto/wire.js';

/** gRPC's status codes used here. */
export const GrpcCode = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  NOT_FOUND: 5,
  FAILED_PRECONDITION: 9,
  UNIMPLEMENTED: 12,
  UNAVAILABLE: 14,
} as const;

/** The engine's error kinds that have a gRPC status of their own; the others are UNKNOWN. */
const CODE_OF_KIND: Partial<Record<EngineError['kind'], number>> = {
  invalid: GrpcCode.INVALID_ARGUMENT,
  'not-found': GrpcCode.NOT_FOUND,
  'not-implemented': GrpcCode.UNIMPLEMENTED,
  conflict: GrpcCode.FAILED_PRECONDITION,
};

/** One message longer than this ends the call: no client sends one near it (dockerd's limit is 16 MiB). */
const MAX_MESSAGE = 16 << 20;

/** A message in gRPC's length-prefixed form. */
export function frame(body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

/** Splits a stream's bytes into gRPC messages as they come. */
export class Deframer {
  private pending: Buffer = Buffer.alloc(0);

  /** The whole messages the bytes so far hold; throws on a compressed or oversized one. */
  push(chunk: Buffer): Buffer[] {
    this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    const out: Buffer[] = [];
    while (this.pending.length >= 5) {
      if (this.pending[0] !== 0)
        throw new GrpcError(GrpcCode.UNIMPLEMENTED, 'compressed gRPC messages are not supported');
      const n = this.pending.readUInt32BE(1);
      if (n > MAX_MESSAGE) throw new GrpcError(GrpcCode.INVALID_ARGUMENT, `a gRPC message of ${n} bytes is too large`);
      if (this.pending.length < 5 + n) break;
      out.push(this.pending.subarray(5, 5 + n));
      this.pending = this.pending.subarray(5 + n);
    }
    return out;
  }

  /** True when the stream ended between messages. */
  get clean(): boolean {
    return this.pending.length === 0;
  }
}

export class GrpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** An engine error's gRPC status: as dockerd's BuildKit maps its errdefs. */
export function statusOf(e: unknown): { code: number; message: string } {
  if (e instanceof GrpcError) return { code: e.code, message: e.message };
  const code = (isEngineError(e) && CODE_OF_KIND[e.kind]) || GrpcCode.UNKNOWN;
  return { code, message: messageOf(e) };
}

/** A method: its request and answer types, and what answers it (`send` once for a unary call, or per message of a stream). */
export interface Method {
  request: MessageType;
  answer: MessageType;
  /** A server stream answers any number of messages; a unary call exactly one. */
  stream?: boolean;
  /** `headers`: the call's metadata (e.g. BuildKit's `buildkit-controlapi-buildid`). */
  handle(request: Msg, send: (answer: Msg) => void, signal: AbortSignal, headers: IncomingHttpHeaders): Promise<void>;
}

/**
 * Serves `methods` (by `/package.Service/Method` path) on an HTTP/2 server
 * session: each stream is one call, its request read whole first (every
 * method here takes one request message).
 */
export function serveCalls(
  session: ServerHttp2Session,
  methods: ReadonlyMap<string, Method>,
  log: { debug(o: object, msg: string): void },
): void {
  session.on('stream', (stream, headers) => {
    const path = String(headers[':path'] ?? '');
    void call(stream, headers, path, methods.get(path)).catch((e) => log.debug({ err: e, path }, 'gRPC call failed'));
  });
}

async function call(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  path: string,
  method: Method | undefined,
): Promise<void> {
  const abort = new AbortController();
  // A stream's error (a write to a call its client gave up on) ends this call, never
  // the daemon: an 'error' with no listener would be uncaught. 'close' aborts the call.
  stream.on('error', () => undefined);
  stream.once('close', () => abort.abort(new Error('the call was closed')));
  let responded = false;
  const respond = () => {
    if (responded || stream.destroyed) return;
    responded = true;
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
  };
  const finish = (code: number, message: string) => {
    if (stream.destroyed) return;
    respond();
    stream.once('wantTrailers', () => {
      const trailers: Record<string, string> = { 'grpc-status': String(code) };
      if (message) trailers['grpc-message'] = encodeURIComponent(message);
      stream.sendTrailers(trailers);
    });
    stream.end();
  };
  try {
    if (!method) throw new GrpcError(GrpcCode.UNIMPLEMENTED, `unknown method ${path}`);
    const request = decode(method.request, await readRequest(stream));
    let sent = 0;
    await method.handle(
      request,
      (answer) => {
        if (!method.stream && sent > 0) throw new Error(`${path} answered twice`);
        sent++;
        respond();
        if (!stream.destroyed) stream.write(frame(encode(method.answer, answer)));
      },
      abort.signal,
      headers,
    );
    if (!method.stream && sent !== 1) throw new Error(`${path} gave no answer`);
    finish(GrpcCode.OK, '');
  } catch (e) {
    const s = statusOf(e);
    finish(s.code, s.message);
  }
}

/** The call's one request message (an empty body is the empty message). */
function readRequest(stream: ServerHttp2Stream): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const deframer = new Deframer();
    const messages: Buffer[] = [];
    stream.on('data', (chunk: Buffer) => {
      try {
        messages.push(...deframer.push(chunk));
      } catch (e) {
        reject(e);
      }
    });
    stream.once('end', () => {
      if (!deframer.clean || messages.length > 1)
        reject(new GrpcError(GrpcCode.INVALID_ARGUMENT, 'expected one request message'));
      else resolve(messages[0] ?? Buffer.alloc(0));
    });
    stream.once('error', reject);
  });
}
