// gRPC in the client role over an HTTP/2 session (grpc.ts has the framing):
// berthd calls the services a build's client serves on its `/session`
// connection (FileSync…), and the tests' stand-in for buildx calls berthd's
// Control on `/grpc` the same way. A call is a stream of messages each way,
// ended by the server's trailers (`grpc-status`, `grpc-message`).
import type { ClientHttp2Session, ClientHttp2Stream, IncomingHttpHeaders } from 'node:http2';
import { Deframer, frame, GrpcCode } from './grpc.js';
import { decode, encode, type MessageType, type Msg } from './proto/wire.js';

/** gRPC metadata: plain headers; a list goes out as one header line per value (what grpc-go reads). */
export type Metadata = Record<string, string | string[]>;

export interface CallStatus {
  code: number;
  message: string;
}

/** One call in progress. */
export interface ClientCall {
  /** Sends one message. */
  send(message: Msg): void;
  /** Half-closes: no more messages from this side. */
  end(): void;
  /** Settles once what was sent has left for the peer's window (or the call ended): a sender's backpressure. */
  drained(): Promise<void>;
  /** The next message from the server; undefined once it sent its trailers (or the call ended). */
  next(): Promise<Msg | undefined>;
  /** The server's status, once it ended the call; a reset or a lost connection is CANCELLED/UNAVAILABLE. */
  readonly status: Promise<CallStatus>;
  /** Ends the call from this side (RST_STREAM CANCEL). */
  cancel(): void;
}

/**
 * A call's status from its trailers (or a trailers-only response). The message
 * is percent-encoded by the server; what does not decode (a stray `%`, bytes
 * that are not UTF-8) is kept as sent, as grpc-go does: the peer is a client's
 * process, and its words must not throw in an event handler.
 */
function statusOf(h: IncomingHttpHeaders): CallStatus {
  const raw = h['grpc-message'];
  let message = raw === undefined ? '' : String(raw);
  try {
    message = decodeURIComponent(message);
  } catch {
    // not percent-encoding: the text as it came
  }
  return { code: Number(h['grpc-status'] ?? GrpcCode.UNKNOWN), message };
}

/** Starts a call of `path` whose messages are `request` one way and `answer` the other. */
export function startCall(
  session: ClientHttp2Session,
  path: string,
  request: MessageType,
  answer: MessageType,
  metadata: Metadata = {},
): ClientCall {
  const stream: ClientHttp2Stream = session.request({
    ':method': 'POST',
    ':path': path,
    'content-type': 'application/grpc',
    te: 'trailers',
    ...metadata,
  });
  const deframer = new Deframer();
  const queue: Msg[] = [];
  const waiters: Array<(m: Msg | undefined) => void> = [];
  let ended = false;
  let failure: unknown;
  let settle!: (s: CallStatus) => void;
  const status = new Promise<CallStatus>((resolve) => {
    settle = resolve;
  });
  const finish = (s: CallStatus) => {
    if (ended) return;
    ended = true;
    settle(s);
    for (const w of waiters.splice(0)) w(undefined);
  };
  stream.on('data', (chunk: Buffer) => {
    try {
      for (const b of deframer.push(chunk)) {
        const m = decode(answer, b);
        const w = waiters.shift();
        if (w) w(m);
        else queue.push(m);
      }
    } catch (e) {
      failure = e;
      stream.close(8 /* NGHTTP2_CANCEL */);
      finish({ code: GrpcCode.INVALID_ARGUMENT, message: (e as Error).message });
    }
  });
  stream.once('trailers', (t) => finish(statusOf(t)));
  // A response with END_STREAM on its headers (trailers-only: an error before any message).
  stream.once('response', (h) => {
    if (h['grpc-status'] !== undefined) finish(statusOf(h));
  });
  stream.on('error', () => undefined);
  stream.once('close', () => {
    if (!ended)
      finish(
        stream.rstCode && stream.rstCode !== 0
          ? { code: GrpcCode.CANCELLED, message: `the call was reset (code ${stream.rstCode})` }
          : { code: GrpcCode.UNAVAILABLE, message: 'the connection closed before the call ended' },
      );
  });
  return {
    send(message) {
      if (!stream.destroyed && !stream.writableEnded) stream.write(frame(encode(request, message)));
    },
    end() {
      if (!stream.destroyed && !stream.writableEnded) stream.end();
    },
    drained() {
      if (!stream.writableNeedDrain || stream.destroyed || ended) return Promise.resolve();
      return new Promise((resolve) => {
        const done = () => {
          stream.off('drain', done);
          stream.off('close', done);
          resolve();
        };
        stream.once('drain', done);
        stream.once('close', done);
      });
    },
    next() {
      if (failure) return Promise.reject(failure);
      const m = queue.shift();
      if (m || ended) return Promise.resolve(m);
      return new Promise((resolve) => waiters.push(resolve));
    },
    status,
    cancel() {
      if (!stream.destroyed) stream.close(8 /* NGHTTP2_CANCEL */);
    },
  };
}
