// BuildKit's two connections (docs/buildkit/protocol.md): `POST /grpc`, where the
// client calls the daemon's Control service over HTTP/2 (berthd the server), and
// `POST /session`, where the daemon calls the client's services (FileSync, Auth,
// Secrets…; berthd the HTTP/2 client). Both are HTTP/1.1 upgrades to h2c answered
// 101, then HTTP/2 on the same socket, attached in the same tick as the 101 so
// that no byte after it reaches the HTTP/1 parser.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import http2 from 'node:http2';
import type { Socket } from 'node:net';
import type { Engine } from '../../engine/index.js';
import { invalidParameter, systemError } from '../../errors.js';
import { controlMethods } from '../buildkit/control.js';
import { serveCalls } from '../buildkit/grpc.js';
import { ClientSessions, watchHealth } from '../buildkit/session.js';
import { takeOver } from '../streams/hijack.js';

const SWITCHING = 'HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n';
/** What dockerd's and buildx's HTTP/2 ends announce (1 MiB windows and frames, for the context's bytes). */
const H2_SETTINGS = { initialWindowSize: 1 << 20, maxFrameSize: 1 << 20 };

/** dockerd's checks of an upgrade to h2c, in its words; `error` makes the error its status wants. */
function checkUpgrade(req: FastifyRequest, error: (message: string) => Error): void {
  const proto = req.headers.upgrade;
  if (!proto) throw error('no upgrade proto in request');
  if (proto.toLowerCase() !== 'h2c') throw error(`protocol ${proto} not supported`);
}

export function buildkitRoutes(app: FastifyInstance, engine: Engine): void {
  const sessions = new ClientSessions();
  const methods = controlMethods(engine, sessions);

  app.post('/grpc', async (req, reply) => {
    // dockerd answers /grpc's faults with 500, /session's with 400 (the same words).
    checkUpgrade(req, (message) => systemError(message));
    const socket = takeOver(req, reply, SWITCHING);
    const session = http2.performServerHandshake(socket, { settings: H2_SETTINGS });
    session.on('error', () => socket.destroy());
    socket.once('close', () => session.destroy());
    serveCalls(session, methods, req.log);
  });

  app.post('/session', async (req, reply) => {
    checkUpgrade(req, invalidParameter);
    const header = (name: string) => String(req.headers[name] ?? '');
    const id = header('x-docker-expose-session-uuid');
    if (!id) throw invalidParameter('no session id in request');
    if (sessions.has(id)) throw invalidParameter(`session ${id} already exists`);
    const socket: Socket = takeOver(req, reply, SWITCHING);
    const client = http2.connect('http://localhost', { createConnection: () => socket, settings: H2_SETTINGS });
    client.on('error', () => socket.destroy());
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    const session = {
      id,
      name: header('x-docker-expose-session-name'),
      sharedKey: header('x-docker-expose-session-sharedkey'),
      // One header line per method: Node's joined value would not split back.
      methods: req.raw.headersDistinct['x-docker-expose-session-grpc-method'] ?? [],
      client,
      closed,
    };
    const forget = sessions.add(session);
    const stopHealth = watchHealth(session, () => socket.destroy());
    socket.once('close', () => {
      stopHealth();
      client.destroy();
      forget();
    });
  });
}
