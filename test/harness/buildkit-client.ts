// The project's stand-in for buildx v0.10.5 (CI has no buildx): the two
// connections of docs/buildkit/protocol.md — `POST /grpc`, an HTTP/2 client
// calling berthd's Control and LLBBridge, and `POST /session`, an HTTP/2
// *server* serving Health and FileSync (an fsutil sender over a temp dir) —
// and buildx's order of calls for `docker build` (protocol.md §3.1).
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import path from 'node:path';
import { type FileStat, statMessage, walk } from '../../src/api/buildkit/fsutil.js';
import { type CallStatus, type ClientCall, startCall } from '../../src/api/buildkit/grpc-client.js';
import { Deframer, frame } from '../../src/api/buildkit/grpc.js';
import * as m from '../../src/api/buildkit/proto/messages.js';
import { decode, encode, type MessageType, type Msg } from '../../src/api/buildkit/proto/wire.js';
import { ignoreMatcher } from '../../src/engine/builder/dockerignore.js';

const CONTROL = '/moby.buildkit.v1.Control';
const BRIDGE = '/moby.buildkit.v1.frontend.LLBBridge';

/** What buildx lists for a build's session (recording 01). */
export const BUILD_METHODS = [
  '/grpc.health.v1.Health/Check',
  '/grpc.health.v1.Health/Watch',
  '/moby.filesync.v1.FileSync/DiffCopy',
  '/moby.filesync.v1.FileSync/TarStream',
  '/moby.filesync.v1.Auth/Credentials',
  '/moby.buildkit.secrets.v1.Secrets/GetSecret',
  '/moby.sshforward.v1.SSH/CheckAgent',
];

/** A client-made id as buildx makes them: 25 of [a-z0-9]. */
export const newId = (): string =>
  [...randomBytes(25)].map((b) => 'abcdefghijklmnopqrstuvwxyz0123456789'[b % 36]).join('');

/** An HTTP/1.1 upgrade on a socket of its own: the answer's head, and the socket after it. */
export function upgrade(
  socketPath: string,
  urlPath: string,
  headers: Array<[string, string]>,
): Promise<{ head: string; socket: net.Socket }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(socketPath);
    socket.once('error', reject);
    const lines = [['Host', ''], ['Content-Length', '0'], ['Connection', 'Upgrade'], ...headers]
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('');
    socket.write(`POST ${urlPath} HTTP/1.1\r\n${lines}\r\n`);
    let got = Buffer.alloc(0);
    const onData = (c: Buffer) => {
      got = Buffer.concat([got, c]);
      const end = got.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.off('data', onData);
      socket.pause();
      const rest = got.subarray(end + 4);
      if (rest.length) socket.unshift(rest);
      resolve({ head: got.subarray(0, end + 4).toString('latin1'), socket });
    };
    socket.on('data', onData);
  });
}

export interface Answer extends CallStatus {
  messages: Msg[];
}

/** Reads a call to its end. */
export async function drain(call: ClientCall): Promise<Answer> {
  const messages: Msg[] = [];
  for (let msg = await call.next(); msg; msg = await call.next()) messages.push(msg);
  return { messages, ...(await call.status) };
}

/** The `/grpc` connection: buildx's calls to berthd. */
export class Control {
  private constructor(readonly client: http2.ClientHttp2Session) {}

  static async open(socketPath: string): Promise<Control> {
    const { head, socket } = await upgrade(socketPath, '/grpc', [['Upgrade', 'h2c']]);
    if (!head.startsWith('HTTP/1.1 101 ')) throw new Error(`POST /grpc: ${head}`);
    const client = http2.connect('http://localhost', { createConnection: () => socket });
    return new Control(client);
  }

  start(path: string, req: MessageType, ans: MessageType, body: Msg, buildId?: string): ClientCall {
    const call = startCall(this.client, path, req, ans, buildId ? { 'buildkit-controlapi-buildid': buildId } : {});
    call.send(body);
    call.end();
    return call;
  }

  call(path: string, req: MessageType, ans: MessageType, body: Msg, buildId?: string): Promise<Answer> {
    return drain(this.start(path, req, ans, body, buildId));
  }

