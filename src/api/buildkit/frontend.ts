// BuildKit's `dockerfile.v0` frontend as berthd runs it: the frontend's
// attributes (what buildx puts in FrontendAttrs: `filename`, `target`,
// `build-arg:*`…) mapped onto the classic builder's request, the Dockerfile and
// the context fetched from the client's session (FileSync, two directories:
// `dockerfile` and `context`), and the build run at once ("eager": dockerd's
// BuildKit converts to LLB here and runs it later; buildx only echoes the
// result back, so the difference does not show).
import { Readable } from 'node:stream';
import tar from 'tar-stream';
import { type BuildRequest, type Engine, failedStep, readIgnoreFile, type StepEvent } from '../../engine/index.js';
import { messageOf } from '../../errors.js';
import { receiveTar } from './fsutil.js';
import { GrpcCode, GrpcError } from './grpc.js';
import * as m from './proto/messages.js';
import type { StatusFeed } from './progress.js';
import { StepVertices, Vertex } from './progress.js';
import { type ClientSession, callSession } from './session.js';
import { clientServices } from './session-services.js';

export const DOCKERFILE_FRONTEND = 'dockerfile.v0';
const DIFFCOPY = '/moby.filesync.v1.FileSync/DiffCopy';
const UPLOAD = '/moby.upload.v1.Upload/Pull';
/** The host of the URL buildx gives a context it uploads (stdin's tar): BuildKit reads it through the session. */
const SESSION_HOST = 'buildkit-session';
/** The Dockerfile and its .dockerignore are read whole; larger ones are refused. */
const MAX_SMALL_FILE = 16 << 20;

const refuse = (message: string) => new GrpcError(GrpcCode.INVALID_ARGUMENT, message);

/**
 * Attributes BuildKit's Dockerfile frontend honours that berthd does not (yet);
 * refused by name rather than dropped.
 */
const REFUSED: Array<[RegExp, string]> = [
  [/^context:/, 'named build contexts (--build-context) are'],
  [/^cache-imports$/, 'cache imports (--cache-from) are'],
  [/^attest:/, 'attestations are'],
  [/^ulimit$/, 'build ulimits (--ulimit) are'],
  [/^cgroup-parent$/, 'a cgroup parent for builds (--cgroup-parent) is'],
  [/^multi-platform$/, 'multi-platform builds are'],
  [/^hostname$/, 'a build hostname is'],
];
/**
 * Informational attributes that change nothing in a build (BuildKit's frontend
 * reads them for itself), and those runDockerfile reads (`context`,
 * `dockerfilekey`: where the context and the Dockerfile come from).
 */
const IGNORED = new Set(['frontend.caps', 'dockerfilekey', 'contextkey', 'context']);

/** The part of the classic build request that the frontend's attributes make. */
export function requestFromAttrs(attrs: Record<string, string>): Omit<BuildRequest, 'body' | 'auths'> {
  const req: Omit<BuildRequest, 'body' | 'auths'> = {
    tags: [],
    buildArgs: {},
    labels: {},
    noCache: false,
    pull: false,
    rm: true,
    forceRm: true,
    quiet: false,
    cacheFrom: [],
    extraHosts: [],
    resources: {},
  };
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith('build-arg:')) req.buildArgs[k.slice('build-arg:'.length)] = v;
    else if (k.startsWith('label:')) req.labels[k.slice('label:'.length)] = v;
    else if (k === 'filename') req.dockerfile = v;
    else if (k === 'target') {
      if (v) req.target = v;
    } else if (k === 'no-cache')
      req.noCache = true; // "" = every stage; a stage list is taken as every stage too
    else if (k === 'image-resolve-mode') {
      if (v === 'pull') req.pull = true;
      else if (v !== 'default' && v !== 'local' && v !== '') throw refuse(`invalid image-resolve-mode: ${v}`);
    } else if (k === 'force-network-mode') {
      if (v === 'none' || v === 'host') req.networkMode = v;
      else if (v !== '' && v !== 'sandbox') throw refuse(`invalid network mode ${JSON.stringify(v)}`);
    } else if (k === 'add-hosts') {
      // BuildKit's `host=ip`, comma-separated; the classic builder's `host:ip`.
      for (const h of v.split(',').filter(Boolean)) {
        const eq = h.indexOf('=');
        if (eq < 1) throw refuse(`invalid key-value pair "${h}": expected host=ip`);
        req.extraHosts.push(`${h.slice(0, eq)}:${h.slice(eq + 1)}`);
      }
    } else if (k === 'shm-size') {
      const n = Number(v);
      if (!/^\d+$/.test(v) || !Number.isSafeInteger(n)) throw refuse(`invalid shm-size: ${v}`);
      if (n) req.resources.shmSize = n;
    } else if (k === 'platform') {
      if (v.includes(',')) throw refuse('berthd builds for one platform only');
      if (v) req.platform = v;
    } else if (IGNORED.has(k)) continue;
    else {
      const refused = REFUSED.find(([re]) => re.test(k));
      throw refuse(
        refused
          ? `${refused[1]} not supported by berthd's BuildKit API yet`
          : `the frontend attribute ${k} is not supported by berthd`,
      );
    }
  }
  return req;
}

