// The socket's front: the HTTP server berthd listens with as soon as its engine
// is up, before the API (Fastify and its routes, server.ts) is built. Building
// the API is a good part of a start (evaluating Fastify, adding ~150 routes,
// its boot), and the first request a client sends a starting daemon is the
// /_ping it polls with, which needs none of it: the front answers /_ping
// itself and holds every other request until the API takes over, then hands
// them to it in the order they came. The daemon builds the API right after that
// first answer, or at once when a request is held (daemon.ts), so a create sent
// after the ping waits for the API, not for anything else
// (docs/decisions/performance.md, "The front").
import http, { STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { COMMON_HEADERS } from './headers.js';
import { plainGet, sendPing } from './ping.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/**
 * The request line and headers together. Node's default is 16 KiB; the docker
 * CLI's X-Registry-Auth and X-Registry-Config (identity tokens, one entry per
 * configured registry) can pass that, and Go's server allows 1 MiB.
 */
const MAX_HEADER_BYTES = 64 * 1024;

/**
 * A request Node could not parse (headers too large, malformed, timed out):
 * answered in Docker's shape, and the connection closed, which the answer
 * says so that a client does not send its next request on it.
 */
function answerClientError(err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, message] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? [431, `request headers are larger than the ${MAX_HEADER_BYTES / 1024} KiB allowed`]
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'request timed out']
        : [400, `malformed HTTP request: ${err.message}`];
  const { headers, body } = dockerError(message);
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n${Object.entries(headers)
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join('')}\r\n${body}`,
    );
  }
  socket.destroy();
}

/** An error answer in Docker's shape that ends its connection. */
function dockerError(message: string): { headers: Record<string, string>; body: string } {
  const body = `${JSON.stringify({ message })}\n`;
  const headers = {
    ...COMMON_HEADERS,
    'Content-Type': 'application/json',
    'Content-Length': String(Buffer.byteLength(body)),
    Connection: 'close',
  };
  return { headers, body };
}

/** A request the front held when the daemon began to stop. */
function refuse(res: ServerResponse): void {
  const { headers, body } = dockerError('the daemon is shutting down');
  res.writeHead(503, headers).end(body);
}

export interface FrontOptions {
  /** Called as each request the front answers itself begins (the idle trim's clock, idle.ts). */
  activity: () => void;
  /** Called each time a request is held for the API. */
  onHold: () => void;
}

export interface Front {
  readonly server: Server;
  /** From now on `handler` serves every request; the held ones first, in order. */
  attach(handler: Handler): void;
  /**
   * Stops accepting connections and ends idle ones; resolves when those with a
   * request in flight have ended. Requests still held are refused (503).
   */
  close(): Promise<void>;
}

export function openFront(o: FrontOptions): Front {
  let handler: Handler | undefined;
  let held: [IncomingMessage, ServerResponse][] = [];
  let closing = false;
  const server = http.createServer({ maxHeaderSize: MAX_HEADER_BYTES }, (req, res) => {
    if (handler) return handler(req, res);
    const get = closing ? undefined : plainGet(req);
    if (get?.path === '/_ping') {
      o.activity();
      sendPing(res, get.method);
      return;
    }
    if (closing) {
      refuse(res);
      return;
    }
    held.push([req, res]);
    o.onHold();
  });
  server.on('clientError', answerClientError);
  return {
    server,
    attach(h) {
      handler = h;
      const waiting = held;
      held = [];
      for (const [req, res] of waiting) if (!res.destroyed) h(req, res);
    },
    close() {
      closing = true;
      const waiting = held;
      held = [];
      for (const [, res] of waiting) refuse(res);
      return new Promise((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
    },
  };
}