  close(): void {
    this.client.close();
  }
}

/** What a session's FileSync sends for a call, instead of its files: raw packets (hostile clients). */
export type RawPackets = (sync: SyncCall) => Msg[] | undefined;

export interface SessionOptions {
  id?: string;
  /** FileSync directories by name (`context`, `dockerfile`). */
  dirs?: Record<string, string>;
  methods?: string[];
  /** Overrides the sender for a directory (return undefined to serve it normally). */
  raw?: RawPackets;
}

/** A session's DiffCopy call as berthd made it. */
export interface SyncCall {
  dirName: string;
  followPaths: string[];
  excludes: string[];
  /** The packets berthd sent (REQ, FIN). */
  received: Msg[];
}

/** The `/session` connection: buildx's side, serving Health and FileSync. */
export class Session {
  readonly syncs: SyncCall[] = [];
  private constructor(
    readonly id: string,
    readonly socket: net.Socket,
    private readonly server: http2.ServerHttp2Session,
  ) {}

  static async open(socketPath: string, o: SessionOptions = {}): Promise<Session> {
    const id = o.id ?? newId();
    const headers: Array<[string, string]> = [
      ['Upgrade', 'h2c'],
      ...(o.methods ?? BUILD_METHODS).map((x): [string, string] => ['X-Docker-Expose-Session-Grpc-Method', x]),
      ['X-Docker-Expose-Session-Name', 'ctx'],
      ['X-Docker-Expose-Session-Sharedkey', 'ctx:test'],
      ['X-Docker-Expose-Session-Uuid', id],
    ];
    const { head, socket } = await upgrade(socketPath, '/session', headers);
    if (!head.startsWith('HTTP/1.1 101 ')) throw new Error(`POST /session: ${head}`);
    const server = http2.performServerHandshake(socket);
    server.on('error', () => undefined);
    const session = new Session(id, socket, server);
    server.on('stream', (stream, h) => session.serve(stream, h, o));
    socket.resume();
    return session;
  }

  private serve(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, o: SessionOptions): void {
    stream.on('error', () => undefined);
    const p = String(headers[':path']);
    const reply = (messages: Buffer[]) => {
      if (stream.destroyed) return;
      if (!stream.headersSent)
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      for (const b of messages) stream.write(frame(b));
    };
    const end = (status = 0, message = '') => {
      if (stream.destroyed) return;
      reply([]);
      stream.once('wantTrailers', () =>
        stream.sendTrailers({ 'grpc-status': String(status), ...(message ? { 'grpc-message': message } : {}) }),
      );
      stream.end();
    };
    if (p === '/grpc.health.v1.Health/Check') {
      stream.resume();
      stream.once('end', () => {
        reply([encode(m.HealthCheckResponse, { status: 1 })]);
        end();
      });
      return;
    }
    if (p !== '/moby.filesync.v1.FileSync/DiffCopy') {
      stream.resume();
      end(12, 'unknown method');
      return;
    }
    const values = (k: string) => {
      const v = headers[k];
      return v === undefined ? [] : Array.isArray(v) ? v : String(v).split(', ');
    };
    const sync: SyncCall = {
      dirName: String(headers['dir-name'] ?? ''),
      followPaths: values('followpaths'),
      excludes: values('exclude-patterns'),
      received: [],
    };
    this.syncs.push(sync);
    void this.send(stream, sync, o, reply, end);
  }

