// The project's stand-in for buildx v0.10.5 (CI has no buildx): the two
// connections of docs/buildkit/protocol.md — `POST /grpc`, an HTTP/2 client
// calling berthd's Control and LLBBridge, and `POST /session`, an HTTP/2
// *server* serving Health and FileSync (an fsutil sender over a temp dir) —
// and buildx's order of calls for `docker build` (protocol.md §3.1).
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import path from 'node:path';
import { type FileStat, statMessage, walk } from '../../src/api/buildkit/fsutil.js';
import { type CallStatus, type ClientCall, startCall } from '../../src/api/buildkit/grpc-client.js';
import { Deframer, frame } from '../../src/api/buildkit/grpc.js';
import * as m from '../../src/api/buildkit/proto/messages.js';
import { decode, encode, type MessageType, type Msg } from '../../src/api/buildkit/proto/wire.js';
import { ignoreMatcher } from '../../src/engine/builder/dockerignore.js';
import type { Daemon } from './daemon.js';
import { tarEntries } from './tar.js';
import { scratchDir } from './tmp.js';

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
  '/moby.sshforward.v1.SSH/ForwardAgent',
];

export const FILESEND_METHOD = '/moby.filesync.v1.FileSend/DiffCopy';
export const UPLOAD_METHOD = '/moby.upload.v1.Upload/Pull';

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

/** The fake ssh agent's one identity: what a RUN's `ssh-add -l` would list through the forwarded socket. */
export const FAKE_AGENT_KEY = { blob: Buffer.from('berth-fake-key'), comment: 'berth-test-agent' };

export interface SessionOptions {
  id?: string;
  /** FileSync directories by name (`context`, `dockerfile`). */
  dirs?: Record<string, string>;
  methods?: string[];
  /** Overrides the sender for a directory (return undefined to serve it normally). */
  raw?: RawPackets;
  /** Secrets/GetSecret: the client's secrets by id. */
  secrets?: Record<string, string>;
  /** SSH: the ids of the fake agents the client has (`default` is asked for as ""). */
  sshAgents?: string[];
  /** Auth/Credentials: by the Host asked for. */
  credentials?: Record<string, { username: string; secret: string }>;
  /** Health/Check is never answered (a client that hangs with its socket open). */
  healthHang?: boolean;
  /** Upload/Pull: the bytes (a context tar, as `docker build - < ctx.tar` reads stdin). */
  upload?: Buffer;
  /** FileSend: what the build exports (local: fsutil packets; tar: BytesMessages). */
  output?: 'local' | 'tar';
  /** FileSend: called with the session at the output's first message (e.g. to go away mid-export). */
  onOutput?: (session: Session) => void;
  /** FileSend (local): the receiver's packets instead of its REQs and FIN, given the STATs it got (hostile clients). */
  receiverRaw?: (stats: Msg[], session: Session) => Msg[];
}

/** A session's DiffCopy call as berthd made it. */
export interface SyncCall {
  dirName: string;
  followPaths: string[];
  excludes: string[];
  /** The packets berthd sent (REQ, FIN). */
  received: Msg[];
}

/** What berthd sent through FileSend: the files of a local output, or a tar's bytes. */
export interface Output {
  /** Local: the STATs in the order sent, with each regular file's bytes. */
  entries: Array<{ stat: Msg; data?: Buffer }>;
  /** Tar: the bytes. */
  tar?: Buffer;
  /** The sender's ERR packet's text. */
  error?: string;
  /** What the receiver found wrong in the sender's packets. */
  fault?: string;
  metadata: http2.IncomingHttpHeaders;
}

/** One call berthd made on the session: its path and metadata. */
export interface SessionCall {
  path: string;
  headers: http2.IncomingHttpHeaders;
  /** The request message, for unary calls. */
  request?: Msg;
}

/** A call's framing on the session's server side: messages in, messages and trailers out. */
class Served {
  private readonly deframer = new Deframer();
  constructor(readonly stream: http2.ServerHttp2Stream) {
    stream.on('error', () => undefined);
  }

  send(type: MessageType, messages: Msg[]): void {
    if (this.stream.destroyed) return;
    if (!this.stream.headersSent)
      this.stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    for (const msg of messages) this.stream.write(frame(encode(type, msg)));
  }