/** Everything a FileSync call of one directory receives, as a tar stream. */
function syncDir(
  session: ClientSession,
  dirName: string,
  opts: { followPaths?: string[]; exclude?: string[] },
  progress: (bytes: number) => void,
): Readable {
  const metadata: Record<string, string | string[]> = { 'dir-name': dirName };
  if (opts.followPaths?.length) metadata.followpaths = opts.followPaths;
  if (opts.exclude?.length) metadata['exclude-patterns'] = opts.exclude;
  return receiveTar(callSession(session, DIFFCOPY, m.Packet, m.Packet, metadata), progress);
}

/**
 * The bytes the client uploads (`docker build - < ctx.tar`: the context as
 * buildx reads it from stdin) through the session's Upload/Pull, as a stream;
 * the client's error, or a lost session, errors it.
 */
function uploaded(session: ClientSession, url: URL, progress: (bytes: number) => void): Readable {
  const call = callSession(session, UPLOAD, m.BytesMessage, m.BytesMessage, {
    urlhost: url.host,
    urlpath: url.pathname,
  });
  // BuildKit sends nothing on it: the client streams until it is done.
  call.end();
  async function* chunks(): AsyncGenerator<Buffer> {
    let bytes = 0;
    try {
      for (let msg = await call.next(); msg; msg = await call.next()) {
        const data = (msg.data as Buffer | undefined) ?? Buffer.alloc(0);
        bytes += data.length;
        progress(bytes);
        yield data;
      }
      const s = await call.status;
      if (s.code !== 0) throw new GrpcError(GrpcCode.UNKNOWN, `failed to read the uploaded context: ${s.message}`);
    } finally {
      call.cancel();
    }
  }
  return Readable.from(chunks());
}

/** The URL of a context the client uploads through the session (`http://buildkit-session/<id>`); undefined for any other. */
function sessionUrl(context: string): URL | undefined {
  try {
    const url = new URL(context);
    return url.protocol === 'http:' && url.host === SESSION_HOST ? url : undefined;
  } catch {
    return undefined; // a git address (git@host:repo), for the classic builder's words
  }
}

/** The regular files of a small tar, by path. */
async function readSmallTar(stream: Readable): Promise<Map<string, Buffer>> {
  const files = new Map<string, Buffer>();
  const extract = tar.extract();
  const done = new Promise<void>((resolve, reject) => {
    extract.on('entry', (h, body, next) => {
      const chunks: Buffer[] = [];
      let size = 0;
      body.on('data', (data: unknown) => {
        const c = data as Buffer;
        size += c.length;
        if (size > MAX_SMALL_FILE) extract.destroy(refuse(`${h.name} is larger than ${MAX_SMALL_FILE} bytes`));
        else chunks.push(c);
      });
      body.on('end', () => {
        if (h.type === 'file') files.set(h.name, Buffer.concat(chunks));
        next();
      });
    });
    extract.on('finish', resolve);
    extract.on('error', reject);
    stream.on('error', (e) => extract.destroy(e));
  });
  stream.pipe(extract);
  await done;
  return files;
}

/** One transfer's vertex: "[internal] load …" with its "transferring …:" row, done with the bytes it took. */
function transfer(
  feed: StatusFeed,
  name: string,
  row: string,
): { vertex: Vertex; bytes: (n: number) => void; done: () => void } {
  const vertex = new Vertex(feed, name).start();
  const counter = vertex.counter(row);
  return {
    vertex,
    bytes: counter.bytes,
    done: () => {
      counter.done();
      vertex.complete();
    },
  };
}

/** A build's error in BuildKit's words: a RUN that failed as its executor says it. */
function buildkitMessage(e: unknown): string {
  const step = failedStep(e);
  if (step) return `executor failed running [${step.command.join(' ')}]: exit code: ${step.exitCode}`;
  return messageOf(e);
}

export interface FrontendRun {
  /** The built image's id. */
  imageId: string;
}

/** A failure of the frontend; `inStep`: in a step (a failed vertex says it), else before any (BuildKit: "failed to create LLB definition"). */
export class FrontendError extends GrpcError {
  constructor(
    message: string,
    readonly inStep: boolean,
  ) {
    super(GrpcCode.UNKNOWN, message);
  }
}

