// The clients' sessions (`POST /session`), by the id they gave: a build names its
// session (SolveRequest.Session), and berthd then calls the services that client
// serves (its context through FileSync, credentials through Auth…) over the
// session's HTTP/2 connection.
import type { ClientHttp2Session } from 'node:http2';
import { type ClientCall, type Metadata, startCall } from './grpc-client.js';
import { GrpcCode, GrpcError } from './grpc.js';
import type { MessageType } from './proto/wire.js';

export interface BuildSession {
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

export class BuildSessions {
  private readonly byId = new Map<string, BuildSession>();
  private readonly waiting = new Map<string, Set<(s: BuildSession) => void>>();

  has(id: string): boolean {
    return this.byId.has(id);
  }

  get(id: string): BuildSession | undefined {
    return this.byId.get(id);
  }

  /** Records a session; the function returned forgets it (its connection closed). */
  add(session: BuildSession): () => void {
    this.byId.set(session.id, session);
    const waiters = this.waiting.get(session.id);
    this.waiting.delete(session.id);
    for (const w of waiters ?? []) w(session);
    return () => {
      if (this.byId.get(session.id) === session) this.byId.delete(session.id);
    };
  }

  /** The session of that id, waiting a while for it to connect (dockerd's manager waits so too). */
  waitFor(id: string, signal: AbortSignal, ms = SESSION_WAIT_MS): Promise<BuildSession> {
    const have = this.byId.get(id);
    if (have) return Promise.resolve(have);
    return new Promise((resolve, reject) => {
      const set = this.waiting.get(id) ?? new Set();
      this.waiting.set(id, set);
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        set.delete(got);
        if (!set.size && this.waiting.get(id) === set) this.waiting.delete(id);
      };
      const got = (s: BuildSession) => {
        done();
        resolve(s);
      };
      const onAbort = () => {
        done();
        reject(signal.reason);
      };
      const timer = setTimeout(() => {
        done();
        reject(new GrpcError(GrpcCode.FAILED_PRECONDITION, `no active session for ${id}: context deadline exceeded`));
      }, ms);
      set.add(got);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}

/**
 * Starts a call of one of the session's services; only a method the client
 * listed is called (dockerd's Supports, case-insensitive), with dockerd's words
 * for the others.
 */
export function callSession(
  session: BuildSession,
  path: string,
  request: MessageType,
  answer: MessageType,
  metadata: Metadata = {},
): ClientCall {
  const wanted = path.toLowerCase();
  if (!session.methods.some((m) => m.toLowerCase() === wanted))
    throw new GrpcError(GrpcCode.UNIMPLEMENTED, `method ${path} not supported by the client`);
  return startCall(session.client, path, request, answer, metadata);
}