  /** The fsutil sender: STATs, an empty STAT, DATA for each REQ, FIN for FIN. */
  private async send(
    stream: http2.ServerHttp2Stream,
    sync: SyncCall,
    o: SessionOptions,
    reply: (b: Buffer[]) => void,
    end: (status?: number, message?: string) => void,
  ): Promise<void> {
    const packet = (p: Msg) => encode(m.Packet, p);
    const raw = o.raw?.(sync);
    const root = o.dirs?.[sync.dirName];
    let stats: FileStat[] = [];
    if (!raw) {
      if (!root) {
        stream.resume();
        return end(2, `no access allowed to dir "${sync.dirName}"`);
      }
      const excluded = sync.excludes.length ? ignoreMatcher(sync.excludes) : () => false;
      const follow = sync.followPaths;
      stats = (await walk(root, excluded)).filter(
        (s) => !follow.length || follow.some((f) => f === s.path || f.startsWith(`${s.path}/`)),
      );
      reply([...stats.map((s) => packet({ type: m.PacketType.STAT, stat: statMessage(s) })), packet({})]);
    } else reply(raw.map(packet));
    const deframer = new Deframer();
    stream.on('data', (c: Buffer) => {
      for (const b of deframer.push(c)) {
        const p = decode(m.Packet, b);
        sync.received.push(p);
        const type = Number(p.type ?? 0);
        if (raw) {
          if (type === m.PacketType.FIN) end();
          continue;
        }
        if (type === m.PacketType.REQ) {
          const s = stats[Number(p.ID ?? 0)];
          const data = s ? readFileSync(path.join(root!, s.path)) : Buffer.alloc(0);
          const chunks: Buffer[] = [];
          for (let at = 0; at < data.length; at += 32 << 10)
            chunks.push(packet({ type: m.PacketType.DATA, ID: p.ID, data: data.subarray(at, at + (32 << 10)) }));
          reply([...chunks, packet({ type: m.PacketType.DATA, ID: p.ID })]);
        } else if (type === m.PacketType.FIN) {
          reply([packet({ type: m.PacketType.FIN })]);
          end();
        }
      }
    });
  }

  close(): void {
    this.server.destroy();
    this.socket.destroy();
  }
}

/** A vertex as the printers see it, folded from the Status stream. */
export interface SeenVertex {
  digest: string;
  name: string;
  cached: boolean;
  started: boolean;
  completed: boolean;
  error?: string;
  /** Its logs, in order. */
  logs: string;
  /** Whether a log came after the vertex completed (buildx prints those as #0). */
  lateLog: boolean;
  /** Its status rows by ID, with their last `current`. */
  rows: Map<string, { current: bigint; completed: boolean }>;
}

/** Folds StatusResponse messages into vertices, in order of first appearance. */
export function vertices(messages: Msg[]): SeenVertex[] {
  const byDigest = new Map<string, SeenVertex>();
  const get = (digest: string) => {
    let v = byDigest.get(digest);
    if (!v) {
      v = {
        digest,
        name: '',
        cached: false,
        started: false,
        completed: false,
        logs: '',
        lateLog: false,
        rows: new Map(),
      };
      byDigest.set(digest, v);
    }
    return v;
  };
  for (const msg of messages) {
    for (const x of (msg.vertexes as Msg[] | undefined) ?? []) {
      const v = get(String(x.digest));
      v.name = String(x.name ?? '');
      v.cached ||= !!x.cached;
      v.started ||= !!x.started;
      v.completed ||= !!x.completed;
      if (x.error) v.error = String(x.error);
    }
    for (const s of (msg.statuses as Msg[] | undefined) ?? []) {
      get(String(s.vertex)).rows.set(String(s.ID), {
        current: (s.current as bigint | undefined) ?? 0n,
        completed: !!s.completed,
      });
    }
    for (const l of (msg.logs as Msg[] | undefined) ?? []) {
      const v = get(String(l.vertex));
      if (v.completed) v.lateLog = true;
      v.logs += Buffer.from(l.msg as Buffer).toString('utf8');
    }
  }
  return [...byDigest.values()];
}

export interface BuildOptions {
  /** The context directory (the `context` FileSync dir). */
  context: string;
  /** The directory of the Dockerfile (default: the context). */
  dockerfileDir?: string;
  frontendAttrs?: Record<string, string>;
  /** ExporterAttrs.name: comma-joined tags. */
  tags?: string;
  exporter?: string;
  /** Hooks for faults: the session's raw packets. */
  raw?: RawPackets;
  /** Called once the build's LLBBridge.Solve is sent (e.g. to close the session mid-build). */
  during?: (b: { session: Session; control: Control; ref: string }) => void | Promise<void>;
  /** Leave the session open after the build (the caller closes it). */
  keepSession?: boolean;
  /** The methods the build's session lists (default: buildx's). */
  methods?: string[];
}

