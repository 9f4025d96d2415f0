// The clients' sessions (`POST /session`), by the id they gave: a build names its
// session (SolveRequest.Session), and berthd then calls the services that client
// serves (its context through FileSync, credentials through Auth…) over the
// session's HTTP/2 connection.
import type { ClientHttp2Session } from 'node:http2';

export interface BuildSession {
  id: string;
  name: string;
  sharedKey: string;
  /** The gRPC methods it serves (`/moby.filesync.v1.FileSync/DiffCopy`…), as it listed them. */
  methods: string[];
  client: ClientHttp2Session;
}

export class BuildSessions {
  private readonly byId = new Map<string, BuildSession>();

  has(id: string): boolean {
    return this.byId.has(id);
  }

  get(id: string): BuildSession | undefined {
    return this.byId.get(id);
  }

  /** Records a session; the function returned forgets it (its connection closed). */
  add(session: BuildSession): () => void {
    this.byId.set(session.id, session);
    return () => {
      if (this.byId.get(session.id) === session) this.byId.delete(session.id);
    };
  }
}
