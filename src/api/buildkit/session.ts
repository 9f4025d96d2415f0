// The clients' sessions (`POST /session`), by the id they gave: a build names its
// session (SolveRequest.Session), and berthd then calls the services that client
// serves (its context through FileSync, credentials through Auth…) over the
// session's HTTP/2 connection.
import type { ClientHttp2Session } from 'node:http2';
import { type ClientCall, type Metadata, startCall } from './grpc-client.js';
import { GrpcCode, GrpcError } from './grpc.js';
import * as m from './proto/messages.js';
import type { MessageType } from './proto/wire.js';
import { Registry } from './waits.js';

export interface ClientSession {
  id: string;
  name: string;
  sharedKey: string;
  /** The gRPC methods it serves (`/moby.filesync.v1.FileSync/DiffCopy`…), as it listed them. */
  methods: string[];
  client: ClientHttp2Session;
  /** Settles when its connection closed. */
  closed: Promise<void>;
}

/** How long a build waits for the session it names to connect (buildx connects it right after Solve). */
const SESSION_WAIT_MS = 10_000;

export class ClientSessions {
  private readonly sessions = new Registry<ClientSession>();

  has(id: string): boolean {
    return this.sessions.has(id);
  }

  get(id: string): ClientSession | undefined {
    return this.sessions.get(id);
  }

  /** Records a session; the function returned forgets it (its connection closed). */
  add(session: ClientSession): () => void {
    this.sessions.set(session.id, session);
    return () => this.sessions.delete(session.id, session);
  }

  /** The session of that id, waiting a while for it to connect (dockerd's manager waits so too). */
  waitFor(id: string, signal: AbortSignal, ms = SESSION_WAIT_MS): Promise<ClientSession> {
    return this.sessions.waitFor(
      id,
      signal,
      ms,
      () => new GrpcError(GrpcCode.FAILED_PRECONDITION, `no active session for ${id}: context deadline exceeded`),
    );
  }
}

/**
 * Starts a call of one of the session's services; only a method the client
 * listed is called (dockerd's Supports, case-insensitive), with dockerd's words
 * for the others.
 */
export function callSession(
  session: ClientSession,
  path: string,
  request: MessageType,
  answer: MessageType,
  metadata: Metadata = {},
): ClientCall {
  const wanted = path.toLowerCase();
  if (!session.methods.some((x) => x.toLowerCase() === wanted))
    throw new GrpcError(GrpcCode.UNIMPLEMENTED, `method ${path} not supported by the client`);
  return startCall(session.client, path, request, answer, metadata);
}

const HEALTH_CHECK = '/grpc.health.v1.Health/Check';
/**
 * BuildKit's (≥ 0.11) session health check: every 5 s, each answered within
 * 30 s, the session ended at the second failure in a row. A client gone
 * without its socket closing (a stopped process, a peer lost behind
 * `DOCKER_HOST=ssh://` or tcp) is noticed so, and its build cancelled.
 */
export const HEALTH = { everyMs: 5_000, timeoutMs: 30_000 };

/**
 * Checks the session's health while it lives, if the client serves Health
 * (buildx does; dockerode's sessions list nothing and are left alone); `fail`
 * ends the session. Returns the stop.
 */
export function watchHealth(session: ClientSession, fail: () => void, o = HEALTH): () => void {
  if (!session.methods.some((x) => x.toLowerCase() === HEALTH_CHECK.toLowerCase())) return () => undefined;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let failedBefore = false;
  const check = async (): Promise<boolean> => {
    const call = callSession(session, HEALTH_CHECK, m.HealthCheckRequest, m.HealthCheckResponse);
    call.send({});
    call.end();
    const deadline = setTimeout(() => call.cancel(), o.timeoutMs).unref();
    try {
      const answer = await call.next();
      const s = await call.status;
      return s.code === GrpcCode.OK && Number(answer?.status ?? 0) === 1; // SERVING
    } catch {
      return false;
    } finally {
      clearTimeout(deadline);
    }
  };
  const next = () => {
    timer = setTimeout(async () => {
      if (stopped) return;
      const ok = await check();
      if (stopped) return;
      if (!ok && failedBefore) return fail();
      failedBefore = !ok;
      next();
    }, o.everyMs).unref();
  };
  next();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