  end(status = 0, message = ''): void {
    if (this.stream.destroyed || this.stream.writableEnded) return;
    this.send(m.BytesMessage, []);
    this.stream.once('wantTrailers', () =>
      this.stream.sendTrailers({
        'grpc-status': String(status),
        ...(message ? { 'grpc-message': encodeURIComponent(message) } : {}),
      }),
    );
    this.stream.end();
  }

  /** Each message of the call as it comes; `end` when the caller half-closes. */
  read(type: MessageType, each: (msg: Msg) => void, end: () => void = () => undefined): void {
    this.stream.on('data', (c: Buffer) => {
      for (const b of this.deframer.push(c)) each(decode(type, b));
    });
    this.stream.once('end', end);
  }

  /** The call's one request. */
  unary(type: MessageType): Promise<Msg> {
    return new Promise((resolve) => {
      let got: Msg = {};
      this.read(
        type,
        (msg) => {
          got = msg;
        },
        () => resolve(got),
      );
    });
  }
}

/** The fake agent: answers SSH_AGENTC_REQUEST_IDENTITIES (11) with FAKE_AGENT_KEY, anything else with SSH_AGENT_FAILURE (5). */
function fakeAgent(request: Buffer): Buffer {
  const str = (b: Buffer) => Buffer.concat([u32(b.length), b]);
  const body =
    request[0] === 11
      ? Buffer.concat([Buffer.from([12]), u32(1), str(FAKE_AGENT_KEY.blob), str(Buffer.from(FAKE_AGENT_KEY.comment))])
      : Buffer.from([5]);
  return Buffer.concat([u32(body.length), body]);
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

/** The `/session` connection: buildx's side, serving Health, FileSync, FileSend, Secrets, SSH, Auth and Upload. */
export class Session {
  readonly syncs: SyncCall[] = [];
  readonly calls: SessionCall[] = [];
  readonly outputs: Output[] = [];
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
    server.on('stream', (stream, h) => session.serve(new Served(stream), h, o));
    socket.resume();
    return session;
  }

  private serve(call: Served, headers: http2.IncomingHttpHeaders, o: SessionOptions): void {
    const p = String(headers[':path']);
    const record: SessionCall = { path: p, headers };
    this.calls.push(record);
    const unary = async (req: MessageType, answer: (msg: Msg) => [MessageType, Msg] | [number, string]) => {
      const msg = await call.unary(req);
      record.request = msg;
      const a = answer(msg);
      if (typeof a[0] === 'number') call.end(a[0], String(a[1]));
      else {
        call.send(a[0], [a[1] as Msg]);
        call.end();
      }
    };
    switch (p) {
      case '/grpc.health.v1.Health/Check':
        if (o.healthHang) call.stream.resume();
        else void unary(m.HealthCheckRequest, () => [m.HealthCheckResponse, { status: 1 }]);
        return;
      case '/moby.buildkit.secrets.v1.Secrets/GetSecret':
        void unary(m.GetSecretRequest, (req) => {
          const v = o.secrets?.[String(req.ID ?? '')];
          return v === undefined
            ? [5, `secret ${String(req.ID)} not found`]
            : [m.GetSecretResponse, { data: Buffer.from(v) }];
        });
        return;
      case '/moby.sshforward.v1.SSH/CheckAgent':
        void unary(m.CheckAgentRequest, (req) => {
          const id = String(req.ID ?? '') || 'default';
          return o.sshAgents?.includes(id) ? [m.CheckAgentResponse, {}] : [2, `unset ssh forward key ${id}`];
        });
        return;
      case '/moby.sshforward.v1.SSH/ForwardAgent': {
        const id = String(headers['buildkit.ssh.id'] ?? '') || 'default';
        if (!o.sshAgents?.includes(id)) {
          call.stream.resume();
          call.end(2, `unset ssh forward key ${id}`);
          return;
        }
        // The agent's protocol: uint32 length, then the message; one answer per request.
        let pending = Buffer.alloc(0);
        call.read(
          m.BytesMessage,
          (msg) => {
            pending = Buffer.concat([pending, (msg.data as Buffer | undefined) ?? Buffer.alloc(0)]);
            while (pending.length >= 4 && pending.length >= 4 + pending.readUInt32BE(0)) {
              const n = pending.readUInt32BE(0);
              call.send(m.BytesMessage, [{ data: fakeAgent(pending.subarray(4, 4 + n)) }]);
              pending = pending.subarray(4 + n);
            }
          },
          () => call.end(),
        );
        return;
      }
      case '/moby.filesync.v1.Auth/Credentials':
        void unary(m.CredentialsRequest, (req) => {
          const c = o.credentials?.[String(req.Host ?? '')];
          return [m.CredentialsResponse, c ? { Username: c.username, Secret: c.secret } : {}];
        });
        return;
      case '/moby.upload.v1.Upload/Pull': {
        call.stream.resume();
        const data = o.upload ?? Buffer.alloc(0);
        const chunks: Msg[] = [];
        for (let at = 0; at < data.length; at += 4096) chunks.push({ data: data.subarray(at, at + 4096) });
        call.send(m.BytesMessage, chunks);
        call.end();
        return;
      }
      case '/moby.filesync.v1.FileSend/DiffCopy':
        this.receive(call, headers, o);
        return;
      case '/moby.filesync.v1.FileSync/DiffCopy':
        break;
      default:
        call.stream.resume();
        call.end(12, 'unknown method');
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
    void this.send(call, sync, o);
  }

  /**
   * FileSend, buildx's receiving end: a tar's BytesMessages until berthd
   * half-closes, or (an output that starts with a STAT) fsutil packets:
   * every STAT, a REQ for each regular file, DATA until the empty one, FIN.
   */
  private receive(call: Served, headers: http2.IncomingHttpHeaders, o: SessionOptions): void {
    const out: Output = { entries: [], metadata: headers };
    this.outputs.push(out);
    const chunks: Buffer[] = [];
    let mode: 'tar' | 'local' | undefined;
    const files = new Map<number, { data: Buffer[]; ended: boolean }>();
    let listed = false;
    let wanted = 0;
    const decodeAs = (b: Buffer): Msg => decode(m.Packet, b);
    const deframer = new Deframer();
    const finish = () => {
      if (mode === 'tar') out.tar = Buffer.concat(chunks);
      call.end();
    };
    call.stream.on('data', (c: Buffer) => {
      for (const b of deframer.push(c)) {
        if (!mode) o.onOutput?.(this);
        mode ??= o.output ?? 'local';
        if (mode === 'tar') {
          chunks.push(decode(m.BytesMessage, b).data as Buffer);
          continue;
        }
        const p = decodeAs(b);
        const type = Number(p.type ?? 0);
        if (type === m.PacketType.ERR) {
          out.error = Buffer.from((p.data as Buffer) ?? []).toString();
          continue;
        }
        if (!listed && type === m.PacketType.STAT) {
          if (p.stat) {
            out.entries.push({ stat: p.stat as Msg });
            continue;
          }
          listed = true;
          if (o.receiverRaw) {
            call.send(
              m.Packet,
              o.receiverRaw(
                out.entries.map((e) => e.stat),
                this,
              ),
            );
            continue;
          }
          const reqs: Msg[] = [];
          out.entries.forEach((e, id) => {
            const mode = Number(e.stat.mode ?? 0);
            if ((mode & 0x8ff80000) === 0 && !e.stat.linkname) {
              files.set(id, { data: [], ended: false });
              reqs.push({ type: m.PacketType.REQ, ID: id });
            }
          });
          wanted = reqs.length;
          call.send(m.Packet, reqs.length ? reqs : [{ type: m.PacketType.FIN }]);
          continue;
        }
        if (type === m.PacketType.DATA) {
          const id = Number(p.ID ?? 0);
          const f = files.get(id);
          if (!f) {
            out.fault = `invalid file request ${id}`;
            continue;
          }
          const data = (p.data as Buffer | undefined) ?? Buffer.alloc(0);
          if (data.length) f.data.push(data);
          else {
            f.ended = true;
            out.entries[id]!.data = Buffer.concat(f.data);
            if (--wanted === 0) call.send(m.Packet, [{ type: m.PacketType.FIN }]);
          }
        }
      }
    });
    call.stream.once('end', finish);
  }

  /** The fsutil sender: STATs, an empty STAT, DATA for each REQ, FIN for FIN. */
  private async send(call: Served, sync: SyncCall, o: SessionOptions): Promise<void> {
    const raw = o.raw?.(sync);
    const root = o.dirs?.[sync.dirName];
    let stats: FileStat[] = [];
    if (!raw) {
      if (!root) {
        call.stream.resume();
        return call.end(2, `no access allowed to dir "${sync.dirName}"`);
      }
      const excluded = sync.excludes.length ? ignoreMatcher(sync.excludes) : () => false;
      const follow = sync.followPaths;
      stats = (await walk(root, excluded)).filter(
        (s) => !follow.length || follow.some((f) => f === s.path || f.startsWith(`${s.path}/`)),
      );
      call.send(m.Packet, [...stats.map((s) => ({ type: m.PacketType.STAT, stat: statMessage(s) })), {}]);
    } else call.send(m.Packet, raw);
    call.read(m.Packet, (p) => {
      sync.received.push(p);
      const type = Number(p.type ?? 0);
      if (raw) {
        if (type === m.PacketType.FIN) call.end();
        return;
      }
      if (type === m.PacketType.REQ) {
        const s = stats[Number(p.ID ?? 0)];
        const data = s ? readFileSync(path.join(root!, s.path)) : Buffer.alloc(0);
        const chunks: Msg[] = [];
        for (let at = 0; at < data.length; at += 32 << 10)
          chunks.push({ type: m.PacketType.DATA, ID: p.ID, data: data.subarray(at, at + (32 << 10)) });
        call.send(m.Packet, [...chunks, { type: m.PacketType.DATA, ID: p.ID }]);
      } else if (type === m.PacketType.FIN) {
        call.send(m.Packet, [{ type: m.PacketType.FIN }]);
        call.end();
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
  /** The methods the build's session lists (default: buildx's, with FileSend for a local or tar exporter and Upload for `upload`). */
  methods?: string[];
  /** ExporterAttrs beyond `name`. */
  exporterAttrs?: Record<string, string>;
  /** What the session serves besides the context: secrets, agents, credentials, an upload, a hostile receiver. */
  serve?: Pick<SessionOptions, 'secrets' | 'sshAgents' | 'credentials' | 'upload' | 'receiverRaw' | 'onOutput'>;
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
      ExporterAttrs: { ...o.exporterAttrs, ...(o.tags ? { name: o.tags } : {}) },
      Session: sessionId,
      FrontendAttrs: attrs,
      Cache: {},
    });
    // Ping goes before the session is upgraded.
    const ping = control.call(`${BRIDGE}/Ping`, m.PingRequest, m.PongResponse, {}, ref);
    const files = o.exporter === 'local' || o.exporter === 'tar';
    const session = await Session.open(socketPath, {
      id: sessionId,
      dirs: { context: o.context, dockerfile: o.dockerfileDir ?? o.context },
      methods: o.methods ?? [
        ...(o.serve?.upload ? [UPLOAD_METHOD] : []),
        ...BUILD_METHODS,
        ...(files ? [FILESEND_METHOD] : []),
      ],
      ...(files ? { output: o.exporter as 'local' | 'tar' } : {}),
      ...(o.raw ? { raw: o.raw } : {}),
      ...o.serve,
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

/** A context directory holding `files` (path → text). */
export function contextDir(files: Record<string, string>): string {
  const dir = scratchDir('bk-ctx-');
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    writeFileSync(path.join(dir, name), text);
  }
  return dir;
}

/** A file of an image, read through a created (never started) container and the archive API. */
export async function fileOf(daemon: Daemon, image: string, file: string): Promise<string> {
  const c = await daemon.request('POST', '/containers/create', { body: { Image: image, Cmd: ['x'] } });
  if (c.status !== 201) throw new Error(`creating a container of ${image}: ${c.status} ${c.text}`);
  try {
    const r = await daemon.request('GET', `/containers/${c.json.Id}/archive?path=${encodeURIComponent(file)}`);
    if (r.status !== 200) throw new Error(`reading ${file} of ${image}: ${r.status} ${r.text}`);
    return (await tarEntries(r.body))[0]?.[1] ?? '';
  } finally {
    await daemon.request('DELETE', `/containers/${c.json.Id}?force=1`);
  }
}