export interface BuildResult {
  ref: string;
  solve: Answer;
  status: Answer;
  bridge?: Answer;
  vertices: SeenVertex[];
  session: Session;
  /** The image id ExporterResponse names. */
  imageId?: string;
}

/**
 * `docker build` as buildx v0.10.5 runs it against a docker-driver daemon:
 * ListWorkers, the capability probe (Solve{Internal} + Status + Ping + Return{}),
 * then Status before Solve, Ping, LLBBridge.Solve{dockerfile.v0}, and Return with
 * its result (or its error).
 */
export async function buildxBuild(socketPath: string, o: BuildOptions): Promise<BuildResult> {
  const control = await Control.open(socketPath);
  try {
    await control.call(`${CONTROL}/ListWorkers`, m.ListWorkersRequest, m.ListWorkersResponse, {});
    // The probe: a session with Health only.
    const probeRef = newId();
    const probeSession = await Session.open(socketPath, { methods: BUILD_METHODS.slice(0, 2) });
    const probe = control.start(`${CONTROL}/Solve`, m.SolveRequest, m.SolveResponse, {
      Ref: probeRef,
      Session: probeSession.id,
      Cache: {},
      Internal: true,
    });
    const probeStatus = control.start(`${CONTROL}/Status`, m.StatusRequest, m.StatusResponse, { Ref: probeRef });
    await control.call(`${BRIDGE}/Ping`, m.PingRequest, m.PongResponse, {}, probeRef);
    await control.call(`${BRIDGE}/Return`, m.ReturnRequest, m.ReturnResponse, { result: { ref: {} } }, probeRef);
    const probed = await drain(probe);
    await drain(probeStatus);
    probeSession.close();
    if (probed.code !== 0) throw new Error(`the probe failed: ${probed.message}`);

    const ref = newId();
    const attrs = { filename: 'Dockerfile', ...o.frontendAttrs };
    // Status first, as buildx's goroutines happen to send it.
    const status = control.start(`${CONTROL}/Status`, m.StatusRequest, m.StatusResponse, { Ref: ref });
    const sessionId = newId();
    const solve = control.start(`${CONTROL}/Solve`, m.SolveRequest, m.SolveResponse, {
      Ref: ref,
      Exporter: o.exporter ?? 'moby',
      ExporterAttrs: o.tags ? { name: o.tags } : {},
      Session: sessionId,
      FrontendAttrs: attrs,
      Cache: {},
    });
    // Ping goes before the session is upgraded.
    const ping = control.call(`${BRIDGE}/Ping`, m.PingRequest, m.PongResponse, {}, ref);
    const session = await Session.open(socketPath, {
      id: sessionId,
      dirs: { context: o.context, dockerfile: o.dockerfileDir ?? o.context },
      ...(o.methods ? { methods: o.methods } : {}),
      ...(o.raw ? { raw: o.raw } : {}),
    });
    await ping;
    const bridging = control.call(
      `${BRIDGE}/Solve`,
      m.GatewaySolveRequest,
      m.GatewaySolveResponse,
      { Frontend: 'dockerfile.v0', FrontendOpt: attrs, allowResultReturn: true, allowResultArrayRef: true },
      ref,
    );
    await o.during?.({ session, control, ref });
    const bridge = await bridging;
    const result = bridge.messages[0]?.result as Msg | undefined;
    await control.call(
      `${BRIDGE}/Return`,
      m.ReturnRequest,
      m.ReturnResponse,
      bridge.code === 0 ? { result } : { error: { code: bridge.code, message: bridge.message } },
      ref,
    );
    const solved = await drain(solve);
    const statusAnswer = await drain(status);
    if (!o.keepSession) session.close();
    const response = solved.messages[0]?.ExporterResponse as Record<string, string> | undefined;
    return {
      ref,
      solve: solved,
      status: statusAnswer,
      bridge,
      vertices: vertices(statusAnswer.messages),
      session,
      ...(response?.['containerimage.digest'] ? { imageId: response['containerimage.digest'] } : {}),
    };
  } finally {
    control.close();
  }
}
