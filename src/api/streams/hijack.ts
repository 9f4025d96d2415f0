// Hijacked connections (attach, exec start): the HTTP response head written by
// hand, then the raw socket in both directions.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Socket } from 'node:net';
import { peerClosed, unreadBytes, type AttachSession } from '../../engine/index.js';
import { messageOf } from '../../errors.js';
import { COMMON_HEADERS } from '../headers.js';
import { writeOutput } from './output.js';

/** Long-lived connections (hijacked, or long polls) not yet closed. */
const hijacked = new Set<Socket>();

/** Marks a connection for closing at shutdown (waits, followed logs): it would hold berthd open. */
export function closeOnShutdown(sock: Socket): void {
  if (hijacked.has(sock)) return;
  hijacked.add(sock);
  sock.once('close', () => hijacked.delete(sock));
}

/**
 * Closes every such connection (the server's preClose): an attached client
 * must not hold a shutting-down berthd open; it reads end-of-stream.
 */
export function closeHijacked(): void {
  for (const sock of hijacked) sock.destroy();
}

/**
 * Takes the connection over from Fastify and writes `head` (a response's status
 * line and headers, ended by the blank line) on it by hand.
 */
export function takeOver(req: FastifyRequest, reply: FastifyReply, head: string): Socket {
  reply.hijack();
  const sock = req.raw.socket;
  sock.write(head);
  sock.setTimeout(0);
  sock.setNoDelay(true);
  closeOnShutdown(sock);
  return sock;
}

/** Takes the connection over for a long stream; answers 101 when the client asked to upgrade. */
export function hijack(req: FastifyRequest, reply: FastifyReply, contentType: string): Socket {
  const upgrade = /tcp/i.test(String(req.headers.upgrade ?? ''));
  const status = upgrade ? 'HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n' : 'HTTP/1.1 200 OK\r\n';
  const headers = { ...COMMON_HEADERS, 'Content-Type': contentType };
  const head = `${
    status +
    Object.entries(headers)
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('')
  }\r\n`;
  const sock = takeOver(req, reply, head);
  // A client with no stdin to send half-closes at once (the docker CLI's CloseWrite);
  // Node's HTTP server would answer that by ending the socket and cutting the output
  // short, where dockerd keeps writing. The stream ends when we end it or the client closes.
  sock.removeAllListeners('end');
  sock.once('end', () => watchPeer(sock));
  return sock;
}

/** How often a half-closed hijacked connection is checked for a client that has gone. */
const PEER_CHECK_MS = 500;

const fdOf = (sock: Socket) => (sock as unknown as { _handle?: { fd?: number } })._handle?.fd;

/**
 * The client's input ended. It may have only half-closed (and still reads the
 * output), or be gone: then nothing tells, until a write fails, and a process
 * with nothing to write (an exec's `sleep`) would hold the connection, its
 * attach and its conmon for ever. The kernel can tell (POLLHUP on a unix
 * socket): checked now and then until the connection closes.
 */
function watchPeer(sock: Socket): void {
  const check = () => {
    const fd = fdOf(sock);
    if (sock.destroyed || typeof fd !== 'number' || fd < 0) return clearInterval(timer);
    if (peerClosed(fd)) sock.destroy();
  };
  const timer = setInterval(check, PEER_CHECK_MS);
  sock.once('close', () => clearInterval(timer));
  check();
}

const HEAD_READ_WAIT_MS = 100;

/**
 * Resolves once the client has read the response head (or after a while).
 * Clients such as docker-py parse the head through a buffered reader and then
 * read the raw socket: output that arrived together with the head sits in that
 * buffer and is never seen (attach with logs=1 answered at once came back
 * empty). dockerd gets away with it by being slower. Unix sockets only: there
 * the kernel says exactly what the peer has not read yet.
 */
async function headRead(sock: Socket): Promise<void> {
  const fd = fdOf(sock);
  if (typeof fd !== 'number' || fd < 0 || sock.remoteAddress !== undefined) return;
  const until = Date.now() + HEAD_READ_WAIT_MS;
  while (!sock.destroyed && unreadBytes(fd) > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 1));
}

/**
 * Runs an attach over a hijacked socket: the client's bytes to the process's
 * stdin (if attached), its output back, until the output ends; then the
 * connection is closed. The output is framed unless `raw` (by default: when
 * the process has a TTY). An exec's start picks `raw` itself: then, as with
 * dockerd, a process without a TTY sends its stdout raw and its stderr nowhere.
 */
export async function runSession(
  req: FastifyRequest,
  sock: Socket,
  session: AttachSession,
  prelude?: () => Promise<Buffer | null>,
  raw = session.tty,
): Promise<void> {
  sock.on('close', () => session.close());
  sock.on('error', () => session.close());
  session.attachInput(sock);
  try {
    await headRead(sock);
    const failure = prelude ? await prelude() : null;
    const output = raw && !session.tty ? stdoutOnly(session.output()) : session.output();
    if (failure) sock.write(failure);
    else await writeOutput(sock, output, { tty: raw });
  } catch (e) {
    req.log.warn({ err: e, msg: messageOf(e) }, 'attach stream failed');
  }
  sock.end();
}

async function* stdoutOnly<T extends { stream: string }>(chunks: AsyncIterable<T>): AsyncGenerator<T> {
  for await (const c of chunks) if (c.stream !== 'stderr') yield c;
}