/** Runs a Dockerfile build for LLBBridge.Solve: fetches the Dockerfile and the context, builds, reports. */
export async function runDockerfile(
  engine: Engine,
  session: ClientSession,
  attrs: Record<string, string>,
  feed: StatusFeed,
  signal: AbortSignal,
): Promise<FrontendRun> {
  const base = requestFromAttrs(attrs);
  const filename = base.dockerfile || 'Dockerfile';
  let contextVertex: Vertex | undefined;
  /** A remote context's vertex while the classic builder fetches it: done when the first stage starts. */
  let fetching: Vertex | undefined;
  const steps = new StepVertices(feed, () => contextVertex);
  const onStep = (e: StepEvent) => {
    fetching?.complete();
    fetching = undefined;
    steps.on(e);
  };
  try {
    // A context from elsewhere than a local dir: stdin's tar (uploaded through the session) or a URL.
    const remote = attrs.context || undefined;
    const uploadUrl = remote ? sessionUrl(remote) : undefined;
    let ignore: string[] = [];
    let separateDockerfile: BuildRequest['separateDockerfile'];
    // The Dockerfile comes from the `dockerfile` dir, unless the context is remote and holds it (no dockerfilekey).
    if (!remote || attrs.dockerfilekey) {
      const def = transfer(feed, `[internal] load build definition from ${filename}`, 'transferring dockerfile:');
      const defFiles = await readSmallTar(
        syncDir(session, 'dockerfile', { followPaths: [filename, `${filename}.dockerignore`] }, def.bytes),
      );
      const file = defFiles.get(filename);
      def.done();
      if (!file)
        throw new FrontendError(`failed to read dockerfile: open ${filename}: no such file or directory`, false);
      const dockerfile = file.toString('utf8');
      let ignoreText = defFiles.get(`${filename}.dockerignore`);
      if (!remote) {
        const ign = transfer(feed, '[internal] load .dockerignore', 'transferring context:');
        if (!ignoreText) {
          const ctxFiles = await readSmallTar(
            syncDir(session, 'context', { followPaths: ['.dockerignore'] }, ign.bytes),
          );
          ignoreText = ctxFiles.get('.dockerignore');
        }
        ign.done();
      }
      ignore = readIgnoreFile(ignoreText?.toString('utf8') ?? '');
      const { syntax } = engine.builds.checkDockerfile(dockerfile, filename);
      if (syntax)
        new Vertex(feed, `[internal] ${syntax}: berth's built-in Dockerfile 1.x syntax, no image pulled`)
          .start()
          .complete();
      separateDockerfile = { name: filename, text: dockerfile, ignore };
    }

    let body: Readable;
    let url: string | undefined;
    if (uploadUrl) {
      const ctx = transfer(feed, '[internal] load remote build context', 'transferring context:');
      contextVertex = ctx.vertex;
      body = uploaded(session, uploadUrl, ctx.bytes);
      body.once('end', ctx.done);
      body.once('error', (e) => ctx.vertex.complete(messageOf(e)));
    } else if (remote) {
      // Fetched by the classic builder as its `remote` (an http(s) tarball or Dockerfile; git refused there, by name).
      contextVertex = fetching = new Vertex(feed, '[internal] load remote build context').start();
      url = remote;
      body = Readable.from([]);
    } else {
      const ctx = transfer(feed, '[internal] load build context', 'transferring context:');
      contextVertex = ctx.vertex;
      body = syncDir(session, 'context', { exclude: ignore }, ctx.bytes);
      body.once('end', ctx.done);
      body.once('error', (e) => ctx.vertex.complete(messageOf(e)));
    }
    const imageId = await engine.builds.build(
      {
        ...base,
        body,
        ...(url ? { remote: url } : {}),
        auths: {},
        ...(separateDockerfile ? { separateDockerfile } : {}),
        steps: onStep,
        session: clientServices(session, signal),
      },
      // The classic stream's text is not BuildKit's: its clients read the vertices (and a base image's pull as rows).
      (e) => {
        if ('pull' in e) steps.pull(e.pull);
      },
      signal,
    );
    return { imageId };
  } catch (e) {
    if (signal.aborted) throw e;
    if (e instanceof GrpcError && !(e instanceof FrontendError) && e.code !== GrpcCode.UNKNOWN) throw e;
    const message = buildkitMessage(e);
    fetching?.complete(message);
    if (steps.fail(message)) throw new FrontendError(message, true);
    throw new FrontendError(
      e instanceof FrontendError
        ? `failed to solve with frontend ${DOCKERFILE_FRONTEND}: ${message}`
        : `failed to solve with frontend ${DOCKERFILE_FRONTEND}: failed to create LLB definition: ${message}`,
      false,
    );
  }
}
